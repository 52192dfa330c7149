/* ngx_http_porteiro_module.c — porteiro inside nginx: a fleet-wide
 * limit_req. Each worker has one porteiro handle on its own event loop
 * (ngx_porteiro_loop.c); a request's limits are decided in one async check
 * (all-or-nothing) while the request waits, suspended, in the preaccess
 * phase (where limit_req runs); the callback resumes it. docs/nginx.md. */
#include <ngx_config.h>
#include <ngx_core.h>
#include <ngx_http.h>

#include "ngx_porteiro_loop.h"
#include "porteiro.h"
#include "porteiro_config.h"

/* The tag of a location's multi-key checks (several porteiro_limit lines):
 * a namespace in each line's key after its own hash tag, never a hash tag
 * (prefix:{KEY}=3:ngx:..., docs/cluster.md "Keys"): each line's counter is
 * on its own client key's Cluster slot. */
#define NP_TAG "ngx"

/* ---- configuration ---- */

/* One porteiro_limit directive. */
typedef struct {
    ngx_http_complex_value_t key;
    porteiro_limit limits[PORTEIRO_MAX_LIMITS];
    size_t nlimits;
    ngx_str_t policy;                  /* policy=NAME, else empty */
    bool shadow;                       /* the policy's shadow mode */
    ngx_http_complex_value_t *cost_cv; /* cost=$var, else NULL */
    int64_t cost;                      /* cost=N (1 by default) */
    /* settle=$var (issue 38): the real cost, read in the log phase; the
     * cost above was the estimate. NULL: no settle. */
    ngx_http_complex_value_t *settle_cv;
    porteiro_quota_lease policy_lease; /* the policy's lease: (policy=NAME) */
} np_limit_t;

typedef struct {
    ngx_str_t redis;
    ngx_str_t tls_ca, tls_cert, tls_key, tls_server_name;
    ngx_str_t config_file;
    porteiro_config *config; /* porteiro_config: read at configuration time */
    ngx_msec_t timeout;
    bool used;     /* some porteiro_limit exists */
    porteiro_t *p; /* the worker's handle (init_process) */
    /* When p could not be made: a handle of the memory backend, for the
     * locations with porteiro_on_error local (L / local_divisor). */
    porteiro_t *local;
    int local_divisor;
    ngx_queue_t waiters; /* the checks in flight (np_waiter.link) */
    bool exiting;        /* exit_process: nothing is resumed any more */
} np_main_conf_t;

typedef struct {
    ngx_array_t *limits; /* of np_limit_t; NULL: inherited */
    ngx_uint_t status;
    ngx_flag_t dry_run;
    ngx_uint_t log_level;
    ngx_flag_t headers;
    ngx_uint_t on_error;
    ngx_msec_t delay;
    /* porteiro_lease: max_ms NGX_CONF_UNSET when no level says (then a
     * lone policy=NAME uses its policy's lease:), 0 for off. */
    porteiro_quota_lease lease;
} np_loc_conf_t;

enum { NP_OPEN = 0, NP_CLOSED = 1, NP_LOCAL = 2 };

/* ---- per request ---- */

typedef enum {
    NP_NONE = 0,
    NP_PASSED,
    NP_REJECTED,
    NP_DELAYED,
    NP_REJECTED_DRY_RUN,
    NP_FALLBACK
} np_outcome;

static ngx_str_t np_outcome_names[] = {
    ngx_null_string,       ngx_string("PASSED"),           ngx_string("REJECTED"),
    ngx_string("DELAYED"), ngx_string("REJECTED_DRY_RUN"), ngx_string("FALLBACK"),
};

typedef struct np_waiter np_waiter;

typedef struct {
    np_waiter *waiter;      /* the check in flight, NULL once answered */
    unsigned suspended : 1; /* the handler returned NGX_DONE (count++) */
    unsigned done : 1;      /* the decision is in */
    unsigned delay_done : 1;
    unsigned held : 1;       /* on porteiro_delay's timer, units taken */
    unsigned redirected : 1; /* found again after an internal redirect */
    unsigned local_only : 1; /* decided by m->local: a fallback */
    porteiro_t *h;           /* the handle that decides (a hold's give-back) */
    int64_t cost;            /* of the single check (one porteiro_limit line) */
    ngx_str_t key;           /* the single check's key, as porteiro got it */
    np_limit_t *settle;      /* a single check's line with settle=, else NULL */
    /* Several lines (a multi-key check): each item as it was checked, and
     * the line it came from (its settle=, if any). settles: some line has
     * settle= (the log phase settles them all in one call). */
    unsigned multi : 1;
    unsigned settles : 1;
    porteiro_item items[PORTEIRO_MAX_LIMITS];
    np_limit_t *item_line[PORTEIRO_MAX_LIMITS];
    ngx_msec_t decided_at; /* ngx_current_msec when the decision came */
    np_outcome outcome;
    bool rejected; /* answer with the status */
    bool have_decision;
    porteiro_decision d;
    const char *name;                           /* for the headers and the log */
    porteiro_limit limits[PORTEIRO_MAX_LIMITS]; /* in decision order */
    size_t nlimits;
    ngx_str_t keys[PORTEIRO_MAX_LIMITS]; /* each limit's client key (log) */
} np_ctx_t;

/* Lives from the check until its callback, outside the request's pool: a
 * client that leaves first detaches it (r = NULL) and the callback gives
 * back what the check took (a single check: what porteiro_refund needs is
 * kept here), else only frees it. */
struct np_waiter {
    ngx_http_request_t *r;
    np_ctx_t *ctx;
    ngx_queue_t link; /* in np_main_conf_t.waiters */
    porteiro_t *h;
    bool refundable; /* a single check: limits, key and cost below */
    porteiro_limit limits[PORTEIRO_MAX_LIMITS];
    size_t nlimits;
    int64_t cost;
    size_t key_len;
    u_char key[];
};

static ngx_int_t np_preconfiguration(ngx_conf_t *cf);
static ngx_int_t np_postconfiguration(ngx_conf_t *cf);
static void *np_create_main_conf(ngx_conf_t *cf);
static void *np_create_loc_conf(ngx_conf_t *cf);
static char *np_merge_loc_conf(ngx_conf_t *cf, void *parent, void *child);
static char *np_redis(ngx_conf_t *cf, ngx_command_t *cmd, void *conf);
static char *np_config(ngx_conf_t *cf, ngx_command_t *cmd, void *conf);
static char *np_limit(ngx_conf_t *cf, ngx_command_t *cmd, void *conf);
static char *np_tls_file(ngx_conf_t *cf, ngx_command_t *cmd, void *conf);
static char *np_lease(ngx_conf_t *cf, ngx_command_t *cmd, void *conf);
static ngx_int_t np_init_process(ngx_cycle_t *cycle);
static void np_exit_process(ngx_cycle_t *cycle);

static ngx_conf_num_bounds_t np_status_bounds = {ngx_conf_check_num_bounds, 400, 599};

static ngx_conf_enum_t np_log_levels[] = {
    {ngx_string("info"), NGX_LOG_INFO},
    {ngx_string("notice"), NGX_LOG_NOTICE},
    {ngx_string("warn"), NGX_LOG_WARN},
    {ngx_string("error"), NGX_LOG_ERR},
    {ngx_null_string, 0},
};

static ngx_conf_enum_t np_on_error[] = {
    {ngx_string("open"), NP_OPEN},
    {ngx_string("closed"), NP_CLOSED},
    {ngx_string("local"), NP_LOCAL},
    {ngx_null_string, 0},
};

static ngx_command_t np_commands[] = {
    {ngx_string("porteiro_redis"), NGX_HTTP_MAIN_CONF | NGX_CONF_TAKE1, np_redis,
     NGX_HTTP_MAIN_CONF_OFFSET, 0, NULL},
    {ngx_string("porteiro_redis_tls_ca"), NGX_HTTP_MAIN_CONF | NGX_CONF_TAKE1, np_tls_file,
     NGX_HTTP_MAIN_CONF_OFFSET, offsetof(np_main_conf_t, tls_ca), NULL},
    {ngx_string("porteiro_redis_tls_cert"), NGX_HTTP_MAIN_CONF | NGX_CONF_TAKE1, np_tls_file,
     NGX_HTTP_MAIN_CONF_OFFSET, offsetof(np_main_conf_t, tls_cert), NULL},
    {ngx_string("porteiro_redis_tls_key"), NGX_HTTP_MAIN_CONF | NGX_CONF_TAKE1, np_tls_file,
     NGX_HTTP_MAIN_CONF_OFFSET, offsetof(np_main_conf_t, tls_key), NULL},
    {ngx_string("porteiro_redis_tls_server_name"), NGX_HTTP_MAIN_CONF | NGX_CONF_TAKE1,
     ngx_conf_set_str_slot, NGX_HTTP_MAIN_CONF_OFFSET, offsetof(np_main_conf_t, tls_server_name),
     NULL},
    {ngx_string("porteiro_config"), NGX_HTTP_MAIN_CONF | NGX_CONF_TAKE1, np_config,
     NGX_HTTP_MAIN_CONF_OFFSET, 0, NULL},
    {ngx_string("porteiro_timeout"), NGX_HTTP_MAIN_CONF | NGX_CONF_TAKE1, ngx_conf_set_msec_slot,
     NGX_HTTP_MAIN_CONF_OFFSET, offsetof(np_main_conf_t, timeout), NULL},
    {ngx_string("porteiro_limit"),
     NGX_HTTP_MAIN_CONF | NGX_HTTP_SRV_CONF | NGX_HTTP_LOC_CONF | NGX_CONF_TAKE2 | NGX_CONF_TAKE3 |
         NGX_CONF_TAKE4,
     np_limit, NGX_HTTP_LOC_CONF_OFFSET, 0, NULL},
    {ngx_string("porteiro_status"),
     NGX_HTTP_MAIN_CONF | NGX_HTTP_SRV_CONF | NGX_HTTP_LOC_CONF | NGX_CONF_TAKE1,
     ngx_conf_set_num_slot, NGX_HTTP_LOC_CONF_OFFSET, offsetof(np_loc_conf_t, status),
     &np_status_bounds},
    {ngx_string("porteiro_dry_run"),
     NGX_HTTP_MAIN_CONF | NGX_HTTP_SRV_CONF | NGX_HTTP_LOC_CONF | NGX_CONF_FLAG,
     ngx_conf_set_flag_slot, NGX_HTTP_LOC_CONF_OFFSET, offsetof(np_loc_conf_t, dry_run), NULL},
    {ngx_string("porteiro_log_level"),
     NGX_HTTP_MAIN_CONF | NGX_HTTP_SRV_CONF | NGX_HTTP_LOC_CONF | NGX_CONF_TAKE1,
     ngx_conf_set_enum_slot, NGX_HTTP_LOC_CONF_OFFSET, offsetof(np_loc_conf_t, log_level),
     np_log_levels},
    {ngx_string("porteiro_headers"),
     NGX_HTTP_MAIN_CONF | NGX_HTTP_SRV_CONF | NGX_HTTP_LOC_CONF | NGX_CONF_FLAG,
     ngx_conf_set_flag_slot, NGX_HTTP_LOC_CONF_OFFSET, offsetof(np_loc_conf_t, headers), NULL},
    {ngx_string("porteiro_on_error"),
     NGX_HTTP_MAIN_CONF | NGX_HTTP_SRV_CONF | NGX_HTTP_LOC_CONF | NGX_CONF_TAKE1,
     ngx_conf_set_enum_slot, NGX_HTTP_LOC_CONF_OFFSET, offsetof(np_loc_conf_t, on_error),
     np_on_error},
    {ngx_string("porteiro_delay"),
     NGX_HTTP_MAIN_CONF | NGX_HTTP_SRV_CONF | NGX_HTTP_LOC_CONF | NGX_CONF_TAKE1,
     ngx_conf_set_msec_slot, NGX_HTTP_LOC_CONF_OFFSET, offsetof(np_loc_conf_t, delay), NULL},
    {ngx_string("porteiro_lease"),
     NGX_HTTP_MAIN_CONF | NGX_HTTP_SRV_CONF | NGX_HTTP_LOC_CONF | NGX_CONF_TAKE123, np_lease,
     NGX_HTTP_LOC_CONF_OFFSET, 0, NULL},
    ngx_null_command,
};

static ngx_http_module_t np_module_ctx = {
    np_preconfiguration, np_postconfiguration, np_create_main_conf, NULL, NULL, NULL,
    np_create_loc_conf,  np_merge_loc_conf,
};

ngx_module_t ngx_http_porteiro_module = {
    NGX_MODULE_V1,
    &np_module_ctx,
    np_commands,
    NGX_HTTP_MODULE,
    NULL,            /* init master */
    NULL,            /* init module */
    np_init_process, /* init process */
    NULL,            /* init thread */
    NULL,            /* exit thread */
    np_exit_process, /* exit process */
    NULL,            /* exit master */
    NGX_MODULE_V1_PADDING,
};

static ngx_http_output_header_filter_pt np_next_header_filter;

/* ---- directives ---- */

static void *np_create_main_conf(ngx_conf_t *cf) {
    np_main_conf_t *m = ngx_pcalloc(cf->pool, sizeof(*m));
    if (m == NULL)
        return NULL;
    m->timeout = NGX_CONF_UNSET_MSEC;
    return m;
}

static void *np_create_loc_conf(ngx_conf_t *cf) {
    np_loc_conf_t *l = ngx_pcalloc(cf->pool, sizeof(*l));
    if (l == NULL)
        return NULL;
    l->status = NGX_CONF_UNSET_UINT;
    l->dry_run = NGX_CONF_UNSET;
    l->log_level = NGX_CONF_UNSET_UINT;
    l->headers = NGX_CONF_UNSET;
    l->on_error = NGX_CONF_UNSET_UINT;
    l->delay = NGX_CONF_UNSET_MSEC;
    l->lease.max_ms = NGX_CONF_UNSET;
    return l;
}

/* As limit_req: a level with its own porteiro_limit replaces the outer
 * ones; the other directives inherit one by one. */
static char *np_merge_loc_conf(ngx_conf_t *cf, void *parent, void *child) {
    (void)cf;
    np_loc_conf_t *prev = parent, *conf = child;
    if (conf->limits == NULL)
        conf->limits = prev->limits;
    ngx_conf_merge_uint_value(conf->status, prev->status, 429);
    ngx_conf_merge_value(conf->dry_run, prev->dry_run, 0);
    ngx_conf_merge_uint_value(conf->log_level, prev->log_level, NGX_LOG_ERR);
    ngx_conf_merge_value(conf->headers, prev->headers, 0);
    ngx_conf_merge_uint_value(conf->on_error, prev->on_error, NP_OPEN);
    ngx_conf_merge_msec_value(conf->delay, prev->delay, 0);
    if (conf->lease.max_ms == NGX_CONF_UNSET) /* may stay unset: see np_loc_conf_t */
        conf->lease = prev->lease;
    if (conf->delay > PORTEIRO_MAX_WAIT_MS) {
        ngx_conf_log_error(NGX_LOG_EMERG, cf, 0, "porteiro_delay: at most 1d");
        return NGX_CONF_ERROR;
    }
    return NGX_CONF_OK;
}

static char *np_dup(ngx_conf_t *cf, ngx_str_t *s) {
    char *out = ngx_pnalloc(cf->pool, s->len + 1);
    if (out != NULL) {
        ngx_memcpy(out, s->data, s->len);
        out[s->len] = '\0';
    }
    return out;
}

static char *np_redis(ngx_conf_t *cf, ngx_command_t *cmd, void *conf) {
    (void)cmd;
    np_main_conf_t *m = conf;
    ngx_str_t *v = cf->args->elts;
    if (m->redis.data != NULL)
        return "is duplicate";
    if (m->config_file.data != NULL)
        return "cannot be used with porteiro_config (its redis: says where Redis is)";
    char *url = np_dup(cf, &v[1]), err[256];
    if (url == NULL)
        return NGX_CONF_ERROR;
    if (porteiro_parse_redis_url(url, err, sizeof(err)) != PORTEIRO_OK) {
        ngx_conf_log_error(NGX_LOG_EMERG, cf, 0, "porteiro_redis \"%V\": %s", &v[1], err);
        return NGX_CONF_ERROR;
    }
    m->redis = v[1];
    return NGX_CONF_OK;
}

/* A TLS file: its full name, and readable now (nginx -t says so with the
 * directive's FILE:LINE; the workers read it again when they start, as
 * their user). */
static char *np_tls_file(ngx_conf_t *cf, ngx_command_t *cmd, void *conf) {
    char *rv = ngx_conf_set_str_slot(cf, cmd, conf);
    if (rv != NGX_CONF_OK)
        return rv;
    ngx_str_t *field = (ngx_str_t *)((char *)conf + cmd->offset);
    if (ngx_conf_full_name(cf->cycle, field, 1) != NGX_OK)
        return NGX_CONF_ERROR;
    char *path = np_dup(cf, field);
    if (path == NULL)
        return NGX_CONF_ERROR;
    FILE *f = fopen(path, "r");
    if (f == NULL) {
        ngx_conf_log_error(NGX_LOG_EMERG, cf, ngx_errno, "%V: cannot read \"%s\"", &cmd->name,
                           path);
        return NGX_CONF_ERROR;
    }
    fclose(f);
    return NGX_CONF_OK;
}

static void np_config_free(void *data) {
    porteiro_config_free(data);
}

static char *np_config(ngx_conf_t *cf, ngx_command_t *cmd, void *conf) {
    (void)cmd;
    np_main_conf_t *m = conf;
    ngx_str_t *v = cf->args->elts;
    if (m->config_file.data != NULL)
        return "is duplicate";
    if (m->redis.data != NULL)
        return "cannot be used with porteiro_redis (the file's redis: says where Redis is)";
    ngx_str_t path = v[1];
    if (ngx_conf_full_name(cf->cycle, &path, 1) != NGX_OK)
        return NGX_CONF_ERROR;
    char *file = np_dup(cf, &path), err[512];
    if (file == NULL)
        return NGX_CONF_ERROR;
    m->config = porteiro_config_load(file, err, sizeof(err));
    if (m->config == NULL) {
        ngx_conf_log_error(NGX_LOG_EMERG, cf, 0, "porteiro_config: %s", err);
        return NGX_CONF_ERROR;
    }
    ngx_pool_cleanup_t *cln = ngx_pool_cleanup_add(cf->pool, 0);
    if (cln == NULL) {
        porteiro_config_free(m->config);
        m->config = NULL;
        return NGX_CONF_ERROR;
    }
    cln->handler = np_config_free;
    cln->data = m->config;
    m->config_file = path;
    return NGX_CONF_OK;
}

static bool np_has_prefix(ngx_str_t *s, const char *prefix) {
    size_t n = ngx_strlen(prefix);
    return s->len >= n && ngx_strncmp(s->data, prefix, n) == 0;
}

/* porteiro_lease max_ms=N max_units=N [replicas=N] | off;
 * (docs/quota_leasing.md): the bounds of a policy's lease: in porteiro's
 * YAML. */
static char *np_lease(ngx_conf_t *cf, ngx_command_t *cmd, void *conf) {
    (void)cmd;
    np_loc_conf_t *lcf = conf;
    ngx_str_t *v = cf->args->elts;
    if (lcf->lease.max_ms != NGX_CONF_UNSET)
        return "is duplicate";
    if (cf->args->nelts == 2 && v[1].len == 3 && ngx_strncmp(v[1].data, "off", 3) == 0) {
        lcf->lease = (porteiro_quota_lease){0, 0, 0};
        return NGX_CONF_OK;
    }
    porteiro_quota_lease lease = {-1, -1, -1};
    for (ngx_uint_t i = 1; i < cf->args->nelts; i++) {
        bool ms = np_has_prefix(&v[i], "max_ms="), units = np_has_prefix(&v[i], "max_units="),
             reps = np_has_prefix(&v[i], "replicas=");
        size_t skip = ms ? 7 : (units ? 10 : 9);
        ngx_int_t n = ms || units || reps ? ngx_atoi(v[i].data + skip, v[i].len - skip) : NGX_ERROR;
        if (ms && n >= 1 && n <= 60000 && lease.max_ms < 0)
            lease.max_ms = n;
        else if (units && n >= 1 && n <= PORTEIRO_MAX_AMOUNT && lease.max_units < 0)
            lease.max_units = n;
        else if (reps && n >= 0 && n <= PORTEIRO_MAX_LEASE_REPLICAS && lease.replicas < 0)
            lease.replicas = n;
        else {
            ngx_conf_log_error(NGX_LOG_EMERG, cf, 0,
                               "porteiro_lease: \"%V\" is not max_ms=1..60000, "
                               "max_units=1..1000000000 or replicas=0..16 (each once), or off",
                               &v[i]);
            return NGX_CONF_ERROR;
        }
    }
    if (lease.replicas < 0)
        lease.replicas = 0;
    if (lease.max_ms < 0 || lease.max_units < 0) {
        ngx_conf_log_error(NGX_LOG_EMERG, cf, 0,
                           "porteiro_lease: needs both max_ms=N and max_units=N (or off)");
        return NGX_CONF_ERROR;
    }
    lcf->lease = lease;
    return NGX_CONF_OK;
}

/* A complex value of a directive's parameter (which holds a variable). */
static ngx_http_complex_value_t *np_compile(ngx_conf_t *cf, ngx_str_t *text) {
    ngx_http_complex_value_t *cv = ngx_palloc(cf->pool, sizeof(*cv));
    if (cv == NULL)
        return NULL;
    ngx_http_compile_complex_value_t ccv;
    ngx_memzero(&ccv, sizeof(ccv));
    ccv.cf = cf;
    ccv.value = text;
    ccv.complex_value = cv;
    return ngx_http_compile_complex_value(&ccv) == NGX_OK ? cv : NULL;
}

/* cost=N|$var */
static char *np_cost_param(ngx_conf_t *cf, np_limit_t *l, ngx_str_t *v) {
    ngx_str_t cost = {v->len - 5, v->data + 5};
    if (l->cost_cv != NULL || l->cost != 1 || cost.len == 0) {
        ngx_conf_log_error(NGX_LOG_EMERG, cf, 0,
                           "porteiro_limit: \"%V\" is not cost=N or cost=$variable (once)", v);
        return NGX_CONF_ERROR;
    }
    if (ngx_http_script_variables_count(&cost) > 0) {
        l->cost_cv = np_compile(cf, &cost);
        return l->cost_cv != NULL ? NGX_CONF_OK : NGX_CONF_ERROR;
    }
    ngx_int_t n = ngx_atoi(cost.data, cost.len);
    if (n == NGX_ERROR || n > 1000000000) {
        ngx_conf_log_error(NGX_LOG_EMERG, cf, 0,
                           "porteiro_limit: cost \"%V\" is not a number of units "
                           "0..1000000000",
                           &cost);
        return NGX_CONF_ERROR;
    }
    l->cost = n;
    return NGX_CONF_OK;
}

/* settle=$var: a variable, read when the request ends. */
static char *np_settle_param(ngx_conf_t *cf, np_limit_t *l, ngx_str_t *v) {
    ngx_str_t settle = {v->len - 7, v->data + 7};
    if (l->settle_cv != NULL || ngx_http_script_variables_count(&settle) == 0) {
        ngx_conf_log_error(NGX_LOG_EMERG, cf, 0,
                           "porteiro_limit: \"%V\" is not settle=$variable (once), e.g. "
                           "settle=$upstream_http_x_usage_tokens",
                           v);
        return NGX_CONF_ERROR;
    }
    l->settle_cv = np_compile(cf, &settle);
    return l->settle_cv != NULL ? NGX_CONF_OK : NGX_CONF_ERROR;
}

/* porteiro_limit KEY LIMITS|policy=NAME [cost=N|$var] [settle=$var]; */
static char *np_limit(ngx_conf_t *cf, ngx_command_t *cmd, void *conf) {
    (void)cmd;
    np_loc_conf_t *lcf = conf;
    np_main_conf_t *m = ngx_http_conf_get_module_main_conf(cf, ngx_http_porteiro_module);
    ngx_str_t *v = cf->args->elts;
    char err[256];

    if (lcf->limits == NULL) {
        lcf->limits = ngx_array_create(cf->pool, 2, sizeof(np_limit_t));
        if (lcf->limits == NULL)
            return NGX_CONF_ERROR;
    }
    np_limit_t *l = ngx_array_push(lcf->limits);
    if (l == NULL)
        return NGX_CONF_ERROR;
    ngx_memzero(l, sizeof(*l));
    l->cost = 1;

    ngx_http_compile_complex_value_t ccv;
    ngx_memzero(&ccv, sizeof(ccv));
    ccv.cf = cf;
    ccv.value = &v[1];
    ccv.complex_value = &l->key;
    if (ngx_http_compile_complex_value(&ccv) != NGX_OK)
        return NGX_CONF_ERROR;

    if (np_has_prefix(&v[2], "policy=")) {
        l->policy.data = v[2].data + 7;
        l->policy.len = v[2].len - 7;
        if (l->policy.len == 0 || l->policy.len > 128) {
            ngx_conf_log_error(NGX_LOG_EMERG, cf, 0,
                               "porteiro_limit: \"%V\" needs a policy name of 1..128 bytes", &v[2]);
            return NGX_CONF_ERROR;
        }
        if (m->config == NULL) {
            ngx_conf_log_error(NGX_LOG_EMERG, cf, 0,
                               "porteiro_limit \"%V\": policies come from porteiro_config, "
                               "which must come first (in the http block)",
                               &v[2]);
            return NGX_CONF_ERROR;
        }
        char *name = np_dup(cf, &l->policy);
        const porteiro_policy *pol = name != NULL ? porteiro_config_policy(m->config, name) : NULL;
        if (pol == NULL) {
            ngx_conf_log_error(NGX_LOG_EMERG, cf, 0, "porteiro_limit: no policy \"%V\" in %V",
                               &l->policy, &m->config_file);
            return NGX_CONF_ERROR;
        }
        ngx_memcpy(l->limits, pol->limits, sizeof(l->limits));
        l->nlimits = pol->nlimits;
        l->shadow = pol->shadow;
        l->policy_lease = pol->lease;
    } else {
        char *text = np_dup(cf, &v[2]);
        if (text == NULL)
            return NGX_CONF_ERROR;
        if (porteiro_parse_limits(text, l->limits, PORTEIRO_MAX_LIMITS, &l->nlimits, err,
                                  sizeof(err)) != PORTEIRO_OK) {
            ngx_conf_log_error(NGX_LOG_EMERG, cf, 0, "porteiro_limit \"%V\": %s", &v[2], err);
            return NGX_CONF_ERROR;
        }
    }
    for (size_t i = 0; i < l->nlimits; i++) {
        if (l->limits[i].algorithm == PORTEIRO_SLIDING_LOG ||
            l->limits[i].algorithm == PORTEIRO_CONCURRENCY) {
            ngx_conf_log_error(NGX_LOG_EMERG, cf, 0,
                               "porteiro_limit \"%V\": %s is not for request limits here "
                               "(fixed_window, token_bucket, gcra, sliding_window are)",
                               &v[2], porteiro_algorithm_name(l->limits[i].algorithm));
            return NGX_CONF_ERROR;
        }
    }

    for (ngx_uint_t i = 3; i < cf->args->nelts; i++) {
        char *rv;
        if (np_has_prefix(&v[i], "cost="))
            rv = np_cost_param(cf, l, &v[i]);
        else if (np_has_prefix(&v[i], "settle="))
            rv = np_settle_param(cf, l, &v[i]);
        else {
            ngx_conf_log_error(NGX_LOG_EMERG, cf, 0,
                               "porteiro_limit: \"%V\" is not cost=N, cost=$variable or "
                               "settle=$variable",
                               &v[i]);
            rv = NGX_CONF_ERROR;
        }
        if (rv != NGX_CONF_OK)
            return rv;
    }

    size_t total = 0;
    np_limit_t *all = lcf->limits->elts;
    for (size_t i = 0; i < lcf->limits->nelts; i++)
        total += all[i].nlimits;
    if (total > PORTEIRO_MAX_LIMITS) {
        ngx_conf_log_error(NGX_LOG_EMERG, cf, 0,
                           "porteiro_limit: at most %d limits in one place (all of them are "
                           "decided in one call)",
                           PORTEIRO_MAX_LIMITS);
        return NGX_CONF_ERROR;
    }
    m->used = true;
    return NGX_CONF_OK;
}

/* ---- the worker's handle ---- */

/* The memory backend's handle that decides porteiro_on_error local when
 * the worker's own could not be made (o: the options it was made with). */
static void np_local_handle(ngx_cycle_t *cycle, np_main_conf_t *m, const porteiro_options *o) {
    porteiro_options mem;
    porteiro_options_init(&mem);
    mem.memory_max_keys = o->memory_max_keys;
    mem.prefix = o->prefix;
    char err[256];
    porteiro_status st;
    m->local = porteiro_new(&mem, &st, err, sizeof(err));
    m->local_divisor = o->local_divisor > 1 ? o->local_divisor : 1;
    if (m->local == NULL)
        ngx_log_error(NGX_LOG_ALERT, cycle->log, 0, "porteiro: the local fallback: %s", err);
}

static ngx_int_t np_init_process(ngx_cycle_t *cycle) {
    np_main_conf_t *m = ngx_http_cycle_get_module_main_conf(cycle, ngx_http_porteiro_module);
    if (m == NULL || !m->used ||
        (ngx_process != NGX_PROCESS_WORKER && ngx_process != NGX_PROCESS_SINGLE))
        return NGX_OK;
    ngx_queue_init(&m->waiters);
    porteiro_options o;
    if (m->config != NULL)
        o = *porteiro_config_options(m->config);
    else
        porteiro_options_init(&o);
    char url[1024], ca[1024], cert[1024], key[1024], sni[256];
    if (m->redis.len > 0) {
        ngx_cpystrn((u_char *)url, m->redis.data, ngx_min(m->redis.len + 1, sizeof(url)));
        o.redis_url = url;
    }
#define NP_STR(field, buf, opt)                                                                    \
    if (m->field.len > 0) {                                                                        \
        ngx_cpystrn((u_char *)buf, m->field.data, ngx_min(m->field.len + 1, sizeof(buf)));         \
        o.opt = buf;                                                                               \
    }
    NP_STR(tls_ca, ca, tls_ca_file)
    NP_STR(tls_cert, cert, tls_cert_file)
    NP_STR(tls_key, key, tls_key_file)
    NP_STR(tls_server_name, sni, tls_server_name)
#undef NP_STR
    if (m->timeout != NGX_CONF_UNSET_MSEC)
        o.command_timeout_ms = (int)m->timeout;
    /* The handle falls back locally; each location then makes of a
     * fallback what its porteiro_on_error says. */
    o.on_error = PORTEIRO_ON_ERROR_LOCAL;
    porteiro_status st;
    char err[512];
    m->p = porteiro_new(&o, &st, err, sizeof(err));
    if (m->p == NULL) {
        /* Requests then follow porteiro_on_error: no crash loop of workers. */
        ngx_log_error(NGX_LOG_ALERT, cycle->log, 0, "porteiro: %s", err);
    } else if (porteiro_attach_loop(m->p, &ngx_porteiro_loop_ops, cycle->log) != PORTEIRO_OK) {
        ngx_log_error(NGX_LOG_ALERT, cycle->log, 0, "porteiro: %s", porteiro_errmsg(m->p));
        porteiro_free(m->p);
        m->p = NULL;
    }
    if (m->p == NULL)
        np_local_handle(cycle, m, &o);
    return NGX_OK;
}

/* The worker ends. A graceful one (reload, nginx -s quit) comes here only
 * when no check is in flight: their timers are not cancelable. A fast one
 * (SIGTERM) may have checks in flight: their requests are detached first,
 * so that the callbacks porteiro_free makes (a fallback each) resume
 * nothing and give nothing back; the requests end with the worker, as
 * every other request does then. */
static void np_exit_process(ngx_cycle_t *cycle) {
    np_main_conf_t *m = ngx_http_cycle_get_module_main_conf(cycle, ngx_http_porteiro_module);
    if (m == NULL || !m->used)
        return;
    m->exiting = true;
    if (m->waiters.next != NULL) /* init_process ran */
        for (ngx_queue_t *q = ngx_queue_head(&m->waiters); q != ngx_queue_sentinel(&m->waiters);
             q = ngx_queue_next(q)) {
            np_waiter *w = ngx_queue_data(q, np_waiter, link);
            if (w->r != NULL) {
                w->ctx->waiter = NULL;
                w->r = NULL;
            }
        }
    if (m->p != NULL) {
        porteiro_free(m->p);
        m->p = NULL;
    }
    if (m->local != NULL) {
        porteiro_free(m->local);
        m->local = NULL;
    }
}

/* ---- the request ---- */

static void np_refunded(porteiro_t *p, porteiro_status st, const porteiro_decision *d, void *arg) {
    (void)p;
    (void)d;
    (void)arg;
    if (st != PORTEIRO_OK)
        ngx_log_error(NGX_LOG_WARN, ngx_cycle->log, 0, "porteiro: a give-back failed: %s",
                      porteiro_strerror(st));
}

/* Gives back the units a check of these limits took for key (a request
 * that will never run: its client left), as porteirod's
 * delay_refund_on_disconnect. Not while the worker exits (h is being
 * freed). */
static void np_give_back(porteiro_t *h, const porteiro_limit *limits, size_t nlimits,
                         const u_char *key, size_t key_len, int64_t cost, const char *when) {
    np_main_conf_t *m = ngx_http_cycle_get_module_main_conf(ngx_cycle, ngx_http_porteiro_module);
    if (h == NULL || cost <= 0 || m == NULL || m->exiting)
        return;
    porteiro_request req = {.limits = limits,
                            .nlimits = nlimits,
                            .key = key,
                            .key_len = key_len,
                            .cost = cost,
                            .now_ms = PORTEIRO_NOW,
                            .max_wait_ms = 0};
    porteiro_status st = porteiro_refund_async(h, &req, np_refunded, NULL);
    ngx_log_error(NGX_LOG_INFO, ngx_cycle->log, 0,
                  "porteiro: the client of key \"%*s\" left %s: %L units given back%s%s", key_len,
                  key, when, cost, st == PORTEIRO_OK ? "" : ", failed: ",
                  st == PORTEIRO_OK ? "" : porteiro_strerror(st));
}

/* The request is freed (ended, or its client left): a check in flight is
 * detached; a request held by porteiro_delay gives its units back. */
static void np_cleanup(void *data) {
    np_ctx_t *ctx = data;
    if (ctx->waiter != NULL) {
        ctx->waiter->r = NULL; /* the callback will not touch the request */
        ctx->waiter = NULL;
    }
    if (ctx->held) {
        ctx->held = 0;
        np_give_back(ctx->h, ctx->limits, ctx->nlimits, ctx->key.data, ctx->key.len, ctx->cost,
                     "while held by porteiro_delay");
    }
}

/* The context survives internal redirects (which clear r->ctx): it is
 * found again through its pool cleanup, so a request is counted once.
 * Found that way, it is marked redirected for good: a $porteiro_*
 * variable read in the new location's rewrite phase puts it back in
 * r->ctx, and the handler must still see a redirect (error_page 429
 * would otherwise be rejected again). */
static np_ctx_t *np_get_ctx(ngx_http_request_t *r) {
    np_ctx_t *ctx = ngx_http_get_module_ctx(r, ngx_http_porteiro_module);
    if (ctx != NULL || !r->internal)
        return ctx;
    for (ngx_pool_cleanup_t *c = r->pool->cleanup; c != NULL; c = c->next)
        if (c->handler == np_cleanup) {
            ctx = c->data;
            ctx->redirected = 1;
            ngx_http_set_ctx(r, ctx, ngx_http_porteiro_module);
            return ctx;
        }
    return NULL;
}

static void np_log(ngx_http_request_t *r, np_loc_conf_t *lcf, np_ctx_t *ctx, const char *what,
                   ngx_uint_t level) {
    int i = ctx->have_decision && ctx->d.denied_by >= 0 ? ctx->d.denied_by : 0;
    ngx_str_t *key = &ctx->keys[(size_t)i < ctx->nlimits ? i : 0];
    ngx_log_error(level, r->connection->log, 0, "%s by porteiro, key \"%V\", policy \"%s\"", what,
                  key, ctx->name);
}

/* What the decision (or its absence) means for this request. */
static void np_judge(ngx_http_request_t *r, np_ctx_t *ctx, porteiro_status st,
                     const porteiro_decision *d) {
    np_loc_conf_t *lcf = ngx_http_get_module_loc_conf(r, ngx_http_porteiro_module);
    ctx->done = 1;
    ctx->decided_at = ngx_current_msec;
    if (st == PORTEIRO_OK) {
        ctx->d = *d;
        ctx->have_decision = true;
    }
    if (st != PORTEIRO_OK || d->fallback != PORTEIRO_FALLBACK_NONE || ctx->local_only) {
        ctx->outcome = NP_FALLBACK;
        if (lcf->on_error == NP_CLOSED)
            ctx->rejected = true;
        else if (lcf->on_error == NP_LOCAL && st == PORTEIRO_OK)
            ctx->rejected = !d->allowed;
        if (st != PORTEIRO_OK)
            ngx_log_error(NGX_LOG_WARN, r->connection->log, 0, "porteiro: %s",
                          porteiro_strerror(st));
        return;
    }
    if (d->allowed && d->shadow_denied) {
        ctx->outcome = NP_REJECTED_DRY_RUN;
        np_log(r, lcf, ctx, "limiting requests, dry run (policy in shadow mode)", lcf->log_level);
    } else if (d->allowed && d->wait_ms > 0) {
        ctx->outcome = NP_DELAYED;
        np_log(r, lcf, ctx, "delaying request",
               lcf->log_level == NGX_LOG_INFO ? NGX_LOG_INFO : lcf->log_level + 1);
    } else if (d->allowed) {
        ctx->outcome = NP_PASSED;
    } else if (lcf->dry_run) {
        ctx->outcome = NP_REJECTED_DRY_RUN;
        np_log(r, lcf, ctx, "limiting requests, dry run", lcf->log_level);
    } else {
        ctx->outcome = NP_REJECTED;
        ctx->rejected = true;
        np_log(r, lcf, ctx, "limiting requests", lcf->log_level);
    }
}

static void np_done(porteiro_t *p, porteiro_status st, const porteiro_decision *d, void *arg) {
    (void)p;
    np_waiter *w = arg;
    ngx_http_request_t *r = w->r;
    np_ctx_t *ctx = w->ctx;
    ngx_queue_remove(&w->link);
    if (r == NULL) {
        /* The client left meanwhile: nothing of its request is touched;
         * what Redis counted for it is given back. */
        if (w->refundable && st == PORTEIRO_OK && d->fallback == PORTEIRO_FALLBACK_NONE &&
            d->allowed && !d->shadow_denied)
            np_give_back(w->h, w->limits, w->nlimits, w->key, w->key_len, w->cost,
                         "while its check was in flight");
        ngx_free(w);
        return;
    }
    ngx_free(w);
    ctx->waiter = NULL;
    np_judge(r, ctx, st, d);
    if (!ctx->suspended)
        return; /* answered inside the call: the handler goes on */
    ngx_connection_t *c = r->connection;
    r->main->count--;
    r->read_event_handler = ngx_http_block_reading;
    r->write_event_handler = ngx_http_core_run_phases;
    ngx_http_core_run_phases(r);
    ngx_http_run_posted_requests(c);
}

/* As limit_req since nginx 1.19.9 (ngx_http_limit_req_handler): while the
 * request waits, a client that leaves is noticed (ngx_http_test_reading);
 * one whose close was already reported (rev->ready: with epoll's edge
 * trigger no new event comes, e.g. the request and the FIN read together)
 * is noticed now, through a posted read event. */
static ngx_int_t np_watch_client(ngx_http_request_t *r) {
    ngx_event_t *rev = r->connection->read;
    r->read_event_handler = ngx_http_test_reading;
    if (rev->ready) {
        ngx_post_event(rev, &ngx_posted_events);
        return NGX_OK;
    }
    return ngx_handle_read_event(rev, 0);
}

/* As ngx_http_limit_req_delay: the timer's end clears wev->delayed
 * (ngx_http_request_handler); anything before it is not our wake-up. */
static void np_delay_event(ngx_http_request_t *r) {
    ngx_event_t *wev = r->connection->write;
    if (wev->delayed) {
        if (ngx_handle_write_event(wev, 0) != NGX_OK)
            ngx_http_finalize_request(r, NGX_HTTP_INTERNAL_SERVER_ERROR);
        return;
    }
    np_ctx_t *ctx = np_get_ctx(r);
    if (ctx != NULL)
        ctx->held = 0; /* it runs: its units are spent */
    r->read_event_handler = ngx_http_block_reading;
    r->write_event_handler = ngx_http_core_run_phases;
    ngx_http_core_run_phases(r);
}

/* The answer of the handler once the decision is in. */
static ngx_int_t np_result(ngx_http_request_t *r, np_ctx_t *ctx) {
    np_loc_conf_t *lcf = ngx_http_get_module_loc_conf(r, ngx_http_porteiro_module);
    if (ctx->rejected)
        return (ngx_int_t)lcf->status;
    if (ctx->outcome == NP_DELAYED && !ctx->delay_done) {
        /* As limit_req without nodelay: the units are taken; the request
         * waits their time on a timer, watched for the client leaving
         * (then its units are given back: np_cleanup). */
        ctx->delay_done = 1;
        ctx->held = 1;
        if (np_watch_client(r) != NGX_OK)
            return NGX_HTTP_INTERNAL_SERVER_ERROR;
        r->write_event_handler = np_delay_event;
        r->connection->write->delayed = 1;
        ngx_add_timer(r->connection->write, (ngx_msec_t)ctx->d.wait_ms);
        return NGX_AGAIN;
    }
    return NGX_DECLINED;
}

/* The client key of limit l for this request, as the request has it
 * (*raw, for the log) and as porteiro gets it (*out); empty: not limited.
 * Any length and any bytes: porteiro limits a long key under its digest
 * (docs/cluster.md, "Keys"), so no key is refused.
 *
 * The keys of policy=NAME lines are their own: porteiro gets KEY "}" NAME
 * (a policy name holds no '}'), and a line without a policy gets KEY as it
 * is, or KEY "}" when KEY holds a '}' itself. Read from the last '}', these
 * never meet: what follows it is the policy's name, or nothing; a key with
 * no '}' is a line's without a policy. So no client key of one line can
 * name the state of another line's key (before, a line's key "api:victim"
 * was policy=api's key "victim"). Whatever holds a '}' is stored under its
 * digest, with the bytes of KEY before its first '}' as the Redis Cluster
 * hash tag, so a policy's keys spread over a cluster as the others do. */
static ngx_int_t np_key(ngx_http_request_t *r, np_limit_t *l, ngx_str_t *raw, ngx_str_t *out) {
    if (ngx_http_complex_value(r, &l->key, raw) != NGX_OK)
        return NGX_ERROR;
    *out = *raw;
    if (raw->len == 0)
        return NGX_OK;
    bool brace = ngx_strlchr(raw->data, raw->data + raw->len, '}') != NULL;
    if (l->policy.len == 0 && !brace)
        return NGX_OK;
    u_char *k = ngx_pnalloc(r->pool, raw->len + 1 + l->policy.len);
    if (k == NULL)
        return NGX_ERROR;
    u_char *e = ngx_cpymem(k, raw->data, raw->len);
    *e++ = '}';
    if (l->policy.len > 0) /* a line without a policy: no name (data NULL) */
        e = ngx_cpymem(e, l->policy.data, l->policy.len);
    out->data = k;
    out->len = (size_t)(e - k);
    return NGX_OK;
}

/* The cost of limit l for this request. cost=$variable: the client may
 * control it, so no value is an error: empty or not a whole number counts
 * 1 (logged at info, as nginx logs a client's bad input), a number above
 * 10^9 counts 10^9 (more than any limit allows at once: denied). */
static ngx_int_t np_cost(ngx_http_request_t *r, np_limit_t *l, int64_t *cost) {
    if (l->cost_cv == NULL) {
        *cost = l->cost;
        return NGX_OK;
    }
    ngx_str_t v;
    if (ngx_http_complex_value(r, l->cost_cv, &v) != NGX_OK)
        return NGX_ERROR;
    *cost = v.len > 0 ? 0 : 1; /* the variable is not there (no such header): 1 */
    for (size_t i = 0; i < v.len; i++) {
        if (v.data[i] < '0' || v.data[i] > '9') {
            ngx_log_error(NGX_LOG_INFO, r->connection->log, 0,
                          "porteiro: cost \"%V\" is not a number of units 0..1000000000, "
                          "counted as 1",
                          &v);
            *cost = 1;
            return NGX_OK;
        }
        if (*cost <= PORTEIRO_MAX_AMOUNT)
            *cost = *cost * 10 + (v.data[i] - '0');
    }
    if (*cost > PORTEIRO_MAX_AMOUNT)
        *cost = PORTEIRO_MAX_AMOUNT;
    return NGX_OK;
}

/* L / divisor (and the burst), at least 1: the library's own local
 * fallback's division (porteiro_options.local_divisor). */
static void np_divide(porteiro_limit *l, int divisor) {
    if (divisor > 1) {
        l->limit = l->limit / divisor > 0 ? l->limit / divisor : 1;
        l->burst = l->burst / divisor > 0 ? l->burst / divisor : 1;
    }
}

static ngx_int_t np_handler(ngx_http_request_t *r) {
    if (r->main != r)
        return NGX_DECLINED; /* subrequests: their main request was checked */
    np_ctx_t *ctx = np_get_ctx(r);
    if (ctx != NULL && ctx->redirected)
        return NGX_DECLINED; /* decided before an internal redirect (error_page) */
    if (ctx != NULL)
        return ctx->done ? np_result(r, ctx) : NGX_AGAIN;
    np_loc_conf_t *lcf = ngx_http_get_module_loc_conf(r, ngx_http_porteiro_module);
    if (lcf->limits == NULL || lcf->limits->nelts == 0)
        return NGX_DECLINED;
    np_main_conf_t *m = ngx_http_get_module_main_conf(r, ngx_http_porteiro_module);

    ctx = ngx_pcalloc(r->pool, sizeof(*ctx));
    if (ctx == NULL)
        return NGX_HTTP_INTERNAL_SERVER_ERROR;
    porteiro_item items[PORTEIRO_MAX_LIMITS];
    size_t n = 0, directives = 0;
    np_limit_t *ls = lcf->limits->elts, *one = NULL;
    int64_t one_cost = 1;
    ngx_str_t one_key = ngx_null_string;
    ctx->name = "porteiro";
    for (size_t i = 0; i < lcf->limits->nelts; i++) {
        ngx_str_t raw, key;
        int64_t cost;
        if (np_key(r, &ls[i], &raw, &key) != NGX_OK || np_cost(r, &ls[i], &cost) != NGX_OK)
            return NGX_HTTP_INTERNAL_SERVER_ERROR; /* no memory: nginx's own fault */
        if (key.len == 0)
            continue; /* as limit_req: an empty key is not limited */
        if (directives++ == 0) {
            one = &ls[i];
            one_cost = cost;
            one_key = key;
            if (ls[i].policy.len > 0)
                ctx->name = (const char *)ls[i].policy.data; /* NUL after: parsed text */
        }
        for (size_t j = 0; j < ls[i].nlimits; j++, n++) {
            items[n] =
                (porteiro_item){ls[i].limits[j], key.data, key.len, cost, ls[i].shadow, NULL};
            ctx->limits[n] = ls[i].limits[j];
            ctx->keys[n] = raw;
            ctx->item_line[n] = &ls[i];
        }
        ctx->settles = ctx->settles || ls[i].settle_cv != NULL;
    }
    ctx->nlimits = n;
    if (directives == 0)
        return NGX_DECLINED;

    /* The handle: the worker's; without one (it could not be made), the
     * memory backend's for porteiro_on_error local, its limits divided by
     * local_divisor as the library's own local fallback divides them. */
    ctx->h = m->p;
    if (m->p == NULL && lcf->on_error == NP_LOCAL && m->local != NULL) {
        ctx->h = m->local;
        ctx->local_only = 1;
        for (size_t i = 0; i < n; i++) {
            np_divide(&ctx->limits[i], m->local_divisor);
            np_divide(&items[i].limit, m->local_divisor);
        }
    }
    ctx->cost = one_cost;
    ctx->key = one_key;
    ctx->settle = directives == 1 && one->settle_cv != NULL ? one : NULL;
    if (directives > 1) {
        ctx->multi = 1;
        ngx_memcpy(ctx->items, items, n * sizeof(items[0])); /* keys: in r->pool */
    }

    /* A single check's waiter keeps what a give-back needs (its client may
     * leave, and the request's pool with it, before the answer comes). */
    bool single = directives == 1;
    size_t kept = single ? one_key.len : 0;
    ngx_pool_cleanup_t *cln = ngx_pool_cleanup_add(r->pool, 0);
    np_waiter *w = ngx_alloc(sizeof(*w) + kept, r->connection->log);
    if (cln == NULL || w == NULL) {
        ngx_free(w);
        return NGX_HTTP_INTERNAL_SERVER_ERROR;
    }
    cln->handler = np_cleanup;
    cln->data = ctx;
    ngx_http_set_ctx(r, ctx, ngx_http_porteiro_module);
    ngx_memzero(w, sizeof(*w));
    w->r = r;
    w->ctx = ctx;
    w->h = ctx->h;
    w->refundable = single;
    if (single) {
        ngx_memcpy(w->limits, ctx->limits, sizeof(w->limits));
        w->nlimits = n;
        w->cost = one_cost;
        w->key_len = kept;
        ngx_memcpy(w->key, one_key.data, kept);
    }
    ctx->waiter = w;
    ngx_queue_insert_tail(&m->waiters, &w->link);

    porteiro_status st;
    /* porteiro_lease where a level says, else a lone policy's own lease:. */
    porteiro_quota_lease lease = lcf->lease;
    if (lease.max_ms == NGX_CONF_UNSET)
        lease = directives == 1 ? one->policy_lease : (porteiro_quota_lease){0, 0, 0};
    if (ctx->h == NULL) {
        st = PORTEIRO_ERR_CONNECT; /* the handle could not be made: logged at start */
    } else if (directives == 1) {
        /* One key: a single check, which may share a batch with the other
         * requests of this pass. */
        /* No name: the module's keys are its own already (np_key: a
         * policy=NAME line's key is KEY "}" NAME), and its refunds and
         * settles name the same keys as plain requests. */
        porteiro_policy pol = {
            .name = NULL, .nlimits = one->nlimits, .shadow = one->shadow, .lease = lease};
        ngx_memcpy(pol.limits, ctx->limits, sizeof(pol.limits));
        st = porteiro_check_async(ctx->h,
                                  &(porteiro_request){.policy = &pol,
                                                      .key = one_key.data,
                                                      .key_len = one_key.len,
                                                      .cost = one_cost,
                                                      .now_ms = PORTEIRO_NOW,
                                                      .max_wait_ms = (int64_t)lcf->delay},
                                  np_done, w);
    } else {
        porteiro_multi_request mr = {.tag = NP_TAG,
                                     .tag_len = sizeof(NP_TAG) - 1,
                                     .items = items,
                                     .nitems = n,
                                     .now_ms = PORTEIRO_NOW,
                                     .lease = lease};
        st = porteiro_check_async(ctx->h, &(porteiro_request){.multi = &mr}, np_done, w);
    }
    if (st != PORTEIRO_OK) { /* no callback will come */
        ngx_queue_remove(&w->link);
        ctx->waiter = NULL;
        ngx_free(w);
        if (ctx->h != NULL)
            ngx_log_error(NGX_LOG_ERR, r->connection->log, 0, "porteiro: %s",
                          porteiro_errmsg(ctx->h));
        np_judge(r, ctx, st, NULL);
    }
    if (ctx->done)
        return np_result(r, ctx);
    /* Suspended until np_done; a client that leaves meanwhile (or left
     * already) is noticed and its request freed: np_cleanup. */
    if (np_watch_client(r) != NGX_OK) {
        /* Not suspended: the answer, when it comes, finds it detached. */
        ctx->waiter->r = NULL;
        ctx->waiter = NULL;
        return NGX_HTTP_INTERNAL_SERVER_ERROR;
    }
    ctx->suspended = 1;
    r->main->count++;
    r->write_event_handler = ngx_http_request_empty_handler;
    return NGX_DONE;
}

/* ---- settles (issue 38) ---- */

/* arg: the estimate the request was checked with (-1: several lines). */
static void np_settled(porteiro_t *p, porteiro_status st, const porteiro_decision *d, void *arg) {
    (void)p;
    int64_t estimate = (int64_t)(intptr_t)arg;
    if (st != PORTEIRO_OK) {
        ngx_log_error(NGX_LOG_WARN, ngx_cycle->log, 0, "porteiro: a settle failed: %s",
                      porteiro_strerror(st));
    } else if (d->fallback != PORTEIRO_FALLBACK_NONE) {
        /* Redis went away between the check and the settle: the handle's
         * local fallback took the settle; Redis keeps the estimate. */
        if (estimate >= 0) {
            ngx_log_error(NGX_LOG_WARN, ngx_cycle->log, 0,
                          "porteiro: a settle could not reach Redis: the estimate of %L stands "
                          "there",
                          estimate);
        } else { /* several lines */
            ngx_log_error(NGX_LOG_WARN, ngx_cycle->log, 0,
                          "porteiro: a settle could not reach Redis: the estimates stand there");
        }
    } else if (d->debt_added > 0) {
        ngx_log_error(NGX_LOG_INFO, ngx_cycle->log, 0,
                      "porteiro: a settle charged %L units past empty (debt now %L)", d->debt_added,
                      d->debt);
    }
}

/* The real cost a line's settle= holds for this request: NGX_OK with
 * *used set; NGX_DECLINED when it holds none, or no number 0..10^9
 * (logged at warn): the estimate stands. */
static ngx_int_t np_settle_value(ngx_http_request_t *r, np_limit_t *l, int64_t estimate,
                                 int64_t *used) {
    ngx_str_t v;
    if (ngx_http_complex_value(r, l->settle_cv, &v) != NGX_OK || v.len == 0)
        return NGX_DECLINED;
    ngx_int_t n = ngx_atoi(v.data, v.len);
    if (n == NGX_ERROR || n > 1000000000) {
        ngx_log_error(NGX_LOG_WARN, r->connection->log, 0,
                      "porteiro: settle \"%V\" is not a number of units 0..1000000000: the "
                      "estimate of %L stands",
                      &v, estimate);
        return NGX_DECLINED;
    }
    *used = n;
    return NGX_OK;
}

/* Several lines: every item of a line with settle= settles with that
 * line's value, the others (and a line whose value is missing or bad)
 * keep their estimate; all in one multi-key porteiro_settle (one script
 * call, as the check was: all of it applies, or none). A shadow item that
 * denied took nothing: with a value it settles from 0 (is charged what it
 * used), without one it stays untouched. */
static void np_settle_multi(ngx_http_request_t *r, np_ctx_t *ctx) {
    porteiro_item items[PORTEIRO_MAX_LIMITS];
    int64_t estimates[PORTEIRO_MAX_LIMITS];
    np_limit_t *line = NULL;
    int64_t used = 0;
    bool have = false, change = false;
    for (size_t i = 0; i < ctx->nlimits; i++) {
        items[i] = ctx->items[i];
        estimates[i] = ctx->items[i].cost;
        if (items[i].shadow && i < ctx->d.nlimits && !ctx->d.limits[i].allowed)
            estimates[i] = 0;
        if (ctx->item_line[i] != line) { /* a line's items are next to each other */
            line = ctx->item_line[i];
            have = line->settle_cv != NULL &&
                   np_settle_value(r, line, ctx->items[i].cost, &used) == NGX_OK;
        }
        /* A line without a value: nothing changes (a shadow item that
         * denied took nothing, and is charged nothing). */
        items[i].cost = have ? used : estimates[i];
        change = change || items[i].cost != estimates[i];
    }
    if (!change)
        return; /* nothing to give back or charge: no Redis call */
    porteiro_multi_request mr = {.tag = NP_TAG,
                                 .tag_len = sizeof(NP_TAG) - 1,
                                 .items = items,
                                 .nitems = ctx->nlimits,
                                 .now_ms = PORTEIRO_NOW};
    porteiro_request req = {.multi = &mr};
    porteiro_usage u = {.age_ms = (int64_t)(ngx_current_msec - ctx->decided_at),
                        .estimates = estimates,
                        .nestimates = ctx->nlimits};
    if (porteiro_settle_async(ctx->h, &req, &u, np_settled, (void *)(intptr_t)-1) != PORTEIRO_OK)
        ngx_log_error(NGX_LOG_WARN, r->connection->log, 0, "porteiro: settle: %s",
                      porteiro_errmsg(ctx->h));
}

/* The log phase: the response is sent. A request checked with
 * settle=$var, whose check took its units (passed, or delayed and run),
 * settles with the variable's value as its real cost: the difference to
 * the cost it was checked with is given back or charged, on the worker's
 * loop (nothing waits for it). No value (the upstream reported no usage,
 * or never answered), or one that is no number 0..10^9: the estimate
 * stands. A fallback's check took nothing in Redis: no settle. Several
 * lines: np_settle_multi. */
static ngx_int_t np_log_handler(ngx_http_request_t *r) {
    if (r != r->main)
        return NGX_OK;
    np_ctx_t *ctx = np_get_ctx(r);
    np_main_conf_t *m = ngx_http_get_module_main_conf(r, ngx_http_porteiro_module);
    if (ctx == NULL || (ctx->settle == NULL && !(ctx->multi && ctx->settles)) || !ctx->done ||
        ctx->held || ctx->h == NULL || m->exiting ||
        (ctx->outcome != NP_PASSED && ctx->outcome != NP_DELAYED))
        return NGX_OK;
    if (ctx->multi) {
        np_settle_multi(r, ctx);
        return NGX_OK;
    }
    int64_t used;
    if (np_settle_value(r, ctx->settle, ctx->cost, &used) != NGX_OK || used == ctx->cost)
        return NGX_OK; /* nothing to give back or charge: no Redis call */
    porteiro_usage u = {.estimate = ctx->cost,
                        .used = used,
                        .age_ms = (int64_t)(ngx_current_msec - ctx->decided_at)};
    porteiro_request req = {.limits = ctx->limits,
                            .nlimits = ctx->nlimits,
                            .key = ctx->key.data,
                            .key_len = ctx->key.len,
                            .cost = ctx->cost,
                            .now_ms = PORTEIRO_NOW,
                            .max_wait_ms = 0};
    if (porteiro_settle_async(ctx->h, &req, &u, np_settled, (void *)(intptr_t)ctx->cost) !=
        PORTEIRO_OK)
        ngx_log_error(NGX_LOG_WARN, r->connection->log, 0, "porteiro: settle: %s",
                      porteiro_errmsg(ctx->h));
    return NGX_OK;
}

/* ---- headers ---- */

static ngx_int_t np_add_header(ngx_http_request_t *r, const char *name, const char *value) {
    if (value[0] == '\0')
        return NGX_OK;
    ngx_table_elt_t *h = ngx_list_push(&r->headers_out.headers);
    if (h == NULL)
        return NGX_ERROR;
    h->hash = 1;
    h->key.data = (u_char *)name;
    h->key.len = ngx_strlen(name);
    h->value.len = ngx_strlen(value);
    h->value.data = ngx_pnalloc(r->pool, h->value.len);
    if (h->value.data == NULL)
        return NGX_ERROR;
    ngx_memcpy(h->value.data, value, h->value.len);
    return NGX_OK;
}

static ngx_int_t np_header_filter(ngx_http_request_t *r) {
    if (r != r->main)
        return np_next_header_filter(r);
    np_ctx_t *ctx = np_get_ctx(r);
    np_loc_conf_t *lcf = ngx_http_get_module_loc_conf(r, ngx_http_porteiro_module);
    if (ctx == NULL || !ctx->have_decision || !lcf->headers)
        return np_next_header_filter(r);
    porteiro_http_fields h;
    porteiro_http_fields_format(ctx->name, ctx->limits, ctx->nlimits, &ctx->d, &h);
    if (np_add_header(r, "RateLimit-Policy", h.policy) != NGX_OK ||
        np_add_header(r, "RateLimit", h.ratelimit) != NGX_OK ||
        (ctx->rejected && np_add_header(r, "Retry-After", h.retry_after) != NGX_OK))
        return NGX_ERROR;
    return np_next_header_filter(r);
}

/* ---- variables ---- */

enum { NP_VAR_STATUS, NP_VAR_REMAINING, NP_VAR_RESET_MS, NP_VAR_LIMIT };

static ngx_int_t np_variable(ngx_http_request_t *r, ngx_http_variable_value_t *v, uintptr_t data) {
    np_ctx_t *ctx = np_get_ctx(r->main);
    if (ctx == NULL || !ctx->done || (data != NP_VAR_STATUS && !ctx->have_decision)) {
        v->not_found = 1;
        return NGX_OK;
    }
    if (data == NP_VAR_STATUS) {
        v->data = np_outcome_names[ctx->outcome].data;
        v->len = np_outcome_names[ctx->outcome].len;
    } else {
        int64_t n = data == NP_VAR_REMAINING  ? ctx->d.remaining
                    : data == NP_VAR_RESET_MS ? ctx->d.reset_ms
                                              : ctx->d.limit;
        v->data = ngx_pnalloc(r->pool, NGX_INT64_LEN);
        if (v->data == NULL)
            return NGX_ERROR;
        v->len = (unsigned)(ngx_sprintf(v->data, "%L", n) - v->data);
    }
    v->valid = 1;
    v->no_cacheable = 0;
    v->not_found = 0;
    return NGX_OK;
}

static ngx_http_variable_t np_vars[] = {
    {ngx_string("porteiro_status"), NULL, np_variable, NP_VAR_STATUS, NGX_HTTP_VAR_NOCACHEABLE, 0},
    {ngx_string("porteiro_remaining"), NULL, np_variable, NP_VAR_REMAINING,
     NGX_HTTP_VAR_NOCACHEABLE, 0},
    {ngx_string("porteiro_reset_ms"), NULL, np_variable, NP_VAR_RESET_MS, NGX_HTTP_VAR_NOCACHEABLE,
     0},
    {ngx_string("porteiro_limit"), NULL, np_variable, NP_VAR_LIMIT, NGX_HTTP_VAR_NOCACHEABLE, 0},
    ngx_http_null_variable,
};

static ngx_int_t np_preconfiguration(ngx_conf_t *cf) {
    for (ngx_http_variable_t *v = np_vars; v->name.len; v++) {
        ngx_http_variable_t *var = ngx_http_add_variable(cf, &v->name, v->flags);
        if (var == NULL)
            return NGX_ERROR;
        var->get_handler = v->get_handler;
        var->data = v->data;
    }
    return NGX_OK;
}

static ngx_int_t np_postconfiguration(ngx_conf_t *cf) {
    ngx_http_core_main_conf_t *cmcf = ngx_http_conf_get_module_main_conf(cf, ngx_http_core_module);
    /* Last of the preaccess phase: nginx runs a phase's handlers in the
     * reverse order of their registration, and a dynamic module registers
     * after nginx's own, so a pushed handler would run before limit_req
     * and limit_conn (and realip's). At the front of the array it runs
     * after them: a request a local limit refuses never costs a
     * fleet-wide unit or a Redis call, and $binary_remote_addr is the
     * real client's. */
    ngx_array_t *hs = &cmcf->phases[NGX_HTTP_PREACCESS_PHASE].handlers;
    if (ngx_array_push(hs) == NULL)
        return NGX_ERROR;
    ngx_http_handler_pt *h = hs->elts;
    ngx_memmove(&h[1], &h[0], (hs->nelts - 1) * sizeof(*h));
    h[0] = np_handler;
    np_next_header_filter = ngx_http_top_header_filter;
    ngx_http_top_header_filter = np_header_filter;
    ngx_http_handler_pt *log = ngx_array_push(&cmcf->phases[NGX_HTTP_LOG_PHASE].handlers);
    if (log == NULL)
        return NGX_ERROR;
    *log = np_log_handler;
    return NGX_OK;
}
