/* main.c — porteirod: flags, workers, SIGHUP reload, SIGTERM drain, and
 * what the service manager hears of them (sd_notify.h).
 *
 *   porteirod --config FILE [--log-level LEVEL] [--log-format text|json]
 *             [--workers N] [--max-connections N] [--timeout SECONDS]
 *             [--grpc-listen HOST:PORT] [--grpc-max-message BYTES]
 *             [--grpc-tls-cert PEM --grpc-tls-key PEM]
 *   porteirod --envoy-env [flags as above]   (envoy ratelimit's
 *             environment instead of a file: docs/envoy.md)
 *   porteirod --test-config FILE      (exit 0 valid, 1 with the error, 2
 *             when envoy ratelimit's config files are refused)
 *   porteirod --version
 * Exit status: 0 after SIGTERM/SIGINT, 1 on a start-up error, 2 on bad
 * flags or a refused envoy config.
 *
 * Each worker is a thread with its own event loop and listening socket
 * (SO_REUSEPORT when N > 1). With Redis each worker has its own limiter
 * handle (one async connection each); the memory backend is one handle
 * shared by all workers, so there is still one state per process. The gRPC
 * listener (envoy.grpc_listen, or --grpc-listen) is served by every worker's
 * loop too, beside its HTTP/1.1 socket, and so is HAProxy's SPOE listener
 * (spoe.listen, docs/haproxy.md). */
#include <event2/event.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "porteiro_libevent.h"
#include "admin/admin.h"
#include "app/app.h"
#include "build_info.h"
#include "rules/envoy.h"
#include "envoy/envoy_env.h"
#include "envoy/envoy_watch.h"
#include "grpc/grpc_server.h"
#include "grpc/grpc_tls.h"
#include "ops/log.h"
#include "ops/sd_notify.h"
#include "http/server.h"
#include "ops/settings.h"
#include "ops/worker.h"
#include "spoe/spoe_server.h"

#define DRAIN_MAX_MS 10000 /* SIGTERM: longest wait for checks in flight */
#define TICK_MS 20         /* how often a worker looks at the stop flag */

typedef struct daemon_state daemon_state;

typedef struct worker {
    daemon_state *d;
    porteiro_t *limiter; /* its own (Redis), or d->shared_limiter */
    struct event_base *base;
    pd_app *app;
    pd_server *server;
    /* Worker 0 only: the admin listener (admin.listen), on its loop, with
     * an app of its own for /metrics and /healthz. */
    pd_app *admin_app;
    pd_server *admin_server;
    pd_grpc_server *grpc; /* NULL without a gRPC listener */
    pd_spoe_server *spoe; /* NULL without a SPOE listener (spoe.listen) */
    struct event *tick;
    int64_t drain_deadline_ms; /* 0 until stopping */
    pthread_t thread;
    bool thread_started;
} worker;

struct daemon_state {
    const char *config_path;
    bool envoy_env;  /* --envoy-env: the settings come from the environment */
    pd_watch *watch; /* envoy ratelimit's config folder */
    pd_server_limits limits;
    pd_grpc_limits grpc_limits;
    pd_spoe_limits spoe_limits;
    const char *grpc_listen;                  /* --grpc-listen: over envoy.grpc_listen */
    const char *grpc_tls_cert, *grpc_tls_key; /* --grpc-tls-cert/-key: TLS, else h2c */
    char grpc_host[256];
    int grpc_port; /* 0: no gRPC listener */
    int nworkers;
    pd_settings *boot; /* the settings the limiters and sockets were made from */
    pd_shared *shared;
    porteiro_t *shared_limiter; /* memory backend: one state for all workers */
    worker workers[PD_MAX_WORKERS];
    atomic_bool stopping;
    pd_watchdog *watchdog; /* NULL unless the service manager asks for one */
    pd_admin *admin;       /* NULL without admin.listen */
};

static int64_t now_ms(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

static void usage(FILE *to) {
    fprintf(to, "usage: porteirod --config FILE [--log-level error|warn|info|debug]\n"
                "                 [--log-format text|json] [--workers N]\n"
                "                 [--max-connections N] [--timeout SECONDS]\n"
                "                 [--grpc-listen HOST:PORT] [--grpc-max-message BYTES]\n"
                "                 [--grpc-tls-cert PEM --grpc-tls-key PEM]\n"
                "       porteirod --envoy-env [flags as above]\n"
                "       porteirod --test-config FILE\n"
                "       porteirod --version\n");
}

/* One line of state, for the log and the service manager's STATUS=. */
static void describe(const daemon_state *d, size_t npolicies, char *buf, size_t len) {
    snprintf(buf, len, "listening on %s:%d (%s backend, %zu policies, %d worker%s)",
             d->boot->listen_host, pd_server_port(d->workers[0].server),
             pd_settings_uses_redis(d->boot) ? "redis" : "memory", npolicies, d->nworkers,
             d->nworkers > 1 ? "s" : "");
}

static bool same_string(const char *a, const char *b) {
    return strcmp(a != NULL ? a : "", b != NULL ? b : "") == 0;
}

/* What a reload cannot change without a restart: the limiters and sockets. */
static bool needs_restart(const pd_settings *old, const pd_settings *new) {
    const porteiro_options *a = pd_settings_options(old), *b = pd_settings_options(new);
    return !same_string(a->redis_url, b->redis_url) || !same_string(a->prefix, b->prefix) ||
           a->connect_timeout_ms != b->connect_timeout_ms ||
           a->command_timeout_ms != b->command_timeout_ms || a->on_error != b->on_error ||
           a->local_divisor != b->local_divisor || a->memory_max_keys != b->memory_max_keys ||
           a->breaker_failures != b->breaker_failures ||
           a->breaker_cooldown_ms != b->breaker_cooldown_ms ||
           a->deny_cache_keys != b->deny_cache_keys || a->batch_max != b->batch_max ||
           a->redis_module != b->redis_module || a->tls != b->tls ||
           a->tls_insecure != b->tls_insecure || !same_string(a->tls_ca_file, b->tls_ca_file) ||
           !same_string(a->tls_ca_dir, b->tls_ca_dir) ||
           !same_string(a->tls_cert_file, b->tls_cert_file) ||
           !same_string(a->tls_key_file, b->tls_key_file) ||
           !same_string(a->tls_server_name, b->tls_server_name) ||
           strcmp(old->listen_host, new->listen_host) != 0 ||
           old->listen_port != new->listen_port || strcmp(old->grpc_host, new->grpc_host) != 0 ||
           old->grpc_port != new->grpc_port || strcmp(old->spoe_host, new->spoe_host) != 0 ||
           old->spoe_port != new->spoe_port ||
           pd_daemon_config_spoe(old->dcfg)->max_frame_size !=
               pd_daemon_config_spoe(new->dcfg)->max_frame_size ||
           pd_daemon_config_client_header_timeout_ms(old->dcfg) !=
               pd_daemon_config_client_header_timeout_ms(new->dcfg);
}

/* With Redis: the settings' local copy of the per-client overrides, read
 * from the Redis the limiters use (a changed URL waits for a restart). */
static void start_overrides(daemon_state *d, pd_settings *s) {
    char err[512] = "";
    if (pd_settings_uses_redis(d->boot) &&
        pd_settings_start_overrides(s, pd_settings_options(d->boot), err, sizeof(err)) != 0)
        pd_log(PD_LOG_ERROR, "overrides: %s (the config file's overrides still apply)", err);
}

static const char *env_get(const char *name) {
    return getenv(name);
}

static void env_warn(const char *name, const char *why) {
    pd_log(PD_LOG_WARN, "--envoy-env: %s is set but not supported (%s)", name, why);
}

/* The settings from the file, or from envoy ratelimit's environment. */
static pd_settings *load_settings(daemon_state *d, char *err, size_t errlen) {
    if (!d->envoy_env)
        return pd_settings_load(d->config_path, err, errlen);
    pd_envoy_env_log log;
    char *yaml = pd_envoy_env_yaml(env_get, env_warn, &log, err, errlen);
    if (yaml == NULL)
        return NULL;
    if (log.level >= 0)
        pd_log_set_level((pd_log_level)log.level);
    if (log.format >= 0)
        pd_log_set_format((pd_log_format)log.format);
    pd_settings *s = pd_settings_parse(yaml, strlen(yaml), "--envoy-env", err, errlen);
    free(yaml);
    return s;
}

static void reload(daemon_state *d) {
    char err[512];
    char status[512];
    pd_notify_reloading();
    pd_settings *fresh = load_settings(d, err, sizeof(err));
    if (fresh == NULL) {
        pd_shared_count_reload(d->shared, false);
        pd_shared_reload_error(d->shared, err);
        pd_log(PD_LOG_ERROR, "reload failed, keeping the running config: %s", err);
        pd_notify("READY=1\nSTATUS=reload failed, running the previous config: %.200s", err);
        return;
    }
    if (needs_restart(d->boot, fresh))
        pd_log(PD_LOG_WARN, "reload: listen, redis and limiter settings changed; "
                            "they take effect at the next restart");
    /* Limiter state lives in the limiters (and Redis), not in the settings:
     * swapping the policies keeps every counter. */
    size_t n = fresh->npolicies;
    start_overrides(d, fresh);
    pd_shared_set_settings(d->shared, fresh);
    /* The TLS files are read again (rotated certificates, same paths): new
     * connections use them; a file that cannot be used keeps the old ones. */
    bool tls_ok = true;
    for (int i = 0; i < d->nworkers && tls_ok; i++)
        if (d->workers[i].limiter != NULL &&
            porteiro_tls_reload(d->workers[i].limiter, err, sizeof(err)) != PORTEIRO_OK)
            tls_ok = false;
    pd_shared_count_reload(d->shared, tls_ok);
    if (!tls_ok)
        pd_shared_reload_error(d->shared, err);
    if (!tls_ok)
        pd_log(PD_LOG_ERROR, "reload: %s; the TLS files read before stay in use", err);
    pd_log(PD_LOG_INFO, "reloaded %s: %zu policies%s",
           d->envoy_env ? "--envoy-env" : d->config_path, n,
           fresh->envoy_rules != NULL ? ", envoy ratelimit's config" : "");
    describe(d, n, status, sizeof(status));
    pd_notify("READY=1\nSTATUS=%s", status);
}

static void on_reload(evutil_socket_t sig, short what, void *arg) {
    (void)sig;
    (void)what;
    reload(arg);
}

static void on_envoy_changed(void *arg) {
    daemon_state *d = arg;
    pd_log(PD_LOG_INFO, "envoy config %s changed: reloading", d->boot->envoy_path);
    reload(d);
}

static void on_stop(evutil_socket_t sig, short what, void *arg) {
    daemon_state *d = arg;
    (void)what;
    if (!atomic_exchange(&d->stopping, true)) {
        pd_log(PD_LOG_INFO, "signal %d: no new connections; finishing requests in flight",
               (int)sig);
        pd_notify("STOPPING=1\nSTATUS=stopping: finishing requests in flight");
        pd_watchdog_stopping(d->watchdog);
    }
}

/* Every TICK_MS: once stopping, close the socket, then leave the loop when
 * nothing is in flight (or the drain time is over). */
static void on_tick(evutil_socket_t fd, short what, void *arg) {
    worker *w = arg;
    (void)fd;
    (void)what;
    if (!atomic_load(&w->d->stopping))
        return;
    if (w->drain_deadline_ms == 0) {
        pd_server_stop_accepting(w->server);
        if (w->admin_server != NULL)
            pd_server_stop_accepting(w->admin_server);
        if (w->grpc != NULL)
            pd_grpc_server_stop_accepting(w->grpc);
        if (w->spoe != NULL)
            pd_spoe_server_stop_accepting(w->spoe);
        w->drain_deadline_ms = now_ms() + DRAIN_MAX_MS;
    }
    size_t left = pd_app_in_flight(w->app);
    if (left == 0 || now_ms() >= w->drain_deadline_ms) {
        if (left > 0)
            pd_log(PD_LOG_WARN, "stopping with %zu checks still in flight", left);
        event_base_loopexit(w->base, NULL);
    }
}

static int worker_start(worker *w, daemon_state *d, char *err, size_t errlen) {
    porteiro_status st;
    w->d = d;
    w->base = porteiro_event_base_new();
    if (w->base == NULL) {
        snprintf(err, errlen, "cannot create an event loop");
        return -1;
    }
    w->limiter = d->shared_limiter;
    if (w->limiter == NULL) /* Redis: one connection per worker loop */
        w->limiter = porteiro_new(pd_settings_options(d->boot), &st, err, errlen);
    if (w->limiter == NULL || porteiro_attach_libevent(w->limiter, w->base) != PORTEIRO_OK) {
        if (w->limiter != NULL)
            snprintf(err, errlen, "cannot attach the limiter to the event loop: %s",
                     porteiro_errmsg(w->limiter));
        return -1;
    }
    w->app = pd_app_new(d->shared, w->limiter);
    if (w->app == NULL || pd_app_set_loop(w->app, w->base) != 0) {
        snprintf(err, errlen, "out of memory");
        return -1;
    }
    pd_app_worker(w->app)->index = (int)(w - d->workers); /* porteirod_worker_connections_total */
    w->server = pd_server_new(w->base, w->app, d->boot->listen_host, d->boot->listen_port,
                              &d->limits, d->nworkers > 1, err, errlen);
    if (w->server == NULL)
        return -1;
    if (d->grpc_port != 0) {
        w->grpc = pd_grpc_server_new(w->base, pd_app_worker(w->app), d->grpc_host, d->grpc_port,
                                     &d->grpc_limits, d->nworkers > 1, err, errlen);
        if (w->grpc == NULL)
            return -1;
    }
    if (d->boot->spoe_port != 0) {
        w->spoe =
            pd_spoe_server_new(w->base, pd_app_worker(w->app), d->boot->spoe_host,
                               d->boot->spoe_port, &d->spoe_limits, d->nworkers > 1, err, errlen);
        if (w->spoe == NULL)
            return -1;
    }
    struct timeval tv = {0, TICK_MS * 1000};
    w->tick = event_new(w->base, -1, EV_PERSIST, on_tick, w);
    if (w->tick == NULL || event_add(w->tick, &tv) != 0) {
        snprintf(err, errlen, "cannot start a timer");
        return -1;
    }
    return 0;
}

static void worker_free(worker *w) {
    /* Held requests (delay:) are answered first, then the limiter goes:
     * checks still pending answer through the app and the server, which
     * must still exist. */
    if (w->app != NULL)
        pd_app_shutdown(w->app);
    if (w->admin_app != NULL)
        pd_app_shutdown(w->admin_app);
    if (w->limiter != w->d->shared_limiter)
        porteiro_free(w->limiter);
    pd_server_free(w->admin_server);
    pd_app_free(w->admin_app);
    pd_server_free(w->server);
    pd_grpc_server_free(w->grpc);
    pd_spoe_server_free(w->spoe);
    pd_app_free(w->app);
    if (w->tick != NULL)
        event_free(w->tick);
    if (w->base != NULL)
        event_base_free(w->base);
}

static void *worker_main(void *arg) {
    worker *w = arg;
    event_base_dispatch(w->base);
    return NULL;
}

/* The admin listener (admin.listen, docs/top.md) on worker 0's loop, with
 * its limiter: /v1/top merges every worker's top keys. */
static int admin_start(daemon_state *d, char *err, size_t errlen) {
    const pd_admin_config *ac = pd_daemon_config_admin(d->boot->dcfg);
    if (ac->listen == NULL)
        return 0;
    char host[256];
    int port;
    if (pd_parse_listen(ac->listen, host, sizeof(host), &port) != 0) {
        snprintf(err, errlen, "\"%s\" is not HOST:PORT", ac->listen);
        return -1;
    }
    worker *w = &d->workers[0];
    d->admin = pd_admin_new(d->shared, d->boot, d->envoy_env ? NULL : d->config_path, host);
    w->admin_app = d->admin != NULL ? pd_app_new(d->shared, w->limiter) : NULL;
    if (w->admin_app == NULL) {
        snprintf(err, errlen, "out of memory");
        return -1;
    }
    w->admin_server =
        pd_server_new(w->base, w->admin_app, host, port, &d->limits, false, err, errlen);
    if (w->admin_server == NULL)
        return -1;
    if (pd_server_set_admin(w->admin_server, d->admin) != 0) {
        snprintf(err, errlen, "out of memory");
        return -1;
    }
    if (!pd_admin_is_loopback(host))
        pd_log(PD_LOG_WARN,
               "admin.listen %s is not loopback: anyone who reaches it sees the "
               "config and the top keys%s; keep it on a private network",
               ac->listen, pd_admin_hashes(d->admin) ? " (as keyed hashes)" : "");
    pd_log(PD_LOG_INFO, "admin listening on %s:%d (top keys: %zu counters, shown %s)", host,
           pd_server_port(w->admin_server), porteiro_top_k(w->limiter),
           pd_admin_hashes(d->admin) ? "as keyed hashes" : "raw");
    return 0;
}

static int start(daemon_state *d) {
    char err[512];
    porteiro_status st;
    bool redis = pd_settings_uses_redis(d->boot);
    d->shared = pd_shared_new(pd_settings_ref(d->boot), redis);
    if (d->shared == NULL) {
        pd_log(PD_LOG_ERROR, "out of memory");
        return -1;
    }
    if (!redis) {
        d->shared_limiter = porteiro_new(pd_settings_options(d->boot), &st, err, sizeof(err));
        if (d->shared_limiter == NULL) {
            pd_log(PD_LOG_ERROR, "limiter: %s", err);
            return -1;
        }
    }
    if (redis && pd_settings_options(d->boot)->tls_insecure)
        pd_log(PD_LOG_WARN, "redis.tls.insecure: Redis's certificate is not verified; anyone on "
                            "the path can pose as Redis");
    pd_shared_set_workers(d->shared, (size_t)d->nworkers, d->grpc_port != 0,
                          d->boot->spoe_port != 0);
    for (int i = 0; i < d->nworkers; i++) {
        if (worker_start(&d->workers[i], d, err, sizeof(err)) != 0) {
            pd_log(PD_LOG_ERROR, "%s", err);
            return -1;
        }
    }
    if (admin_start(d, err, sizeof(err)) != 0) {
        pd_log(PD_LOG_ERROR, "admin.listen: %s", err);
        return -1;
    }
    /* The watchdog sees every worker's loop (sd_notify.h). */
    d->watchdog = pd_watchdog_new(d->workers[0].base, d->nworkers);
    for (int i = 0; d->watchdog != NULL && i < d->nworkers; i++)
        if (pd_watchdog_attach(d->watchdog, i, d->workers[i].base) != 0) {
            pd_log(PD_LOG_ERROR, "watchdog: cannot start a timer");
            return -1;
        }
    describe(d, d->boot->npolicies, err, sizeof(err));
    pd_log(PD_LOG_INFO, "%s", err);
    if (d->boot->envoy_rules != NULL) {
        pd_log(PD_LOG_INFO, "envoy: %zu domains from %s", d->boot->envoy_rules->ndomains,
               d->boot->envoy_path);
        if (d->boot->envoy->watch) {
            d->watch = pd_watch_new(d->workers[0].base, d->boot->envoy_path, on_envoy_changed, d,
                                    err, sizeof(err));
            if (d->watch == NULL)
                pd_log(PD_LOG_WARN, "envoy: %s (reload with SIGHUP)", err);
        }
    }
    if (d->workers[0].grpc != NULL)
        pd_log(PD_LOG_INFO, "gRPC (envoy rate limit service, %s) listening on %s:%d",
               d->grpc_limits.tls != NULL ? "TLS" : "h2c", d->grpc_host,
               pd_grpc_server_port(d->workers[0].grpc));
    if (d->workers[0].spoe != NULL)
        pd_log(PD_LOG_INFO, "SPOE (HAProxy's SPOP 2.0) listening on %s:%d (max-frame-size %u)",
               d->boot->spoe_host, pd_spoe_server_port(d->workers[0].spoe),
               (unsigned)d->spoe_limits.max_frame_size);
    return 0;
}

/* Worker 0 runs on the main thread, which also takes the signals. */
static int run(daemon_state *d) {
    struct event_base *base = d->workers[0].base;
    struct event *hup = evsignal_new(base, SIGHUP, on_reload, d);
    struct event *term = evsignal_new(base, SIGTERM, on_stop, d);
    struct event *intr = evsignal_new(base, SIGINT, on_stop, d);
    int rc = -1;
    if (hup != NULL && term != NULL && intr != NULL && evsignal_add(hup, NULL) == 0 &&
        evsignal_add(term, NULL) == 0 && evsignal_add(intr, NULL) == 0) {
        rc = 0;
        for (int i = 1; i < d->nworkers && rc == 0; i++) {
            rc = pthread_create(&d->workers[i].thread, NULL, worker_main, &d->workers[i]) == 0 ? 0
                                                                                               : -1;
            d->workers[i].thread_started = rc == 0;
        }
        if (rc == 0) {
            char status[512];
            describe(d, d->boot->npolicies, status, sizeof(status));
            pd_notify("READY=1\nSTATUS=%s", status);
            rc = event_base_dispatch(base) < 0 ? -1 : 0;
        } else
            atomic_store(&d->stopping, true);
        for (int i = 1; i < d->nworkers; i++)
            if (d->workers[i].thread_started)
                pthread_join(d->workers[i].thread, NULL);
    } else {
        pd_log(PD_LOG_ERROR, "cannot install signal handlers");
    }
    if (hup != NULL)
        event_free(hup);
    if (term != NULL)
        event_free(term);
    if (intr != NULL)
        event_free(intr);
    return rc;
}

static void stop(daemon_state *d) {
    pd_watch_free(d->watch);
    pd_watchdog_free(d->watchdog); /* its timers live on the workers' loops */
    for (int i = 0; i < d->nworkers; i++)
        if (d->workers[i].d != NULL)
            worker_free(&d->workers[i]);
    porteiro_free(d->shared_limiter);
    pd_admin_free(d->admin);
    pd_shared_free(d->shared);
    pd_settings_unref(d->boot);
}

static int test_config(const char *path) {
    char err[512];
    pd_settings *s = pd_settings_load(path, err, sizeof(err));
    if (s == NULL) {
        fprintf(stderr, "porteirod: %s\n", err);
        return pd_settings_failed_on_envoy() ? 2 : 1;
    }
    printf("porteirod: %s: ok (%zu policies, listen %s:%d, %s backend)\n", path, s->npolicies,
           s->listen_host, s->listen_port, pd_settings_uses_redis(s) ? "redis" : "memory");
    if (s->spoe_port != 0)
        printf("porteirod: spoe: listen %s:%d\n", s->spoe_host, s->spoe_port);
    if (s->envoy_rules != NULL)
        printf("porteirod: envoy: %s: ok (%zu domains, %zu descriptors)\n", s->envoy_path,
               s->envoy_rules->ndomains, s->envoy_rules->nrules);
    pd_settings_unref(s);
    return 0;
}

/* A positive integer flag value, at most max; -1 if it is not one. */
static long flag_number(const char *text, long max) {
    char *end;
    long v = strtol(text, &end, 10);
    return text[0] >= '0' && text[0] <= '9' && *end == '\0' && v > 0 && v <= max ? v : -1;
}

/* Returns 0, or 2 (usage) on a bad flag. */
static int parse_flags(int argc, char **argv, daemon_state *d, const char **check) {
    for (int i = 1; i < argc; i++) {
        const char *flag = argv[i], *next = i + 1 < argc ? argv[i + 1] : NULL;
        if (strcmp(flag, "--help") == 0) {
            usage(stdout);
            exit(0);
        }
        if (strcmp(flag, "--envoy-env") == 0) {
            d->envoy_env = true;
            continue;
        }
        if (strcmp(flag, "--version") == 0) {
            printf("porteirod %s (commit %s)\n", PORTEIRO_VERSION, PORTEIRO_COMMIT);
            exit(0);
        }
        if (next == NULL)
            return 2;
        i++;
        if (strcmp(flag, "--config") == 0)
            d->config_path = next;
        else if (strcmp(flag, "--test-config") == 0)
            *check = next;
        else if (strcmp(flag, "--log-level") == 0 && pd_log_parse_level(next) >= 0)
            pd_log_set_level((pd_log_level)pd_log_parse_level(next));
        else if (strcmp(flag, "--log-format") == 0 && pd_log_parse_format(next) >= 0)
            pd_log_set_format((pd_log_format)pd_log_parse_format(next));
        else if (strcmp(flag, "--workers") == 0 && flag_number(next, PD_MAX_WORKERS) > 0)
            d->nworkers = (int)flag_number(next, PD_MAX_WORKERS);
        else if (strcmp(flag, "--max-connections") == 0 && flag_number(next, 1000000) > 0)
            d->limits.max_connections = d->grpc_limits.max_connections =
                d->spoe_limits.max_connections = (size_t)flag_number(next, 1000000);
        else if (strcmp(flag, "--timeout") == 0 && flag_number(next, 3600) > 0)
            d->limits.timeout_s = d->grpc_limits.timeout_s = (int)flag_number(next, 3600);
        else if (strcmp(flag, "--grpc-listen") == 0)
            d->grpc_listen = next;
        else if (strcmp(flag, "--grpc-tls-cert") == 0)
            d->grpc_tls_cert = next;
        else if (strcmp(flag, "--grpc-tls-key") == 0)
            d->grpc_tls_key = next;
        else if (strcmp(flag, "--grpc-max-message") == 0 && flag_number(next, 1L << 30) > 0)
            d->grpc_limits.max_message_bytes = (size_t)flag_number(next, 1L << 30);
        else
            return 2;
    }
    return 0;
}

int main(int argc, char **argv) {
    static daemon_state d; /* large (workers): static, zeroed */
    const char *check = NULL;
    d.nworkers = 1;
    pd_log_init(); /* is stderr the journal? */
    pd_server_limits_default(&d.limits);
    pd_grpc_limits_default(&d.grpc_limits);
    pd_spoe_limits_default(&d.spoe_limits);
    if (parse_flags(argc, argv, &d, &check) != 0 ||
        (check == NULL && (d.config_path == NULL) == !d.envoy_env)) {
        usage(stderr);
        return 2;
    }
    if (check != NULL)
        return test_config(check);
    pd_notify_init(); /* before any thread: it reads the environment */
    char err[512];
    d.boot = load_settings(&d, err, sizeof(err));
    if (d.boot == NULL) {
        pd_log(PD_LOG_ERROR, "%s", err);
        return pd_settings_failed_on_envoy() || d.envoy_env ? 2 : 1;
    }
    /* The gRPC listener: the flag, else the file's envoy.grpc_listen. */
    snprintf(d.grpc_host, sizeof(d.grpc_host), "%s", d.boot->grpc_host);
    d.grpc_port = d.boot->grpc_port;
    if (d.grpc_listen != NULL &&
        pd_parse_listen(d.grpc_listen, d.grpc_host, sizeof(d.grpc_host), &d.grpc_port) != 0) {
        pd_log(PD_LOG_ERROR, "--grpc-listen: \"%s\" is not HOST:PORT", d.grpc_listen);
        pd_settings_unref(d.boot);
        return 2;
    }
    if ((d.grpc_tls_cert == NULL) != (d.grpc_tls_key == NULL)) {
        pd_log(PD_LOG_ERROR, "--grpc-tls-cert and --grpc-tls-key go together");
        pd_settings_unref(d.boot);
        return 2;
    }
    if (d.grpc_tls_cert != NULL && d.grpc_port != 0) {
        d.grpc_limits.tls = pd_tls_ctx_new(d.grpc_tls_cert, d.grpc_tls_key, err, sizeof(err));
        if (d.grpc_limits.tls == NULL) {
            pd_log(PD_LOG_ERROR, "gRPC TLS: %s", err);
            pd_settings_unref(d.boot);
            return 1;
        }
    }
    /* Every listener's deadline for a request to arrive whole. */
    d.limits.header_timeout_ms = d.grpc_limits.header_timeout_ms = d.spoe_limits.header_timeout_ms =
        pd_daemon_config_client_header_timeout_ms(d.boot->dcfg);
    d.spoe_limits.max_frame_size = pd_daemon_config_spoe(d.boot->dcfg)->max_frame_size;
    /* A buffer per connection must hold at least one whole message. */
    if (d.grpc_limits.max_buffered_bytes < 2 * d.grpc_limits.max_message_bytes)
        d.grpc_limits.max_buffered_bytes = 2 * d.grpc_limits.max_message_bytes;
    signal(SIGPIPE, SIG_IGN);
    start_overrides(&d, d.boot);
    int rc = start(&d) == 0 ? run(&d) : -1;
    stop(&d);
    pd_tls_ctx_free(d.grpc_limits.tls);
    pd_log(rc == 0 ? PD_LOG_INFO : PD_LOG_ERROR, "%s", rc == 0 ? "stopped" : "exiting on error");
    return rc == 0 ? 0 : 1;
}
