/*
 * porteiro.h — the core public header of libporteiro, a distributed rate
 * limiter (porteiro_config.h: the YAML config file; porteiro_libevent.h: the
 * libevent adapter). docs/api.md says what is stable and how structs grow.
 *
 * A limiter handle (porteiro_t) decides whether a request of some cost may pass
 * under one or several limits, for one client key. State lives in Redis (each
 * decision is one atomic Lua script call, EVALSHA) or, when no Redis URL is
 * given, in an in-process memory backend with the same semantics.
 *
 * Units: every time is an integer number of milliseconds; every amount is an
 * integer number of units of cost. No floating point crosses this API.
 *
 * Ownership: every pointer passed in is borrowed for the duration of the call
 * only (the library copies what it keeps). Decisions are plain values owned by
 * the caller. Strings returned by porteiro_strerror() are static; the string
 * returned by porteiro_errmsg() stays valid until the next call on that handle.
 *
 * Thread-safety: a handle may be shared by several threads; synchronous calls
 * on one handle are serialised by a mutex inside it (so one handle holds one
 * Redis connection and concurrent callers queue on it). For throughput, give
 * each thread its own handle. The asynchronous calls (porteiro_check_async)
 * must all be made from the thread that runs the attached event loop, and
 * their callbacks run on it. porteiro_free() must not race any other call.
 */
#ifndef PORTEIRO_H
#define PORTEIRO_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* The version of these headers; porteiro_version() is the library's, which
 * may be newer (the same major: see "Versions" in docs/api.md). CMake
 * takes the project's version from these three lines. */
#define PORTEIRO_VERSION_MAJOR 1
#define PORTEIRO_VERSION_MINOR 0
#define PORTEIRO_VERSION_PATCH 0
#define PORTEIRO_VERSION "1.0.0"
/* 0xMMmmpp, e.g. 0x010000 for 1.0.0: compare with >=. */
#define PORTEIRO_VERSION_NUM                                                                       \
    ((PORTEIRO_VERSION_MAJOR << 16) | (PORTEIRO_VERSION_MINOR << 8) | PORTEIRO_VERSION_PATCH)

/* What libporteiro exports: every function and object this header (and
 * the other include/porteiro_*.h) declares, and nothing else. The library is built with
 * -fvisibility=hidden and a version script (cmake/libporteiro.map, version
 * node PORTEIRO_1.0); tests/house/exports_test.sh holds the two lists equal. */
#if defined(__GNUC__) || defined(__clang__)
#define PORTEIRO_API __attribute__((visibility("default")))
#else
#define PORTEIRO_API
#endif

/* The library's version at run time: "1.0.0", and PORTEIRO_VERSION_NUM's
 * form of it. */
PORTEIRO_API const char *porteiro_version(void);
PORTEIRO_API unsigned porteiro_version_num(void);

/* Status codes. Append-only: values never change meaning between versions. */
typedef enum porteiro_status {
    PORTEIRO_OK = 0,
    PORTEIRO_ERR_INVALID = 1,       /* a bad argument: see porteiro_errmsg() */
    PORTEIRO_ERR_KEY = 2,           /* an empty key (a key of any length is
                                       limited: PORTEIRO_MAX_KEY_LEN) */
    PORTEIRO_ERR_NOMEM = 3,         /* an allocation failed */
    PORTEIRO_ERR_CONNECT = 4,       /* Redis could not be reached */
    PORTEIRO_ERR_TIMEOUT = 5,       /* Redis did not answer within the budget */
    PORTEIRO_ERR_REDIS = 6,         /* Redis answered with an error */
    PORTEIRO_ERR_AUTH = 7,          /* Redis refused the credentials */
    PORTEIRO_ERR_FULL = 8,          /* no longer returned: a full memory backend evicts */
    PORTEIRO_ERR_PROTOCOL = 9,      /* Redis answered something unexpected */
    PORTEIRO_ERR_CIRCUIT_OPEN = 10, /* the breaker is open: Redis not called */
    PORTEIRO_ERR_CONFIG = 11,       /* a configuration file could not be used */
    PORTEIRO_ERR_UNSUPPORTED = 12,  /* not available with this backend */
    PORTEIRO_ERR_PERMISSION = 13    /* Redis's ACL refuses a command porteiro
                                       needs (NOPERM): a configuration error,
                                       answered as such whatever on_error says
                                       (never a fallback), and no failure of
                                       the node for the breaker.
                                       docs/faults.md, "Least privilege" */
} porteiro_status;

/* The algorithms. Their exact semantics are in docs/algorithms.md. */
typedef enum porteiro_algorithm {
    PORTEIRO_FIXED_WINDOW = 1,   /* one counter per window aligned to the epoch */
    PORTEIRO_TOKEN_BUCKET = 2,   /* continuous refill at L per P, capacity B */
    PORTEIRO_GCRA = 3,           /* theoretical arrival time, capacity B */
    PORTEIRO_SLIDING_WINDOW = 4, /* weighted previous + current window */
    PORTEIRO_SLIDING_LOG = 5,    /* exact log of the last P ms; L <= 1000 */
    PORTEIRO_CONCURRENCY = 6     /* leases: porteiro_acquire / _release, not
                                    porteiro_check (PORTEIRO_ERR_UNSUPPORTED) */
} porteiro_algorithm;

/* Bounds enforced on every call (a violation is PORTEIRO_ERR_INVALID / _KEY). */
/* A client key (1 byte or more, any bytes) of at most this many bytes and
 * holding no '}' is written into its Redis keys as it is; a longer one, or
 * one holding a '}', is limited all the same, under the SHA-256 of the
 * whole key (docs/cluster.md, "Keys": the layout). Every Redis key is
 * bounded whatever the client key's length. */
#define PORTEIRO_MAX_KEY_LEN 512
#define PORTEIRO_MAX_LIMITS 8                /* limits in one policy check */
#define PORTEIRO_MAX_AMOUNT 1000000000LL     /* L, B and cost: at most 10^9 */
#define PORTEIRO_MAX_PERIOD_MS 31622400000LL /* P: at most 366 days */
/* sliding_log keeps one entry per unit (Redis: a sorted-set member each)
 * and concurrency one per lease: O(L) memory per key, so L is bounded. A
 * check of cost n writes n members, so the log's bound also bounds the
 * work of one script call. */
#define PORTEIRO_MAX_LOG_LIMIT 1000
#define PORTEIRO_MAX_LEASES 10000
/* Exact fractions are kept as integers scaled by P, so L * P and B * P
 * must be at most 2^50: Lua numbers are doubles, exact below 2^53, and the
 * scripts add up to three such values. E.g. B = 10^6 with P = 1 day is
 * fine, B = 10^9 with P = 1 day is refused. The fixed window scales
 * nothing and has no such bound. */
#define PORTEIRO_MAX_SCALED ((int64_t)1 << 50)
/* The longest wait a reservation may accept (porteiro_request.max_wait_ms):
 * one day. */
#define PORTEIRO_MAX_WAIT_MS 86400000LL

/* now_ms value meaning "use the backend's clock" (Redis TIME, or the process
 * clock of the memory backend). A caller-supplied clock is for tests. */
#define PORTEIRO_NOW (-1)

/* One limit: an algorithm with L units per P ms and, where it applies, a
 * capacity B (burst). burst = 0 means "B = L". */
typedef struct porteiro_limit {
    porteiro_algorithm algorithm;
    int64_t limit;     /* L, units of cost per period */
    int64_t period_ms; /* P, ms */
    int64_t burst;     /* B, units; 0 = L. Used by token_bucket and gcra. */
} porteiro_limit;

/* The answer of one limit. */
typedef struct porteiro_result {
    bool allowed;
    int64_t limit;          /* L (or B where the capacity is B) */
    int64_t remaining;      /* units that would still pass right now, >= 0 */
    int64_t reset_ms;       /* ms until the limit is fully restored */
    int64_t retry_after_ms; /* 0 when allowed; when denied, ms after which the
                               same check can pass; -1 if it never can */
    int64_t wait_ms;        /* allowed after a wait (a reservation, see
                               porteiro_request.max_wait_ms): the ms from
                               now at which this limit lets the units pass;
                               0 otherwise */
} porteiro_result;

/* How a decision was reached when Redis could not give it (issue: resilience). */
typedef enum porteiro_fallback {
    PORTEIRO_FALLBACK_NONE = 0,   /* a real decision from the backend */
    PORTEIRO_FALLBACK_OPEN = 1,   /* allowed because Redis failed */
    PORTEIRO_FALLBACK_CLOSED = 2, /* denied because Redis failed */
    PORTEIRO_FALLBACK_LOCAL = 3   /* decided by the local memory backend */
} porteiro_fallback;

/* The decision of one check: the policy as a whole plus each of its limits,
 * in the order given. When denied, nothing was consumed in any limit, and
 * every per-limit result describes the state as it stands (unchanged). */
typedef struct porteiro_decision {
    bool allowed;                    /* all limits allowed */
    int64_t limit;                   /* L of the limit with the least remaining */
    int64_t remaining;               /* the lowest remaining */
    int64_t reset_ms;                /* the largest reset */
    int64_t retry_after_ms;          /* 0 if allowed; else the largest retry of the
                                        denying limits, or -1 if one can never pass */
    int denied_by;                   /* index of the first denying limit, or -1 */
    porteiro_fallback fallback;      /* NONE unless Redis failed */
    porteiro_status fallback_reason; /* the failure behind a fallback */
    size_t nlimits;
    porteiro_result limits[PORTEIRO_MAX_LIMITS];
    /* Shadow mode (a policy's check, policy->shadow): the limits
     * denied this check, but it is allowed anyway. allowed is then true and
     * retry_after_ms 0; denied_by and limits[] say what would have denied.
     * Nothing was consumed (a denial never consumes). False otherwise. */
    bool shadow_denied;
    /* A reservation (porteiro_request.max_wait_ms): allowed is true and
     * the units are already taken, but the caller must wait wait_ms (the
     * longest of the limits' waits) before it proceeds. 0 when the check
     * passes at once, and always when denied. docs/algorithms.md,
     * "Reservations". */
    int64_t wait_ms;
    /* A settle (porteiro_settle): the largest debt of its limits after it
     * (the units past empty the next checks wait out, 0: none), and the
     * most units of this settle's charge that went past empty in any one
     * limit (0 for a give-back, or a charge that fit in what remained).
     * 0 in every other answer. */
    int64_t debt;
    int64_t debt_added;
    /* Room for the fields of a later 1.x, which it will fill in every
     * decision; 1.0 neither reads nor writes them. The struct keeps its
     * size across 1.x. */
    int64_t reserved[8];
} porteiro_decision;

/* What to do when Redis fails or runs out of time. */
typedef enum porteiro_on_error {
    PORTEIRO_ON_ERROR_OPEN = 0,   /* allow (the library default) */
    PORTEIRO_ON_ERROR_CLOSED = 1, /* deny */
    PORTEIRO_ON_ERROR_LOCAL = 2,  /* decide in memory, L / local_divisor */
    PORTEIRO_ON_ERROR_ERROR = 3   /* return the error status, no decision */
} porteiro_on_error;

/* Whether checks may use the Redis module porteiro.so where a node has it. */
typedef enum porteiro_module_mode {
    PORTEIRO_MODULE_AUTO = 0, /* use it when the node has it (asked on connect) */
    PORTEIRO_MODULE_OFF = 1   /* always the Lua scripts */
} porteiro_module_mode;

/* A quota lease (docs/quota_leasing.md): a key's units taken from Redis in
 * advance, up to max_units at a time, and spent in memory for at most
 * max_ms, so that a hot key costs Redis one call per lease instead of one
 * per check. Never over-admits (a unit is allowed only if Redis gave it);
 * under-admits at most N x max_units with N instances. Only for limits of
 * fixed_window, token_bucket, gcra and sliding_window; a check with a cost
 * of 0, a wait (max_wait_ms), a refund or another algorithm goes to Redis
 * as without it. max_ms 0: off. Not the concurrency leases of
 * porteiro_acquire. */
typedef struct porteiro_quota_lease {
    int64_t max_ms;    /* 1..60000: the longest a lease lives; 0: off */
    int64_t max_units; /* 1..10^9: the most units one lease takes */
    /* 0..16: a grant's units are spent only once this many replicas of
     * the master hold the grant (WAIT after it, one per lease, within the
     * check's budget), so that a failover cannot lose units already
     * spent; a grant they did not acknowledge in time answers its own
     * check only, and its other units go back with the key's next grant
     * (docs/quota_leasing.md, "Failover"). 0: no wait. */
    int64_t replicas;
} porteiro_quota_lease;

/* The most replicas a quota lease may wait for. */
#define PORTEIRO_MAX_LEASE_REPLICAS 16

/* The handle's options. Caller-allocated, and it grows: a later 1.x adds
 * fields at the end. struct_size says how much of it the caller's program
 * knows: set it with porteiro_options_init (which passes the sizeof of the
 * header the program was compiled with), never by hand. The library reads
 * only those bytes (the fields past them keep their defaults), so a program
 * built against an older header still works with a newer library; a
 * struct_size below 1.0's (0: porteiro_options_init not called) is
 * PORTEIRO_ERR_INVALID, and one beyond what this library knows is accepted
 * only when the bytes past its own fields are zero (else
 * PORTEIRO_ERR_UNSUPPORTED: an option this library cannot honour). */
typedef struct porteiro_options {
    size_t struct_size; /* set by porteiro_options_init */
    /* NULL or "" → the memory backend. Otherwise
     * redis://[user:password@]host[:port][/db] or
     * unix://[[user]:password@]/path/to/socket[?db=N] or
     * redis+cluster://[user:password@]host:port[,host:port...] or
     * redis+sentinel://[user:password@]host:port[,host:port...]/MASTER[/DB]
     * (docs/cluster.md) */
    const char *redis_url;
    const char *prefix;            /* key prefix; NULL → "porteiro" */
    int connect_timeout_ms;        /* 0 → 200: the first connection, made by
                                      porteiro_new (reconnects use the budget) */
    int command_timeout_ms;        /* 0 → 50: the budget of one check, all
                                      included: queueing on the handle, name
                                      resolution, reconnecting, the round trip.
                                      See docs/faults.md */
    porteiro_on_error on_error;    /* what a failed Redis call turns into */
    int local_divisor;             /* on_error LOCAL: L / divisor; 0 → 1 */
    size_t memory_max_keys;        /* keys the memory backend holds; 0 →
                                      1 000 000, else at least 8. When full, a
                                      new key takes the least recently used
                                      one's place (that client starts afresh;
                                      counted in memory_evictions) */
    int breaker_failures;          /* consecutive failures that open the
                                      breaker; 0 → 5, -1 → no breaker */
    int breaker_cooldown_ms;       /* first back-off once open; 0 → 250; it
                                      doubles per failed probe up to 750 ms */
    size_t deny_cache_keys;        /* 0 → off. Else Redis's denials are
                                      remembered (at most this many, least
                                      recently used first out) and the same
                                      check (key, limits, cost) is denied
                                      locally, without Redis, until its
                                      retry_after_ms has passed. A refund or
                                      reset by another instance is then seen
                                      at most that late; one through this
                                      handle empties the cache. docs/algorithms.md */
    size_t batch_max;              /* checks one Redis script call may carry
                                      (porteiro_check_many, and async checks
                                      made in one pass of the loop); 0 → 64,
                                      1 → one call per check. Each check is
                                      still decided alone, all-or-nothing.
                                      docs/algorithms.md, "Batches" */
    const char *sentinel_password; /* NULL → the sentinels take no AUTH */
    /* TLS to Redis (docs/config.md, "TLS"): every node, the sentinels too.
     * On with a rediss:// URL (rediss+cluster://, rediss+sentinel://) or
     * with tls. The files are read by porteiro_new (and again by
     * porteiro_tls_reload); the strings are not kept. Verification is on
     * unless tls_insecure: the server's certificate against tls_ca_file /
     * tls_ca_dir (the system store when both are NULL) and its name against
     * tls_server_name, else the URL's host. A TLS option with TLS off, an
     * unreadable file or a key that does not match its certificate is
     * PORTEIRO_ERR_INVALID. */
    bool tls;                          /* TLS with a redis:// URL */
    const char *tls_ca_file;           /* PEM bundle of the CAs to trust */
    const char *tls_ca_dir;            /* a folder of CA certificates (c_rehash) */
    const char *tls_cert_file;         /* client certificate (mTLS), PEM; needs tls_key_file */
    const char *tls_key_file;          /* its private key, PEM, not encrypted */
    const char *tls_server_name;       /* SNI and the name to verify; NULL → the host */
    bool tls_insecure;                 /* no verification at all (tests only) */
    porteiro_module_mode redis_module; /* AUTO (the default): where a node has
                                    the Redis module porteiro.so loaded,
                                    checks run as its commands instead of
                                    the scripts (same answers, same state,
                                    less of Redis's time; docs/module.md);
                                    OFF: always the scripts */
    size_t top_keys;                   /* 0: off (the default). Else the handle
                                          keeps the top keys of each policy by
                                          allowed and denied units, with this many
                                          counters (4..4096; config top.keys,
                                          64). porteiro_top_get reads them.
                                          docs/top.md */
    porteiro_quota_lease quota_lease;  /* leases for this handle's checks
                                     that name no policy (porteiro_check,
                                     _request, _many and their async
                                     forms, and multi-key checks that
                                     bring none); a policy's own lease:
                                     applies to a policy's checks.
                                     Zero: off.
                                     A Redis backend only (the memory
                                     backend decides in memory anyway) */
} porteiro_options;

/* One check request. key is binary-safe (key_len bytes). */
typedef struct porteiro_request {
    const porteiro_limit *limits; /* 1..PORTEIRO_MAX_LIMITS limits */
    size_t nlimits;
    const void *key;
    size_t key_len;
    int64_t cost;   /* >= 0; 0 is a peek: nothing is written */
    int64_t now_ms; /* PORTEIRO_NOW, or an injected clock (tests) */
    /* 0: allowed or denied now (the default). Else the longest the caller
     * is willing to wait, 0..PORTEIRO_MAX_WAIT_MS: a check that would be
     * denied now but passes within max_wait_ms is a reservation, decided
     * in the same single script call: the units are taken now (nobody
     * else can have them), the decision is allowed with wait_ms > 0, and
     * the caller sleeps wait_ms before it proceeds. Beyond max_wait_ms it
     * is denied as without it, nothing taken. porteiro_refund with the
     * same limits, key and cost gives a reservation back (a cancel).
     * Not for concurrency limits (PORTEIRO_ERR_INVALID). */
    int64_t max_wait_ms;
    /* What else a check may be, instead of limits (one of the three):
     * a policy's check for key (its limits, its on_error override, shadow
     * mode and quota lease, and its name in the top keys: key, cost,
     * now_ms and max_wait_ms as above), or a multi-key check (the items
     * carry their keys and costs; key, cost, now_ms and max_wait_ms are
     * not read). porteiro_settle* honours both as the check does;
     * porteiro_refund* and porteiro_reset take limits or a policy (a
     * multi-key request is PORTEIRO_ERR_UNSUPPORTED there). A request that
     * names more than one of limits, policy and multi is
     * PORTEIRO_ERR_INVALID wherever it is given. */
    const struct porteiro_policy *policy;
    const struct porteiro_multi_request *multi;
    /* Room for the fields of a later 1.x: zero (a designated initializer
     * leaves it so); anything else is PORTEIRO_ERR_UNSUPPORTED. */
    const void *reserved[4];
} porteiro_request;

typedef struct porteiro porteiro_t;

/* Fills the first struct_size bytes of opts with the defaults (zero) and
 * sets opts->struct_size. Call it through porteiro_options_init; bindings
 * that lay the struct out themselves pass their own size. */
PORTEIRO_API void porteiro_options_init_size(porteiro_options *opts, size_t struct_size);
/* Fills opts with the defaults (zero fields) and its struct_size: call it
 * before setting any field. */
static inline void porteiro_options_init(porteiro_options *opts) {
    porteiro_options_init_size(opts, sizeof(*opts));
}

/* Creates a limiter. On failure returns NULL and, when err is not NULL,
 * writes a status there and a message into errbuf (errlen bytes). It
 * connects to Redis once, within connect_timeout_ms: credentials Redis
 * refuses fail with PORTEIRO_ERR_AUTH, a database it does not have with
 * PORTEIRO_ERR_INVALID; an unreachable or slow Redis does not fail it (the
 * handle falls back and reconnects by itself, see docs/faults.md). */
PORTEIRO_API porteiro_t *porteiro_new(const porteiro_options *opts, porteiro_status *err,
                                      char *errbuf, size_t errlen);
PORTEIRO_API void porteiro_free(porteiro_t *p);

/* Reads the TLS files of porteiro_options again (certificate rotation):
 * connections made from now on use them; open ones go on. On failure the
 * files read before stay in use, with the cause in errbuf. PORTEIRO_OK at
 * once without TLS. Thread-safe. */
PORTEIRO_API porteiro_status porteiro_tls_reload(porteiro_t *p, char *errbuf, size_t errlen);

/* The message of the last failed call on this handle ("" if none). */
PORTEIRO_API const char *porteiro_errmsg(const porteiro_t *p);
/* A static description of a status. */
PORTEIRO_API const char *porteiro_strerror(porteiro_status status);

/* Validates a limit; on error writes a message into errbuf. */
PORTEIRO_API porteiro_status porteiro_limit_validate(const porteiro_limit *limit, char *errbuf,
                                                     size_t errlen);

/* THE check: one request (limits for one key, all-or-nothing; or a
 * policy's check; or a multi-key one: porteiro_request.policy, .multi).
 * Returns PORTEIRO_OK with a decision (possibly a fallback one, see
 * decision->fallback), or an error status with *decision untouched and
 * the reason in porteiro_errmsg(p). The blocking many is
 * porteiro_check_many, the asynchronous one porteiro_check_async. */
PORTEIRO_API porteiro_status porteiro_check_request(porteiro_t *p, const porteiro_request *req,
                                                    porteiro_decision *decision);

/* The common case in one line: one limit, a NUL-terminated key, the
 * backend's clock (porteiro_check_request underneath). cost 0 is a peek:
 * the state as it is, nothing written. */
PORTEIRO_API porteiro_status porteiro_check(porteiro_t *p, const porteiro_limit *limit,
                                            const char *key, int64_t cost,
                                            porteiro_decision *decision);

/* N checks in one round trip (pipelined on one connection). statuses[i] and
 * decisions[i] answer reqs[i]. Returns PORTEIRO_OK when every check got a
 * decision, else the first failing status. Requests of a policy or of
 * several keys among them are decided one after the other instead. */
PORTEIRO_API porteiro_status porteiro_check_many(porteiro_t *p, const porteiro_request *reqs,
                                                 size_t n, porteiro_decision *decisions,
                                                 porteiro_status *statuses);

/* Gives back up to req->cost units (>= 1) taken by earlier allowed checks
 * of these limits for this key, or of req->policy's (its own counters: see
 * porteiro_policy) for req->key: the request failed, or cost less than
 * announced. Never above capacity; a no-op where nothing is left to give
 * back (see docs/policies.md, "Refunds"). The decision describes the state
 * after the refund (allowed is true). A multi-key request (.multi) is
 * PORTEIRO_ERR_UNSUPPORTED: settle it with used 0 (porteiro_settle). */
PORTEIRO_API porteiro_status porteiro_refund(porteiro_t *p, const porteiro_request *req,
                                             porteiro_decision *decision);

/* Forgets the state of req's limits, or of req->policy's counters, for
 * req->key (Redis and the local fallback's); cost, now_ms and max_wait_ms
 * are not read; .multi is PORTEIRO_ERR_UNSUPPORTED. Redis failures are
 * returned, never turned into a fallback; while the circuit breaker is
 * open this returns PORTEIRO_ERR_CIRCUIT_OPEN at once. */
PORTEIRO_API porteiro_status porteiro_reset(porteiro_t *p, const porteiro_request *req);

/* ---- Several keys in one check -------------------------------------- */

/* One item of a multi-key check: its own key, limit and cost. The items of
 * one check are decided together, all-or-nothing: when one denies, no item
 * consumes anything (on a Redis Cluster, items of several slots: what the
 * other slots took is given back, see porteiro_request.multi). */
typedef struct porteiro_item {
    porteiro_limit limit; /* fixed_window, token_bucket, gcra or
                             sliding_window (sliding_log: UNSUPPORTED) */
    const void *key;      /* binary-safe, key_len bytes, >= 1 */
    size_t key_len;
    int64_t cost;         /* 0..10^9; 0 is a peek of this item */
    bool shadow;          /* its denial is reported (limits[i].allowed is
                             false) but denies nothing: the other items
                             still consume, and the decision's allowed
                             ignores it (shadow_denied says it happened).
                             A shadow item that denies consumes nothing. */
    const char *top_name; /* NULL: not counted in the top keys; else the
                             name its key is counted under (porteirod:
                             "DOMAIN/RULE_KEY"), when the handle keeps
                             top keys (porteiro_options.top_keys) */
} porteiro_item;

/* A multi-key check. Each item's Redis key is
 * prefix ":{" item key "}=" TAG ":" algorithm-and-period, TAG being the
 * tag's length ":" the tag (or "#" and its SHA-256 when it is over 64 bytes
 * or holds a '}'): the item's own key is the Redis Cluster hash tag, so the
 * items of one check (one envoy domain, one nginx location) spread over a
 * cluster's masters like single keys, and the tag is a namespace after it:
 * two tags never share a state, and no item or tag bytes can name another
 * tag's. An item key beyond PORTEIRO_MAX_KEY_LEN bytes, or holding a '}',
 * is written as a digest (docs/cluster.md, "Keys"). Items naming the same
 * key, algorithm and period are ONE counter, never an error: the
 * check takes the largest of their costs on it once (of the items not in
 * shadow, when one is not), and each item's limit is checked against that
 * counter and reported in its own decision->limits[i] (token buckets and
 * GCRA of different L or B keep a state each, as a policy's twins do).
 * Keys written by versions before this layout (prefix ":{" tag "}:" item
 * ...) are moved by porteiro migrate-keys (docs/cluster.md). */
typedef struct porteiro_multi_request {
    const void *tag;
    size_t tag_len;
    const porteiro_item *items; /* 1..PORTEIRO_MAX_LIMITS items */
    size_t nitems;
    int64_t now_ms;             /* PORTEIRO_NOW, or an injected clock (tests) */
    bool shadow;                /* the whole check in shadow mode (as a
                                   policy's shadow): allowed, shadow_denied */
    porteiro_quota_lease lease; /* a quota lease for this check; zero: the
                                   handle's quota_lease. Taken only when
                                   every item has the same cost (>= 1) and
                                   none is in shadow; its units are then
                                   checks of that cost on every item at
                                   once (docs/quota_leasing.md) */
    const void *reserved[4];    /* zero: room for later fields, as in
                                   porteiro_request */
} porteiro_multi_request;

/* A multi-key check (porteiro_request.multi): decision->limits[i] answers items[i]; the
 * decision is allowed when every non-shadow item allows. On one node, or
 * when the items' keys share a slot: one script call (the flat policy
 * script with per-item costs), never batched with other checks; one item
 * that is not in shadow is decided as a single check of its key (it may
 * share a batch, and the module decides it when loaded). On a Redis
 * Cluster, items on several slots are decided per slot (one call each, all
 * slots at once) and combined; when the check is not admitted (a slot
 * denied, or failed and on_error did not admit it), the units the other
 * slots took are given back, never more than they still hold: an
 * under-admission while the give-back is in flight, never an
 * over-admission; a give-back that fails is counted
 * (porteiro_stats.giveback_failed) and its units stay taken until they
 * expire (docs/cluster.md, "A check over several slots"). Such a check
 * takes no quota lease. A check with a shadow item skips the deny cache.
 * on_error applies as for porteiro_check_request: a slot that fails makes
 * the whole check on_error's. */

/* ---- Concurrency leases ---------------------------------------------- */

/* Lease ids: 32 lowercase hex characters (16 random bytes), unique across
 * processes. Buffers hold PORTEIRO_LEASE_ID_LEN + 1 bytes. */
#define PORTEIRO_LEASE_ID_LEN 32

/* Takes one of at most `limit` (1..PORTEIRO_MAX_LEASES) concurrent
 * leases on key, for lease_ms (1 ms..366 days). Allowed: lease_id gets the
 * new id and the decision (one limit) says how many remain, reset_ms = until
 * the last lease expires. Denied: lease_id is "", retry_after_ms = until the
 * first lease expires. A lease never released expires after lease_ms, so a
 * crashed holder cannot leak capacity. Leases of one key share the count
 * whatever limit each acquire names. When Redis fails, on_error applies:
 * open → allowed with an id Redis does not know, closed → denied, local →
 * the memory backend's leases, error → the failure status. */
PORTEIRO_API porteiro_status porteiro_acquire(porteiro_t *p, int64_t limit, int64_t lease_ms,
                                              const void *key, size_t key_len, int64_t now_ms,
                                              porteiro_decision *decision,
                                              char lease_id[PORTEIRO_LEASE_ID_LEN + 1]);

/* Frees a lease. *released is true if it was live, false if unknown or
 * already expired (both are PORTEIRO_OK). */
PORTEIRO_API porteiro_status porteiro_release(porteiro_t *p, const void *key, size_t key_len,
                                              const char *lease_id, int64_t now_ms, bool *released);

/* Extends a live lease to lease_ms from now. *renewed is false if it was
 * unknown or already expired (then it is not recreated). */
PORTEIRO_API porteiro_status porteiro_renew(porteiro_t *p, int64_t lease_ms, const void *key,
                                            size_t key_len, const char *lease_id, int64_t now_ms,
                                            bool *renewed);

/* ---- Counters (monitoring) ------------------------------------------ */

/* Upper bounds (us, inclusive) of the Redis round-trip latency histogram;
 * the last bucket counts everything slower. */
#define PORTEIRO_LATENCY_BUCKETS 12
PORTEIRO_API extern const int64_t porteiro_latency_bounds_us[PORTEIRO_LATENCY_BUCKETS - 1];

/* Totals since porteiro_new. Counters only grow. No per-key data. */
typedef struct porteiro_stats {
    uint64_t checks; /* checks that returned a decision */
    uint64_t allowed;
    uint64_t denied;
    uint64_t fallback_open; /* decisions by on_error instead of Redis */
    uint64_t fallback_closed;
    uint64_t fallback_local;
    uint64_t redis_errors;                      /* failed Redis round trips, any cause */
    uint64_t redis_timeouts;                    /* of which: the budget ran out */
    uint64_t breaker_skips;                     /* checks not sent because the breaker was open */
    uint64_t breaker_opened;                    /* times the breaker opened */
    int breaker_state;                          /* 0 closed, 1 open, 2 half-open (probing) */
    uint64_t latency[PORTEIRO_LATENCY_BUCKETS]; /* Redis round trips by bucket */
    uint64_t latency_sum_us;
    uint64_t redis_connects;   /* connections made to Redis (first + reconnects) */
    int redis_eviction_risk;   /* 1: Redis's maxmemory-policy can evict limiter
                                  keys (which silently resets limits; also
                                  warned on stderr once); 0: it cannot
                                  (noeviction, or no maxmemory); -1: unknown
                                  (memory backend, not connected, INFO refused) */
    uint64_t deny_cache_hits;  /* denials answered by the deny cache, no Redis
                                  call (also counted in checks and denied) */
    uint64_t memory_evictions; /* keys of the memory backend (or the local
                                  fallback) dropped, least recently used
                                  first, to make room for new ones */
    uint64_t tls_handshakes;   /* TLS handshakes completed (every node) */
    uint64_t tls_failures;     /* TLS handshakes that failed, and servers that
                                  refused the client certificate after one */
    /* Gauges, as of the call (they go down too): */
    uint64_t deny_cache_entries; /* denials the deny cache holds (0: no cache) */
    uint64_t memory_keys;        /* keys the memory backend (or the local
                                    fallback) holds; at most memory.max_keys */
    /* Quota leases (docs/quota_leasing.md): */
    uint64_t quota_local;   /* checks answered from a lease, no Redis
                               call (also counted in checks, allowed) */
    uint64_t quota_grants;  /* leases Redis granted (one call each) */
    uint64_t quota_units;   /* units those leases took, the checks'
                               own included */
    uint64_t quota_cold;    /* checks with a lease on whose key was
                               too cold for one: decided in Redis as
                               without leases (a batch's share) */
    uint64_t quota_unacked; /* grants of a lease with replicas: N that
                               N replicas did not acknowledge in time:
                               their units were not spent */
    /* Settles (porteiro_settle*): counted here, not in checks: */
    uint64_t settles;           /* settles that returned a decision (a
                                   fallback's included) */
    uint64_t settle_debt_units; /* their debt_added, summed: units charged
                                   past empty */
    /* Multi-key checks over several Redis Cluster slots (docs/cluster.md,
     * "A check over several slots"): */
    uint64_t cross_slot_checks; /* such checks sent to Redis (one call
                                   per slot, the slots in parallel) */
    uint64_t givebacks;         /* give-backs sent: a slot took units
                                   while the check was not admitted (one
                                   per slot) */
    uint64_t giveback_failed;   /* of which not delivered (no answer, a
                                   master gone, an error): their units
                                   stay taken until they expire; logged */
    /* Global limits across regions (docs/regions.md), this handle's: */
    uint64_t global_local;         /* checks answered from a lease of the
                                      regional pool, no Redis call */
    uint64_t global_takes;         /* calls to the regional pool (takes) */
    uint64_t global_home_calls;    /* round trips to a home Redis */
    uint64_t global_home_failures; /* of which failed (no answer, refused) */
    uint64_t global_blocks;        /* blocks home granted and this handle
                                      deposited in its regional pool */
    uint64_t global_block_units;   /* their units */
    uint64_t global_returned;      /* units given back to home (drains) */
    uint64_t global_held;          /* gauge: units the pools held at their last
                                      take, plus this handle's leases of them */
    /* Room for the counters of a later 1.x (zeros): the struct keeps its
     * size across 1.x. */
    uint64_t reserved[16];
} porteiro_stats;

/* A consistent snapshot of the counters. */
PORTEIRO_API void porteiro_stats_get(porteiro_t *p, porteiro_stats *out);

/* ---- Introspection (tools: the CLI, benchmarks) -------------------- */

/* The Lua script that can run every Redis check, whatever its algorithms
 * (loaded with SCRIPT LOAD, called with EVALSHA), so that tools can drive
 * Redis with exactly the same work. Static text; *len (when not NULL) gets
 * its length in bytes. */
PORTEIRO_API const char *porteiro_script(size_t *len);
/* The smaller script a check of one limit of algorithm a runs (the same
 * arguments and replies; for a policy of several limits of a, a larger one
 * runs); a = 0 gives porteiro_script(). NULL for an unknown algorithm. */
PORTEIRO_API const char *porteiro_script_for(porteiro_algorithm a, size_t *len);
/* The script a check or peek of these n limits runs: a flat script for one
 * limit or for a policy of fixed_window, token_bucket, gcra and
 * sliding_window (their own arguments: `porteiro script --limits` prints it), else one
 * of the above. NULL when n is 0 or above PORTEIRO_MAX_LIMITS, or for an
 * unknown algorithm. */
PORTEIRO_API const char *porteiro_script_for_limits(const porteiro_limit *limits, size_t n,
                                                    size_t *len);

/* The Redis nodes behind a handle: a Redis Cluster's masters (those that
 * serve slots in the current map), else the one node (a Sentinel's: the
 * master last found). ping: each gets a PING within the budget (blocking:
 * not for the event-loop thread on one node, where porteirod peeks
 * instead); otherwise up is the breaker's view (not open). Fills up to max
 * entries; returns how many nodes there are (0 on the memory backend). */
typedef struct porteiro_node {
    char name[128]; /* "host:port", or the unix socket path */
    bool up;
    int breaker_state; /* 0 closed, 1 open, 2 half-open */
    bool module;       /* its checks run as the Redis module's commands, not
                          the scripts (redis_module AUTO and the node has it) */
} porteiro_node;
PORTEIRO_API size_t porteiro_nodes(porteiro_t *p, bool ping, porteiro_node *out, size_t max);
/* porteiro_nodes with a PING, on the event loop, for a Redis Cluster: each
 * master of the async router's map gets a PING on its loop connection; cb
 * gets every master's state once each has answered or run out of the
 * budget (nothing blocks the loop, so a frozen master delays only this
 * answer), maybe before this returns. cb runs exactly once when this
 * returns PORTEIRO_OK. Needs an attached loop (porteiro_attach_loop); anything but a
 * cluster is PORTEIRO_ERR_UNSUPPORTED (one node: a peek through
 * porteiro_check_async says as much). */
typedef void porteiro_nodes_fn(porteiro_t *p, const porteiro_node *nodes, size_t n, void *privdata);
PORTEIRO_API porteiro_status porteiro_nodes_async(porteiro_t *p, porteiro_nodes_fn *cb,
                                                  void *privdata);
/* Whether the handle talks to a Redis Cluster. */
PORTEIRO_API bool porteiro_is_cluster(const porteiro_t *p);

/* Counts the Redis keys under this handle's prefix ("prefix:*", with SCAN)
 * and the bytes Redis reports for them (MEMORY USAGE, summed). The memory
 * backend answers PORTEIRO_ERR_UNSUPPORTED. Each Redis exchange has the
 * command budget; a large keyspace takes several. */
PORTEIRO_API porteiro_status porteiro_key_usage(porteiro_t *p, uint64_t *keys, uint64_t *bytes);

/* What porteiro_migrate_keys did. */
typedef struct porteiro_migration {
    uint64_t scanned; /* keys under the prefix looked at */
    uint64_t moved;   /* multi-key items of the older layout moved to their
                         name in this one (docs/cluster.md, "Keys") */
    uint64_t merged;  /* of which the new name held a state already (this
                         version counted there since): both added up */
    uint64_t lost;    /* older items written as a digest (a tag and item over
                         512 bytes together): their bytes are not known, they
                         stay as they are and start fresh */
} porteiro_migration;

/* Moves the multi-key items that versions before this layout wrote
 * (prefix ":{" tag "}:" item ":" ..., every item on its tag's slot) to
 * their names in this one (prefix ":{" item "}=" tag ...): SCAN of every
 * master, each older item's state and TTL written at its new name (added
 * to a state there already), then the older key deleted. Safe to run twice
 * and under traffic (a check between the read and the delete counts at the
 * new name, which the migration adds to). *out says what was done, also
 * when a failure stopped it. docs/cluster.md, "Migrating multi-key items". */
PORTEIRO_API porteiro_status porteiro_migrate_keys(porteiro_t *p, porteiro_migration *out);

struct porteiro_policy; /* below, "Policies" */
/* Named policies' counters as versions before their own keys wrote them:
 * a policy's check then counted at its client's plain key (prefix ":{" key
 * "}:" D, D the algorithm and period), since then at the policy's own
 * (prefix ":{" key "}=" LEN ":" name ":" D, docs/cluster.md "Keys"). For
 * every such plain key whose D is one of the limits of policies[i] (several
 * entries may name one policy: its tiers' limits), SCAN of every master,
 * the state is copied to that policy's key: written, or added to a state
 * there already (merged), with the TTL either needs; the plain key stays
 * (checks without a policy still count there). Two policies that shared a
 * plain counter each get its whole count: the safe side. A copy is made
 * once: a marker beside it (prefix ":{" key "}!" ..., with the plain key's
 * TTL) makes a second run copy nothing. Every entry needs a name (1..1024
 * entries). out: scanned, moved = copies made, merged, lost = 0. */
PORTEIRO_API porteiro_status porteiro_migrate_policy_keys(porteiro_t *p,
                                                          const struct porteiro_policy *policies,
                                                          size_t npolicies,
                                                          porteiro_migration *out);

/* ---- Asynchronous API (event loop) ----------------------------------- */

/* The event loop the async checks run on, given by the caller as a table
 * of functions (docs/event_loop.md): a socket's readiness, one-shot timers
 * and the loop's clock. porteiro_libevent.h is this table for libevent
 * (porteiro_attach_libevent); another loop (libuv, nginx) is one small
 * file of the same.
 *
 * Contract, for every function:
 * - it is called on the loop's thread only (from porteiro_attach_loop,
 *   the *_async calls, porteiro_free, or a callback of the loop), never
 *   from two threads at once;
 * - ctx is the pointer given to porteiro_attach_loop, passed back as is;
 * - a handle returned by io_new or timer_new belongs to porteiro until it
 *   gives it back to io_free or timer_free (each is freed exactly once,
 *   at the latest by porteiro_free); NULL from them means out of memory;
 * - callbacks (fn) run on the loop's thread, later, never from inside the
 *   call that arms them; after io_free or timer_free (or timer_stop, for
 *   that timer) the callback must not run again, even if already due in
 *   this pass. */
typedef void porteiro_loop_io_fn(void *arg, bool readable, bool writable);
typedef void porteiro_loop_timer_fn(void *arg);
typedef struct porteiro_loop_ops {
    /* Watches fd (a connected or connecting socket; it stays porteiro's):
     * fn(arg, readable, writable) whenever it is readable (always
     * watched), or writable while write interest is on (off at first).
     * Level-triggered: it fires again while the condition holds. */
    void *(*io_new)(void *ctx, int fd, porteiro_loop_io_fn *fn, void *arg);
    /* Turns write interest on or off (called often: keep it cheap, e.g.
     * only note the change). */
    void (*io_want_write)(void *ctx, void *io, bool on);
    /* Stops watching and frees the handle; the fd is closed by porteiro
     * after this returns. */
    void (*io_free)(void *ctx, void *io);
    /* A one-shot timer calling fn(arg), not armed. */
    void *(*timer_new)(void *ctx, porteiro_loop_timer_fn *fn, void *arg);
    /* (Re)arms it to fire once after us microseconds (>= 0; rounding up
     * to the loop's resolution is fine, firing early is not). */
    void (*timer_start)(void *ctx, void *timer, int64_t us);
    /* Makes it fire in the loop's current pass, with no wait, after the
     * callbacks already due in it (libevent: event_active; nginx: a posted
     * event): the checks asked for during one pass leave together. Called
     * at most once per pass for a timer not already due. */
    void (*timer_fire_soon)(void *ctx, void *timer);
    /* Disarms it (a no-op when not armed). */
    void (*timer_stop)(void *ctx, void *timer);
    /* Disarms and frees it. */
    void (*timer_free)(void *ctx, void *timer);
    /* The loop's clock in microseconds, CLOCK_MONOTONIC's (a value cached
     * for the pass, as nginx's ngx_current_msec, is fine): the deadlines
     * the timers serve are counted on it. NULL: clock_gettime. */
    int64_t (*now_us)(void *ctx);
} porteiro_loop_ops;

/* Runs the handle's Redis traffic on the caller's loop. Must be called
 * before porteiro_check_async, on the loop's thread; ops and ctx must
 * outlive the handle (porteiro_free gives back every io and timer, then
 * never calls ops again). Calling it again with the same ops and ctx is a
 * no-op; with another loop, PORTEIRO_ERR_INVALID. The memory backend needs
 * no loop: PORTEIRO_OK, and nothing is called. Every *_async call and
 * porteiro_free of an attached handle must then be made on the loop's
 * thread. No write of porteiro raises SIGPIPE (it sends with
 * MSG_NOSIGNAL), so a program need not ignore it for porteiro's sake. */
PORTEIRO_API porteiro_status porteiro_attach_loop(porteiro_t *p, const porteiro_loop_ops *ops,
                                                  void *ctx);

/* Called once per async check, on the loop thread. decision is NULL unless
 * status is PORTEIRO_OK; it is valid only during the callback. */
typedef void porteiro_decision_fn(porteiro_t *p, porteiro_status status,
                                  const porteiro_decision *decision, void *privdata);

/* Queues a check. If this returns an error the callback is never called;
 * if it returns PORTEIRO_OK the callback is called exactly once (possibly
 * before this returns: with the memory backend, on a fallback, or for a
 * denial the deny cache answers). Checks asked for during one pass of the
 * loop leave together when it ends, as batches of up to batch_max. */
PORTEIRO_API porteiro_status porteiro_check_async(porteiro_t *p, const porteiro_request *req,
                                                  porteiro_decision_fn *cb, void *privdata);

/* porteiro_refund on the loop (e.g. a reservation given back): the same
 * callback contract as porteiro_check_async. */
PORTEIRO_API porteiro_status porteiro_refund_async(porteiro_t *p, const porteiro_request *req,
                                                   porteiro_decision_fn *cb, void *privdata);

struct porteiro_policy;

/* ---- Settling: the real cost, known after the response (issue 38) ---- */

/* A request whose cost is known only when it ends (the tokens of a
 * language model's answer) is checked against an estimate E, as any check
 * of cost E (all-or-nothing over the limits); when it ends, it SETTLES
 * with the units it really used, U, in one Redis call (one script, or the
 * module's porteiro.settle): delta = U - E is applied at that moment in
 * every limit.
 *   U < E: the difference is given back as by porteiro_refund (never
 *          above capacity; nothing where the state no longer holds it: a
 *          bucket that refilled meanwhile). A window gives back only into
 *          the window the check counted in (known from age_ms): a fixed
 *          window that is over takes nothing back.
 *   U > E: the difference is charged whatever remains, never denied (the
 *          units were spent). Past empty it is DEBT: token_bucket's tokens
 *          and gcra's TAT go past their bound (their time moves forward),
 *          fixed_window and sliding_window count past L in the current
 *          window; the next checks wait or are denied until it is repaid
 *          (a fixed window's debt ends with its window). A limit's debt
 *          saturates at 2^51 scaled units (always at least L units past
 *          empty): a charge beyond is dropped.
 *   U = E: nothing changes (the call still reports the state).
 * A settle that never comes leaves the estimate charged: nothing leaks.
 * Over-admission is at most the unestimated part (U - E > 0) of the
 * requests in flight; docs/algorithms.md, "Settling", per algorithm.
 *
 * Stateless: the caller passes what it checked, and nothing is kept
 * between the check and the settle. Settle a check once, and only one
 * that was allowed (a denied check took nothing; a shadow-denied one
 * neither: settle it with estimate 0). */
typedef struct porteiro_usage {
    int64_t estimate; /* E: the cost the check was allowed with, 0..10^9 */
    int64_t used;     /* U: the units it really used, 0..10^9 */
    int64_t age_ms;   /* ms from the check's decision to this call, by the
                         caller's monotonic clock, 0..732 days; -1:
                         unknown (a window then gives back into its
                         current window, as porteiro_refund does) */
    /* A multi-key check's settle (porteiro_request.multi) only: each item
     * settles on its own, its cost (items[i].cost) being what it really
     * used and estimates[i] what it was checked with; estimate and used
     * above are then 0. estimates NULL (nestimates 0): all 0, a pure
     * charge (Envoy's apply_on_stream_done, whose check took nothing);
     * else nestimates is the number of items. NULL and 0 for any other
     * settle. */
    const int64_t *estimates;
    size_t nestimates;
} porteiro_usage;

/* Settles the check req made: its limits, key and now_ms (PORTEIRO_NOW,
 * or the injected clock of the settle's moment); req->cost and
 * max_wait_ms are not read: the estimate is usage->estimate, and a
 * reservation's units were taken as any others. A policy's check
 * (req->policy) settles the limits that checked (a tier's or an
 * override's: see porteiro_choice), under the policy's counters and
 * on_error override. A multi-key check (req->multi) settles each item on
 * its own: req->multi is the check's request with items[i].cost set to
 * what item i really used, usage->estimates[i] what it was checked with
 * (a shadow item settles like the others; one script call, which the
 * module does not take; decision->limits[i] is item i's state after it).
 * Pointers are borrowed for the call only.
 *
 * Errors, with nothing changed anywhere and no Redis call: usage values
 * out of range (used < 0 or > PORTEIRO_MAX_AMOUNT, ...), estimates given
 * to a settle that is not multi-key (or estimate / used to one that is,
 * or nestimates not the number of items), or a request a check would
 * refuse: PORTEIRO_ERR_INVALID / _KEY; a sliding_log limit:
 * PORTEIRO_ERR_UNSUPPORTED (its state is one entry per unit, L <= 1000:
 * a debt would be O(debt) entries; porteiro_refund still gives its units
 * back), as is a concurrency limit.
 *
 * The decision describes the state after the settle, as a peek (allowed
 * is true): remaining, reset_ms (which includes the debt's repayment),
 * decision->debt and debt_added.
 *
 * Redis failing: on_error applies as to a check. open / closed: the settle
 * is not applied (decision->fallback OPEN / CLOSED, debt 0), so the
 * estimate stands in Redis; local: the local fallback's state is settled
 * instead; error: the failure status. A settle that timed out may or may
 * not have been applied: retrying it may apply it twice. */
PORTEIRO_API porteiro_status porteiro_settle(porteiro_t *p, const porteiro_request *req,
                                             const porteiro_usage *usage,
                                             porteiro_decision *decision);
/* porteiro_settle on the loop: the callback contract of
 * porteiro_check_async (the memory backend answers before it returns). */
PORTEIRO_API porteiro_status porteiro_settle_async(porteiro_t *p, const porteiro_request *req,
                                                   const porteiro_usage *usage,
                                                   porteiro_decision_fn *cb, void *privdata);
/* The top keys by units USED (the tokens view, docs/top.md): the outcome
 * of porteiro_top_get that counts, per name, the units U each settle
 * reported (a policy's settles under the policy's name, the items of a
 * multi-key settle with a top_name), at the settle's moment, with
 * the same windows and bounds as allowed and denied. A check that never
 * settles is not in it (its estimate is in allowed). Memory: 18 x k x
 * about 150 bytes per name, taken at the name's first settle. */
#define PORTEIRO_TOP_USED ((porteiro_top_outcome)2)

/* ---- HTTP: the RateLimit header fields ------------------------------- */

/* The IETF RateLimit-Policy / RateLimit fields and Retry-After of one
 * decision (draft-ietf-httpapi-ratelimit-headers), as porteirod and the
 * nginx module send them:
 *   RateLimit-Policy: "api";q=100;w=60   (quota L per window P, seconds)
 *   RateLimit: "api";r=42;t=17           (remaining, seconds to reset)
 *   Retry-After: 3                       (denials only, rounded up)
 * A policy of several limits lists each in RateLimit-Policy as "api.0",
 * "api.1"...; RateLimit names the one that limits now (the denying one, or
 * the one with the least remaining). name is the policy's; limits are the
 * decision's (nlimits beyond d->nlimits are ignored). Always
 * NUL-terminated; a field too long for its buffer is cut. */
typedef struct porteiro_http_fields {
    char policy[1280];    /* RateLimit-Policy's value */
    char ratelimit[384];  /* RateLimit's value */
    char retry_after[24]; /* Retry-After's value; "" when none is sent */
} porteiro_http_fields;

PORTEIRO_API void porteiro_http_fields_format(const char *name, const porteiro_limit *limits,
                                              size_t nlimits, const porteiro_decision *d,
                                              porteiro_http_fields *out);

/* ---- Parsing: durations, limits, Redis URLs ------------------------- */

/* "250ms", "1s", "60s", "1m", "1h", "1d": a positive integer and a unit
 * (ms, s, m, h, d). Anything else, overflow, or a period over
 * PORTEIRO_MAX_PERIOD_MS is PORTEIRO_ERR_INVALID. */
PORTEIRO_API porteiro_status porteiro_parse_duration(const char *text, int64_t *ms);

/* The compact limit form "ALGORITHM L/DURATION [burst B]", e.g.
 * "token_bucket 5/1s burst 10", "fixed_window 1000/1h". The result is
 * validated (porteiro_limit_validate). errbuf gets a message on error. */
PORTEIRO_API porteiro_status porteiro_parse_limit(const char *text, porteiro_limit *out,
                                                  char *errbuf, size_t errlen);

/* Checks a Redis URL as porteiro_options.redis_url is read (redis://,
 * rediss://, sentinel:// and the cluster forms: docs/config.md), without
 * connecting: PORTEIRO_OK, or PORTEIRO_ERR_INVALID with the reason in
 * errbuf (which never echoes a password). */
PORTEIRO_API porteiro_status porteiro_parse_redis_url(const char *url, char *errbuf, size_t errlen);

/* A comma-separated list of compact limits, at most max of them. */
PORTEIRO_API porteiro_status porteiro_parse_limits(const char *text, porteiro_limit *out,
                                                   size_t max, size_t *n, char *errbuf,
                                                   size_t errlen);

/* ---- Policies ------------------------------------------------------- */

/* A named policy: limits checked together, all-or-nothing (the config
 * file's policies: porteiro_config.h; or built by the caller).
 *
 * A policy's counters are its own: its checks, settles, refunds and resets
 * name the policy in every Redis key (as a multi-key item's tag: the layout
 * in docs/cluster.md, "Keys"), so two policies never share a client's
 * counter, whatever their limits and wherever their keys come from (a
 * header's value equal to an address spends nothing of that address's
 * quota under another policy). The same key is on the same Redis Cluster
 * slot under every policy. A policy without a name (NULL or "") has the
 * keys of a plain check of its limits. */
typedef struct porteiro_policy {
    const char *name;
    porteiro_limit limits[PORTEIRO_MAX_LIMITS];
    size_t nlimits;
    bool shadow;       /* computed and reported, always allowed */
    bool has_on_error; /* on_error overrides the limiter's */
    porteiro_on_error on_error;
    /* Quota leases for this policy's checks (config `lease: { max_ms: 200,
     * max_units: 1000 }`); zero: off. See porteiro_quota_lease. */
    porteiro_quota_lease lease;
    /* One limit across regions (config `global: { home: URL, ... }`,
     * docs/regions.md): the global count lives in the home Redis, blocks
     * of it in the handle's (regional) Redis, leases of those in memory.
     * global_home NULL: off. block_max 1..10^9 (0: 100000), block_ms
     * 10..3600000 (0: 5000), timeout_ms of a home call 1..60000 (0: 1000). */
    const char *global_home;
    int64_t global_block_max;
    int64_t global_block_ms;
    int64_t global_timeout_ms;
    const void *reserved[4]; /* zero: room for later fields, as in
                                porteiro_request */
} porteiro_policy;

/* ---- Names ---------------------------------------------------------- */

/* "fixed_window", "token_bucket", "gcra", "sliding_window", "sliding_log",
 * "concurrency"; NULL for an unknown value. */
PORTEIRO_API const char *porteiro_algorithm_name(porteiro_algorithm a);
/* Parses such a name; returns 0 if unknown. */
PORTEIRO_API porteiro_algorithm porteiro_algorithm_parse(const char *name);

/* ---- A keyed hash for tables a client's bytes index ---------------- */

/* SipHash-2-4 (Aumasson and Bernstein) of len bytes under the process's
 * own random key: 16 bytes from getrandom() drawn once, at the first use,
 * the key the library's own tables use. A client that does not know it
 * cannot pick values that share a bucket (long chains) or a 64-bit hash;
 * two processes hash differently, so never store or send the result.
 * data may be NULL when len is 0. Thread-safe. */
PORTEIRO_API uint64_t porteiro_keyed_hash(const void *data, size_t len);

/* ---- Tiers and per-client overrides (docs/config.md, "Tiers and overrides") */

/* A policy may give its clients different limits: by tier (a request
 * attribute such as a header the gateway sets, `tier: header X-Plan`, with
 * `tiers:` and `default_tier:`), and per client key (`overrides:` in the
 * file, or overrides stored in Redis and changed at run time with
 * porteiro_override_set). Every set of limits of a policy keeps its state
 * under the same keys (client, algorithm, period: never L or B), so a client
 * moved to another tier or given an override keeps what it used. */
#define PORTEIRO_MAX_TIERS 32
#define PORTEIRO_MAX_TIER_NAME 64

/* What decided a client's limits. */
typedef enum porteiro_chosen_by {
    PORTEIRO_CHOSEN_POLICY = 0,          /* the policy's limits (no tiers) */
    PORTEIRO_CHOSEN_TIER = 1,            /* a tier (named in tier) */
    PORTEIRO_CHOSEN_CONFIG_OVERRIDE = 2, /* the file's overrides: for this key */
    PORTEIRO_CHOSEN_REDIS_OVERRIDE = 3   /* an override stored in Redis */
} porteiro_chosen_by;

typedef struct porteiro_choice {
    porteiro_policy policy; /* a copy of the policy with the limits that apply
                               (its strings point into the config) */
    porteiro_chosen_by by;
    const char *tier; /* the tier that decided (also under an override:
                         the one the client would have), or NULL when
                         the policy has no tiers. Valid as the config */
} porteiro_choice;

/* Overrides stored in Redis: a hash PREFIX:overrides:{POLICY} (field: client
 * key, value: compact limits such as "gcra 100/1s burst 200, fixed_window
 * 10000/1d") and a counter PREFIX:overrides:version raised by every change.
 * Blocking calls, for tools (the CLI); each Redis exchange has the command
 * budget. The memory backend answers PORTEIRO_ERR_UNSUPPORTED (its
 * overrides come from the config file only). Bad limits text is
 * PORTEIRO_ERR_INVALID with the message in porteiro_errmsg(). */
PORTEIRO_API porteiro_status porteiro_override_set(porteiro_t *p, const char *policy,
                                                   const void *key, size_t key_len,
                                                   const char *limits);
/* *found false (and out "") when key has no override. out gets the limits
 * text, NUL-terminated, cut to outlen. */
PORTEIRO_API porteiro_status porteiro_override_get(porteiro_t *p, const char *policy,
                                                   const void *key, size_t key_len, char *out,
                                                   size_t outlen, bool *found);
PORTEIRO_API porteiro_status porteiro_override_del(porteiro_t *p, const char *policy,
                                                   const void *key, size_t key_len, bool *deleted);
/* Calls cb once per override of policy (any order). */
typedef void porteiro_override_fn(const void *key, size_t key_len, const char *limits,
                                  void *privdata);
PORTEIRO_API porteiro_status porteiro_override_list(porteiro_t *p, const char *policy,
                                                    porteiro_override_fn *cb, void *privdata);

/* A local copy of the overrides stored in Redis, for servers: a thread of
 * its own reads PREFIX:overrides:version every refresh_ms (0: 500) and,
 * when it changed, reloads the hashes of the named policies; lookups never
 * touch Redis, so a client without an override costs no Redis call. A
 * change is seen within refresh_ms plus one round trip. While Redis does
 * not answer, the last copy stays in use. opts: the Redis to read (its
 * prefix, URL, timeouts); the memory backend gives NULL. Thread-safe. */
typedef struct porteiro_overrides porteiro_overrides;
PORTEIRO_API porteiro_overrides *porteiro_overrides_start(const porteiro_options *opts,
                                                          const char *const *policies,
                                                          size_t npolicies, int refresh_ms,
                                                          porteiro_status *err, char *errbuf,
                                                          size_t errlen);
PORTEIRO_API void porteiro_overrides_stop(porteiro_overrides *ov);
/* When key has an override for choice->policy.name, puts its limits into
 * choice->policy and sets choice->by to PORTEIRO_CHOSEN_REDIS_OVERRIDE;
 * returns whether it did. ov NULL: false. */
PORTEIRO_API bool porteiro_overrides_apply(porteiro_overrides *ov, porteiro_choice *choice,
                                           const void *key, size_t key_len);
/* Reloads done since start (tests, metrics), and the version last seen. */
PORTEIRO_API uint64_t porteiro_overrides_reloads(porteiro_overrides *ov, int64_t *version);

/* ---- Top keys: who is being limited (docs/top.md) ------------------- */

/* A handle made with porteiro_options.top_keys = k counts every decision of
 * a policy's check (under the policy's name) and every item of
 * a multi-key check with a top_name, by allowed and by denied units,
 * in k Space-Saving counters per name, outcome and interval: fixed memory
 * (about 2 x 18 x k x 150 bytes per name), O(log k) per decision, no
 * allocation but at a name's first decision. At most PORTEIRO_TOP_MAX_NAMES
 * names per handle (later ones are not counted). Keys are kept up to
 * PORTEIRO_TOP_KEY_MAX bytes; a longer key is kept as its first 44 bytes,
 * "~" and 16 hex digits of a 64-bit hash of the whole key. Windows:
 * PORTEIRO_TOP_1M is the current 10 s interval and the 6 before it (the
 * last 60 to 70 s), PORTEIRO_TOP_10M the current minute and the 10 before
 * it (the last 10 to 11 min), intervals aligned to the wall clock (or to
 * the injected now_ms of the checks). Refunds and peeks (cost 0) are not
 * counted; a shadow denial counts as denied. */
#define PORTEIRO_TOP_KEY_MAX 64
#define PORTEIRO_TOP_NAME_MAX 127
#define PORTEIRO_TOP_MAX_NAMES 64

typedef enum porteiro_top_outcome {
    PORTEIRO_TOP_ALLOWED = 0,
    PORTEIRO_TOP_DENIED = 1
} porteiro_top_outcome;

typedef enum porteiro_top_window { PORTEIRO_TOP_1M = 0, PORTEIRO_TOP_10M = 1 } porteiro_top_window;

/* One key: its true units in the window are in [count - error, count]. */
typedef struct porteiro_top_key {
    char key[PORTEIRO_TOP_KEY_MAX]; /* binary-safe, key_len bytes, no NUL */
    size_t key_len;
    int64_t count;
    int64_t error;
} porteiro_top_key;

/* The top keys of name merged across handles (e.g. one per worker
 * thread), sorted by count, descending: at most max into keys, their
 * number in *nkeys; *total gets the units of that outcome in the window
 * (error bound: every error <= ceil(total / k)). now_ms: PORTEIRO_NOW (the
 * wall clock) or the clock the checks were given. A name never seen gives
 * 0 keys and total 0. Handles without top keys add nothing. Safe while
 * the handles decide on other threads. PORTEIRO_ERR_NOMEM when the merge
 * could not allocate. */
PORTEIRO_API porteiro_status porteiro_top_get(porteiro_t *const *handles, size_t nhandles,
                                              const char *name, porteiro_top_outcome outcome,
                                              porteiro_top_window window, int64_t now_ms,
                                              porteiro_top_key *keys, size_t max, size_t *nkeys,
                                              int64_t *total);
/* The names the handles count (each once, first seen first), at most max;
 * returns how many were written. */
PORTEIRO_API size_t porteiro_top_names(porteiro_t *const *handles, size_t nhandles,
                                       char (*names)[PORTEIRO_TOP_NAME_MAX + 1], size_t max);
/* k of the handle's top keys; 0: off. */
PORTEIRO_API size_t porteiro_top_k(const porteiro_t *p);

#ifdef __cplusplus
}
#endif
#endif /* PORTEIRO_H */
