/* test_regions.c — one limit across regions (issue 39, docs/regions.md).
 *
 * A home redis-server and three regional ones on this machine; each region
 * reaches home through a delay_proxy (the long link: PT_REGIONS_DELAY_MS
 * each way for region 0, three times that for regions 1 and 2). Each
 * region's instances are library handles on its regional Redis (threads of
 * this process, blocking checks; porteirod decides a global policy through
 * the same blocking path), with a skewed load: region 0 two busy instances,
 * region 1 one paced, region 2 one paced slower. Counted: every instance's
 * allowed checks, and home's own count (a peek on home). Never above L.
 *
 * The default suite runs the short cases; PT_REGIONS_FULL=1 (ctest label
 * full: test_regions_full) the long ones: every algorithm, a longer
 * partition, home killed and restarted. PT_REGIONS_MEASURE=1 prints the
 * numbers of docs/regions.md, "Measured". */
#define _GNU_SOURCE
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>

#include <cmocka.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdatomic.h>
#include <time.h>
#include <unistd.h>

#include <event2/event.h>

#include "delay_proxy.h"
#include "test_util.h"
#include "porteiro_config.h"
#include "porteiro_libevent.h"

/* A policy's check for key (porteiro_request.policy). */
static porteiro_status policy_check(porteiro_t *p, const porteiro_policy *pol, const void *key,
                                    size_t key_len, int64_t cost, int64_t now,
                                    porteiro_decision *d) {
    porteiro_request req = {
        .policy = pol, .key = key, .key_len = key_len, .cost = cost, .now_ms = now};
    return porteiro_check_request(p, &req, d);
}

#define REGIONS 3
#define WORKERS 4

typedef struct world {
    test_redis home, reg[REGIONS];
    delay_proxy *link[REGIONS];
    char home_url[REGIONS][96]; /* home, through region i's link */
    char reg_url[REGIONS][512]; /* region i's Redis as its instances name it */
    int delay_ms;
} world;

static int env_int(const char *name, int dflt) {
    const char *v = getenv(name);
    return v != NULL && *v != '\0' ? atoi(v) : dflt;
}

static void world_start(world *w) {
    memset(w, 0, sizeof(*w));
    w->delay_ms = env_int("PT_REGIONS_DELAY_MS", 25);
    /* Home keeps its counts across a kill -9 (docs/regions.md, "Home
     * failures"). */
    assert_int_equal(test_redis_start(&w->home, "--appendonly yes --appendfsync always"), 0);
    for (int i = 0; i < REGIONS; i++) {
        assert_int_equal(test_redis_start(&w->reg[i], NULL), 0);
        w->link[i] = delay_proxy_start(w->home.port, i == 0 ? w->delay_ms : 3 * w->delay_ms, 0);
        assert_non_null(w->link[i]);
        snprintf(w->home_url[i], sizeof(w->home_url[i]), "redis://127.0.0.1:%d",
                 delay_proxy_port(w->link[i]));
        snprintf(w->reg_url[i], sizeof(w->reg_url[i]), "%s", w->reg[i].url);
    }
}

/* The default suite shares one world (group setup): its tests use keys of
 * their own. The full suite starts one per test (it kills servers). */
static world *shared_world;

static world *get_world(world *local) {
    if (shared_world != NULL)
        return shared_world;
    world_start(local);
    return local;
}

static void world_stop(world *w);
static void put_world(world *w) {
    if (w != shared_world)
        world_stop(w);
}

static int group_setup(void **state) {
    (void)state;
    static world w;
    world_start(&w);
    shared_world = &w;
    return 0;
}

static int group_teardown(void **state) {
    (void)state;
    world *w = shared_world;
    shared_world = NULL;
    world_stop(w);
    return 0;
}

static void world_stop(world *w) {
    for (int i = 0; i < REGIONS; i++) {
        delay_proxy_stop(w->link[i]);
        test_redis_stop(&w->reg[i]);
    }
    test_redis_stop(&w->home);
}

static porteiro_t *open_handle(const char *url, porteiro_on_error mode) {
    porteiro_options o;
    porteiro_options_init(&o);
    o.redis_url = url;
    o.prefix = "rg";
    o.on_error = mode;
    o.breaker_failures = -1;
    o.connect_timeout_ms = 2000;
    o.command_timeout_ms = 2000;
    char err[256] = "";
    porteiro_status st = PORTEIRO_OK;
    porteiro_t *p = porteiro_new(&o, &st, err, sizeof(err));
    if (p == NULL)
        print_error("porteiro_new(%s): %s\n", url, err);
    assert_non_null(p);
    return p;
}

/* The policy of region i: the global limit, home through its link. */
static void policy_of(world *w, int i, const char *limit, porteiro_on_error mode,
                      porteiro_policy *pol) {
    memset(pol, 0, sizeof(*pol));
    pol->name = "g";
    char err[256];
    assert_int_equal(porteiro_parse_limits(limit, pol->limits, PORTEIRO_MAX_LIMITS, &pol->nlimits,
                                           err, sizeof(err)),
                     PORTEIRO_OK);
    pol->has_on_error = true;
    pol->on_error = mode;
    pol->global_home = w->home_url[i];
    pol->global_block_ms = 2000;
    pol->global_timeout_ms = 1500;
}

typedef struct worker {
    porteiro_t *p;
    porteiro_policy pol;
    const char *key;
    int pace_us;
    atomic_bool *stop;
    atomic_llong allowed, denied, fallback_allowed, errors;
    pthread_t th;
} worker;

static void *work(void *arg) {
    worker *k = arg;
    while (!atomic_load(k->stop)) {
        porteiro_decision d;
        porteiro_status st =
            policy_check(k->p, &k->pol, k->key, strlen(k->key), 1, PORTEIRO_NOW, &d);
        if (st != PORTEIRO_OK)
            atomic_fetch_add(&k->errors, 1);
        else if (d.allowed && d.fallback != PORTEIRO_FALLBACK_NONE)
            atomic_fetch_add(&k->fallback_allowed, 1);
        else if (d.allowed)
            atomic_fetch_add(&k->allowed, 1);
        else
            atomic_fetch_add(&k->denied, 1);
        if (k->pace_us > 0)
            usleep((useconds_t)k->pace_us);
    }
    return NULL;
}

typedef struct fleet {
    worker w[WORKERS];
    int region[WORKERS];
    atomic_bool stop;
} fleet;

/* Region 0: two busy instances; region 1: one paced at 200 us; region 2:
 * one at 1 ms. */
static const int busy[WORKERS] = {0, 0, 200, 1000};
/* For the partitions: region 0 paced too, so that the limit outlasts the
 * cut and the healed region has something left to take. */
static const int steady_pace[WORKERS] = {100, 100, 200, 1000};

static void fleet_start_paced(fleet *f, world *w, const char *limit, const char *key,
                              porteiro_on_error mode, const int *pace) {
    static const int region[WORKERS] = {0, 0, 1, 2};
    memset(f, 0, sizeof(*f));
    atomic_store(&f->stop, false);
    for (int i = 0; i < WORKERS; i++) {
        worker *k = &f->w[i];
        f->region[i] = region[i];
        k->p = open_handle(w->reg_url[region[i]], mode);
        policy_of(w, region[i], limit, mode, &k->pol);
        k->key = key;
        k->pace_us = pace[i];
        k->stop = &f->stop;
        assert_int_equal(pthread_create(&k->th, NULL, work, k), 0);
    }
}

static void fleet_start(fleet *f, world *w, const char *limit, const char *key,
                        porteiro_on_error mode) {
    fleet_start_paced(f, w, limit, key, mode, busy);
}

static void fleet_join(fleet *f) {
    atomic_store(&f->stop, true);
    for (int i = 0; i < WORKERS; i++)
        pthread_join(f->w[i].th, NULL);
}

static void fleet_free(fleet *f) {
    for (int i = 0; i < WORKERS; i++)
        porteiro_free(f->w[i].p);
}

static long long fleet_allowed(fleet *f) {
    long long n = 0;
    for (int i = 0; i < WORKERS; i++)
        n += atomic_load(&f->w[i].allowed);
    return n;
}

static void fleet_print(fleet *f, const char *what) {
    for (int i = 0; i < WORKERS; i++) {
        porteiro_stats s;
        porteiro_stats_get(f->w[i].p, &s);
        printf("  %s: instance %d (region %d): allowed %lld denied %lld fallback-allowed %lld "
               "errors %lld | local %llu takes %llu home %llu (failed %llu) blocks %llu (%llu "
               "units) returned %llu held %llu\n",
               what, i, f->region[i], (long long)atomic_load(&f->w[i].allowed),
               (long long)atomic_load(&f->w[i].denied),
               (long long)atomic_load(&f->w[i].fallback_allowed),
               (long long)atomic_load(&f->w[i].errors), (unsigned long long)s.global_local,
               (unsigned long long)s.global_takes, (unsigned long long)s.global_home_calls,
               (unsigned long long)s.global_home_failures, (unsigned long long)s.global_blocks,
               (unsigned long long)s.global_block_units, (unsigned long long)s.global_returned,
               (unsigned long long)s.global_held);
    }
}

/* Home's count of key under limit: a peek on home itself (L − remaining). */
static long long home_count(world *w, const char *limit, const char *key) {
    porteiro_t *h = open_handle(w->home.url, PORTEIRO_ON_ERROR_ERROR);
    porteiro_limit l[PORTEIRO_MAX_LIMITS];
    size_t n;
    char err[256];
    assert_int_equal(porteiro_parse_limits(limit, l, PORTEIRO_MAX_LIMITS, &n, err, sizeof(err)),
                     PORTEIRO_OK);
    porteiro_decision d;
    /* a peek of the policy "g" (its keys carry its name) */
    porteiro_policy g = {.name = "g", .nlimits = n};
    memcpy(g.limits, l, n * sizeof(*l));
    assert_int_equal(policy_check(h, &g, key, strlen(key), 0, PORTEIRO_NOW, &d), PORTEIRO_OK);
    porteiro_free(h);
    return (long long)d.limit - (long long)d.remaining;
}

/* What each region's pool holds now, and how long until its deadline. */
static void print_pools(world *w) {
    for (int i = 0; i < REGIONS; i++) { /* what each pool holds now */
        char out[512] = "";
        test_redis_cmd(&w->reg[i], out, sizeof(out), "EVAL %s 0",
                       "local k = redis.call('KEYS', '*:g')[1] if not k then return 'none' "
                       "end local h = redis.call('HMGET', k, 'n', 'dl') local t = "
                       "redis.call('TIME') return 'n ' .. tostring(h[1]) .. ' dl-now ' .. "
                       "tostring(tonumber(h[2]) - (t[1] * 1000 + math.floor(t[2] / 1000)))");
        printf("  region %d pool: %s\n", i, out);
    }
}

/* Runs the fleet until the global limit is spent (no allowed check for
 * quiet_ms) or max_ms. */
static void run_until_spent(fleet *f, int max_ms, int quiet_ms) {
    long long last = -1;
    int64_t since = test_mono_ms(), end = test_mono_ms() + max_ms;
    while (test_mono_ms() < end) {
        test_sleep_ms(50);
        long long a = fleet_allowed(f);
        if (a != last) {
            last = a;
            since = test_mono_ms();
        } else if (test_mono_ms() - since >= quiet_ms) {
            break;
        }
    }
}

/* Exactness: the fleet's allowed and home's count never above L; home's
 * count at least what the fleet allowed (every unit came from home). */
static void exact(const char *limit, long long L, const char *key, int max_ms) {
    world w0, *w = get_world(&w0);
    fleet f;
    fleet_start(&f, w, limit, key, PORTEIRO_ON_ERROR_CLOSED);
    run_until_spent(&f, max_ms, 700);
    fleet_join(&f);
    long long allowed = fleet_allowed(&f), home = home_count(w, limit, key);
    printf("%s: allowed %lld of L %lld, home counted %lld, under-admission %lld (%.2f %%)\n", limit,
           allowed, L, home, L - allowed, 100.0 * (double)(L - allowed) / (double)L);
    fleet_print(&f, limit);
    print_pools(w);
    assert_true(allowed <= L);
    assert_true(home <= L);
    assert_true(allowed <= home);
    assert_true(allowed > 0);
    for (int i = 0; i < WORKERS; i++)
        TU_EQ(atomic_load(&f.w[i].errors) + atomic_load(&f.w[i].fallback_allowed), 0, "instance %d",
              i);
    fleet_free(&f);
    put_world(w);
}

static void fixed_window_exact(void **state) {
    (void)state;
    exact("fixed_window 12000/366d", 12000, "fw", 8000);
}

static void sliding_window_exact(void **state) {
    (void)state;
    exact("sliding_window 20000/366d", 20000, "sw", 8000);
}

static void token_bucket_exact(void **state) {
    (void)state;
    /* Refill 20 000 per 366 days: none within the test (the bound is
     * B + (D + block_ms) × L/P, below B + 1 here). */
    exact("token_bucket 20000/366d", 20000, "tb", 8000);
}

/* Window edges: a fixed window of 2 s, the fleet across two of its
 * edges. Every check allowed is put in its window by the wall clock read
 * before and after it (same window both: surely in it); per window, at
 * most L. A pool's units die with their window (their deadline). */
#define EDGE_P 2000
#define EDGE_WINDOWS 64

typedef struct edger {
    porteiro_t *p;
    porteiro_policy pol;
    int pace_us;
    atomic_bool *stop;
    long long in[EDGE_WINDOWS];
    long long ambiguous;
    pthread_t th;
} edger;

static int64_t wall_ms(void) {
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

static void *edge_work(void *arg) {
    edger *k = arg;
    while (!atomic_load(k->stop)) {
        int64_t before = wall_ms() / EDGE_P;
        porteiro_decision d;
        porteiro_status st = policy_check(k->p, &k->pol, "edge", 4, 1, PORTEIRO_NOW, &d);
        int64_t after = wall_ms() / EDGE_P;
        if (st == PORTEIRO_OK && d.allowed && d.fallback == PORTEIRO_FALLBACK_NONE) {
            if (before == after)
                k->in[before % EDGE_WINDOWS]++;
            else
                k->ambiguous++;
        }
        if (k->pace_us > 0)
            usleep((useconds_t)k->pace_us);
    }
    return NULL;
}

static void window_edges(void **state) {
    (void)state;
    const long long Lw = 3000;
    world w0, *w = get_world(&w0);
    static const int region[WORKERS] = {0, 0, 1, 2};
    static const int pace[WORKERS] = {0, 0, 200, 1000};
    edger k[WORKERS];
    atomic_bool stop;
    atomic_store(&stop, false);
    int64_t first = wall_ms() / EDGE_P;
    for (int i = 0; i < WORKERS; i++) {
        memset(&k[i], 0, sizeof(k[i]));
        k[i].p = open_handle(w->reg[region[i]].url, PORTEIRO_ON_ERROR_CLOSED);
        policy_of(w, region[i], "fixed_window 3000/2s", PORTEIRO_ON_ERROR_CLOSED, &k[i].pol);
        k[i].pace_us = pace[i];
        k[i].stop = &stop;
        assert_int_equal(pthread_create(&k[i].th, NULL, edge_work, &k[i]), 0);
    }
    test_sleep_ms(2 * EDGE_P + 300);
    atomic_store(&stop, true);
    int64_t last = wall_ms() / EDGE_P;
    long long amb = 0;
    for (int i = 0; i < WORKERS; i++) {
        pthread_join(k[i].th, NULL);
        amb += k[i].ambiguous;
    }
    for (int64_t win = first; win <= last; win++) {
        long long n = 0;
        for (int i = 0; i < WORKERS; i++)
            n += k[i].in[win % EDGE_WINDOWS];
        printf("window %lld: allowed %lld of L %lld\n", (long long)(win - first), n, Lw);
        assert_true(n <= Lw);
        /* A whole window under a demand far above L: near L (the units
         * parked at its end, and the checks across an edge, are the rest). */
        if (win > first && win < last)
            assert_true(n >= Lw * 9 / 10);
    }
    printf("  allowed across an edge (not counted): %lld\n", amb);
    for (int i = 0; i < WORKERS; i++)
        porteiro_free(k[i].p);
    put_world(w);
}

/* A region cut from home (its link holds every byte for 10 minutes) while
 * the load goes on, then healed: with on_error closed, never above L; the
 * cut region spends what its pool held, then denies. */
static void partition(const char *limit, long long L, int cut_ms, porteiro_on_error mode) {
    world w0, *w = get_world(&w0);
    fleet f;
    fleet_start_paced(&f, w, limit, "part", mode, steady_pace);
    test_sleep_ms(800); /* every region holds a pool */
    long long before = fleet_allowed(&f);
    delay_proxy_set(w->link[1], 600000, 0);
    long long r1_before = atomic_load(&f.w[2].allowed);
    test_sleep_ms(cut_ms);
    long long r1_cut = atomic_load(&f.w[2].allowed) - r1_before;
    long long r1_open = atomic_load(&f.w[2].fallback_allowed);
    delay_proxy_set(w->link[1], 3 * w->delay_ms, 0);
    long long r1_healed = atomic_load(&f.w[2].allowed);
    run_until_spent(&f, 30000, 1000);
    r1_healed = atomic_load(&f.w[2].allowed) - r1_healed;
    fleet_join(&f);
    long long allowed = fleet_allowed(&f), home = home_count(w, limit, "part");
    printf("partition %d ms (%s): allowed %lld of L %lld (before the cut %lld), home counted "
           "%lld; the cut region allowed %lld from its pool while cut, %lld by on_error open\n",
           cut_ms, mode == PORTEIRO_ON_ERROR_OPEN ? "open" : "closed", allowed, L, before, home,
           r1_cut, r1_open);
    printf("  after the heal the cut region allowed %lld more\n", r1_healed);
    print_pools(w);
    fleet_print(&f, "partition");
    assert_true(r1_healed > 0); /* it takes blocks from home again */
    assert_true(home <= L);
    assert_true(allowed <= home);
    if (mode != PORTEIRO_ON_ERROR_OPEN) {
        assert_true(allowed <= L);
        for (int i = 0; i < WORKERS; i++)
            TU_EQ(atomic_load(&f.w[i].fallback_allowed), 0, "instance %d", i);
    } else {
        assert_true(allowed + r1_open + atomic_load(&f.w[3].fallback_allowed) >= allowed);
    }
    fleet_free(&f);
    put_world(w);
}

static void partition_short(void **state) {
    (void)state;
    partition("fixed_window 20000/366d", 20000, 1500, PORTEIRO_ON_ERROR_CLOSED);
}

static void partition_long(void **state) {
    (void)state;
    partition("fixed_window 200000/366d", 200000, 8000, PORTEIRO_ON_ERROR_CLOSED);
    partition("fixed_window 120000/366d", 120000, 4000, PORTEIRO_ON_ERROR_OPEN);
}

/* Home killed (-9) under load and restarted from its AOF: never above L. */
static void home_restart(void **state) {
    (void)state;
    const char *limit = "fixed_window 40000/366d";
    world w0, *w = get_world(&w0);
    fleet f;
    fleet_start(&f, w, limit, "hr", PORTEIRO_ON_ERROR_CLOSED);
    test_sleep_ms(400);
    test_redis_kill9(&w->home);
    test_sleep_ms(1000);
    assert_int_equal(test_redis_restart(&w->home), 0);
    run_until_spent(&f, 15000, 2500);
    fleet_join(&f);
    long long allowed = fleet_allowed(&f), home = home_count(w, limit, "hr");
    printf("home restart: allowed %lld of L 40000, home counted %lld\n", allowed, home);
    fleet_print(&f, "restart");
    assert_true(allowed <= 40000);
    assert_true(home <= 40000);
    assert_true(allowed <= home);
    fleet_free(&f);
    put_world(w);
}

/* Region 0's Redis is a Sentinel-watched master and its replica; the
 * master is killed under load and the replica promoted. The pool is an
 * ordinary key of the regional Redis: a failover may lose its last writes
 * (takes and deposits the replica had not received), as it may a check's.
 * Counted: allowed and home's count, never above L here (the replica is in
 * sync on loopback; docs/regions.md states the bound). */
static void regional_failover(void **state) {
    (void)state;
    const char *limit = "fixed_window 60000/366d";
    world w0, *w = get_world(&w0);
    test_sentinels sen;
    assert_int_equal(test_sentinels_start(&sen, "rg0"), 0);
    snprintf(w->reg_url[0], sizeof(w->reg_url[0]), "%s", sen.url);
    fleet f;
    fleet_start_paced(&f, w, limit, "fo", PORTEIRO_ON_ERROR_CLOSED, steady_pace);
    test_sleep_ms(800);
    long long before = fleet_allowed(&f);
    test_redis_kill9(&sen.master);
    run_until_spent(&f, 40000, 3000);
    fleet_join(&f);
    long long allowed = fleet_allowed(&f), home = home_count(w, limit, "fo");
    printf("regional failover: allowed %lld of L 60000 (%lld before the kill), home counted "
           "%lld\n",
           allowed, before, home);
    fleet_print(&f, "failover");
    print_pools(w);
    assert_true(allowed <= 60000);
    assert_true(home <= 60000);
    assert_true(allowed <= home);
    fleet_free(&f);
    test_sentinels_stop(&sen);
    put_world(w);
}

/* A handle that closes drains the pool it refilled and gives its units
 * back to home: home's count falls back to what was allowed (plus what the
 * handle's own lease held), and the pool is empty. */
static void give_back_on_close(void **state) {
    (void)state;
    const char *limit = "fixed_window 100000/366d";
    world w0, *w = get_world(&w0);
    porteiro_t *p = open_handle(w->reg[0].url, PORTEIRO_ON_ERROR_CLOSED);
    porteiro_policy pol;
    policy_of(w, 0, limit, PORTEIRO_ON_ERROR_CLOSED, &pol);
    long long allowed = 0;
    for (int i = 0; i < 300; i++) {
        porteiro_decision d;
        assert_int_equal(policy_check(p, &pol, "gb", 2, 1, PORTEIRO_NOW, &d), PORTEIRO_OK);
        allowed += d.allowed;
    }
    TU_EQ(allowed, 300, "all pass");
    porteiro_stats s;
    porteiro_stats_get(p, &s);
    /* A policy without global: on the same handle, right after: regional
     * only (once, a call on the stack kept the last check's home). */
    porteiro_policy plain = pol;
    plain.global_home = NULL;
    for (int i = 0; i < 20; i++) {
        porteiro_decision d;
        assert_int_equal(policy_check(p, &plain, "gb", 2, 1, PORTEIRO_NOW, &d), PORTEIRO_OK);
    }
    porteiro_stats s2;
    porteiro_stats_get(p, &s2);
    TU_EQ(s2.global_takes + s2.global_local, s.global_takes + s.global_local,
          "a plain policy's checks took the global path");
    long long taken = home_count(w, limit, "gb");
    assert_true(s.global_blocks >= 1);
    assert_true(taken > 300);
    porteiro_free(p);
    long long after = home_count(w, limit, "gb");
    printf("give-back: allowed 300, home counted %lld before the close, %lld after\n", taken,
           after);
    /* Exactly what was allowed: the pool and the handle's own lease went
     * back, in the same window, to the master that counted them. */
    TU_EQ(after, 300, "home's count after the give-back (before: %lld)", taken);
    put_world(w);
}

/* A region whose demand falls gives back what its pool holds beyond two
 * blocks of its new demand (the share shrinks): home's count falls, never
 * below what was allowed. */
static void shrink_gives_back(void **state) {
    (void)state;
    const char *limit = "fixed_window 1000000/366d";
    world w0, *w = get_world(&w0);
    porteiro_t *p = open_handle(w->reg[0].url, PORTEIRO_ON_ERROR_CLOSED);
    porteiro_policy pol;
    policy_of(w, 0, limit, PORTEIRO_ON_ERROR_CLOSED, &pol);
    pol.global_block_ms = 300;
    long long allowed = 0;
    porteiro_decision d;
    for (int i = 0; i < 40000; i++) { /* busy: big blocks */
        assert_int_equal(policy_check(p, &pol, "sh", 2, 1, PORTEIRO_NOW, &d), PORTEIRO_OK);
        allowed += d.allowed;
    }
    long long hot = home_count(w, limit, "sh");
    for (int i = 0; i < 30; i++) { /* then quiet: a check every 50 ms */
        test_sleep_ms(50);
        assert_int_equal(policy_check(p, &pol, "sh", 2, 1, PORTEIRO_NOW, &d), PORTEIRO_OK);
        allowed += d.allowed;
    }
    porteiro_stats s;
    porteiro_stats_get(p, &s);
    long long quiet = home_count(w, limit, "sh");
    printf("shrink: allowed %lld; home counted %lld busy, %lld after the quiet second; returned "
           "%llu\n",
           allowed, hot, quiet, (unsigned long long)s.global_returned);
    TU_EQ(allowed, 40030, "all pass");
    assert_true(s.global_returned > 0);
    assert_true(quiet < hot);
    assert_true(quiet >= allowed);
    porteiro_free(p);
    put_world(w);
}

/* ---- the event loop (porteiro_check_async of a policy) ---- */

typedef struct atally {
    int calls, allowed, denied, errors, want;
    struct event_base *base;
} atally;

static void on_adecision(porteiro_t *p, porteiro_status st, const porteiro_decision *d, void *arg) {
    atally *t = arg;
    (void)p;
    t->calls++;
    if (st != PORTEIRO_OK)
        t->errors++;
    else if (d->allowed && d->fallback == PORTEIRO_FALLBACK_NONE)
        t->allowed++;
    else if (!d->allowed)
        t->denied++;
    else
        t->errors++; /* allowed by on_error: not here (closed) */
}

/* n checks of key at once on the loop (they wait on one take), then the
 * loop runs until every callback came. */
static void async_burst(porteiro_t *p, const porteiro_policy *pol, const char *key, int n,
                        atally *t) {
    t->want += n;
    for (int i = 0; i < n; i++)
        assert_int_equal(porteiro_check_async(p,
                                              &(porteiro_request){.policy = pol,
                                                                  .key = key,
                                                                  .key_len = strlen(key),
                                                                  .cost = 1,
                                                                  .now_ms = PORTEIRO_NOW},
                                              on_adecision, t),
                         PORTEIRO_OK);
    /* EVLOOP_ONCE: a callback that came before the loop ran (a lease's
     * answer) may have asked for a break already, which a dispatch would
     * take at once. */
    for (int64_t end = test_mono_ms() + 10000; t->calls < t->want && test_mono_ms() < end;)
        event_base_loop(t->base, EVLOOP_ONCE);
    assert_int_equal(t->calls, t->want);
}

/* The loop form in region 1 (150 ms to home): bursts of 64 checks at once
 * on a key of L = 5000, 5440 checks: never above L, home's count at least
 * what passed; then a key whose region goes quiet gives its share back. */
/* The burst part of the loop form: L, bursts of 64 until L + 440 checks. */
static void async_bursts(world *w, int region, porteiro_t *p, struct event_base *base, long long L,
                         const char *key) {
    char limit[64];
    snprintf(limit, sizeof(limit), "fixed_window %lld/366d", L);
    porteiro_policy pol;
    policy_of(w, region, limit, PORTEIRO_ON_ERROR_CLOSED, &pol);
    atally t = {.base = base};
    int bursts = (int)((L + 440) / 64);
    for (int i = 0; i < bursts; i++)
        async_burst(p, &pol, key, 64, &t);
    long long home = home_count(w, limit, key);
    porteiro_stats s;
    porteiro_stats_get(p, &s);
    printf("async: allowed %d denied %d errors %d of %d, L %lld, home counted %lld | local %llu "
           "takes %llu home %llu blocks %llu\n",
           t.allowed, t.denied, t.errors, t.want, L, home, (unsigned long long)s.global_local,
           (unsigned long long)s.global_takes, (unsigned long long)s.global_home_calls,
           (unsigned long long)s.global_blocks);
    assert_true(t.allowed <= L);
    assert_true(t.allowed >= L * 98 / 100);
    assert_true(home <= L);
    assert_true(t.allowed <= home);
    assert_int_equal(t.errors, 0);
    assert_true(s.global_local > 0);
    assert_true(s.global_blocks > 0);
}

/* The default suite's loop form: region 0 (50 ms to home), bursts on a key
 * of L = 1000. */
static void async_short(void **state) {
    (void)state;
    world w0, *w = get_world(&w0);
    porteiro_t *p = open_handle(w->reg[0].url, PORTEIRO_ON_ERROR_CLOSED);
    struct event_base *base = event_base_new();
    assert_non_null(base);
    assert_int_equal(porteiro_attach_libevent(p, base), PORTEIRO_OK);
    async_bursts(w, 0, p, base, 1000, "as");
    porteiro_free(p);
    event_base_free(base);
    put_world(w);
}

static void async_path(void **state) {
    (void)state;
    world w0, *w = get_world(&w0);
    porteiro_t *p = open_handle(w->reg[1].url, PORTEIRO_ON_ERROR_CLOSED);
    struct event_base *base = event_base_new();
    assert_non_null(base);
    assert_int_equal(porteiro_attach_libevent(p, base), PORTEIRO_OK);
    async_bursts(w, 1, p, base, 5000, "as");
    porteiro_policy pol;
    porteiro_stats s;
    /* The shrink, on the loop. */
    const char *big = "fixed_window 1000000/366d";
    policy_of(w, 1, big, PORTEIRO_ON_ERROR_CLOSED, &pol);
    pol.global_block_ms = 300;
    atally u = {.base = base};
    for (int i = 0; i < 300; i++)
        async_burst(p, &pol, "ash", 64, &u);
    long long hot = home_count(w, big, "ash");
    for (int i = 0; i < 30; i++) {
        struct timeval tv = {0, 50000};
        event_base_loopexit(base, &tv);
        event_base_dispatch(base);
        async_burst(p, &pol, "ash", 1, &u);
    }
    /* The give-back's answer comes on the loop. */
    for (int i = 0; i < 10; i++) {
        struct timeval tv = {0, 50000};
        event_base_loopexit(base, &tv);
        event_base_dispatch(base);
    }
    porteiro_stats_get(p, &s);
    long long quiet = home_count(w, big, "ash");
    printf("async shrink: allowed %d of %d; home counted %lld busy, %lld quiet; returned %llu\n",
           u.allowed, u.want, hot, quiet, (unsigned long long)s.global_returned);
    assert_int_equal(u.allowed, u.want);
    assert_true(s.global_returned > 0);
    assert_true(quiet < hot);
    assert_true(quiet >= u.allowed);
    porteiro_free(p);
    event_base_free(base);
    put_world(w);
}

/* The configuration: global: in a policy, its ranges, and refusals. */
static void config_global(void **state) {
    (void)state;
    char path[] = "/tmp/pt_regions_XXXXXX.yaml";
    int fd = mkstemps(path, 5);
    assert_true(fd >= 0);
    const char *yaml = "redis: { url: redis://127.0.0.1:1 }\n"
                       "policies:\n"
                       "  day:\n"
                       "    limits: [fixed_window 10000/1d]\n"
                       "    global: { home: \"redis://10.0.0.1:6379\", block_max: 5000, "
                       "block_ms: 3000, timeout_ms: 800 }\n"
                       "  plain:\n"
                       "    limits: [fixed_window 10/1s]\n";
    assert_true(write(fd, yaml, strlen(yaml)) == (ssize_t)strlen(yaml));
    close(fd);
    char err[512] = "";
    porteiro_config *cfg = porteiro_config_load(path, err, sizeof(err));
    if (cfg == NULL)
        print_error("%s\n", err);
    assert_non_null(cfg);
    const porteiro_policy *d = porteiro_config_policy(cfg, "day");
    assert_non_null(d);
    assert_string_equal(d->global_home, "redis://10.0.0.1:6379");
    TU_EQ(d->global_block_max, 5000, "block_max");
    TU_EQ(d->global_block_ms, 3000, "block_ms");
    TU_EQ(d->global_timeout_ms, 800, "timeout_ms");
    assert_null(porteiro_config_policy(cfg, "plain")->global_home);
    porteiro_config_free(cfg);
    const char *bad[] = {
        "policies: { a: { limits: [fixed_window 1/1s], global: { block_max: 5 } } }\n",
        "policies: { a: { limits: [fixed_window 1/1s], global: { home: \"http://x\" } } }\n",
        "policies: { a: { limits: [fixed_window 1/1s], global: { home: \"redis://h\", "
        "block_ms: 1 } } }\n",
        "policies: { a: { limits: [fixed_window 1/1s], global: { home: \"redis://h\", "
        "nope: 1 } } }\n",
    };
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        fd = open(path, O_WRONLY | O_TRUNC);
        assert_true(write(fd, bad[i], strlen(bad[i])) == (ssize_t)strlen(bad[i]));
        close(fd);
        cfg = porteiro_config_load(path, err, sizeof(err));
        if (cfg != NULL)
            print_error("accepted: %s", bad[i]);
        assert_null(cfg);
        printf("  refused: %s", err);
        printf("\n");
    }
    unlink(path);
}

/* ---- the numbers of docs/regions.md, "Measured" (PT_REGIONS_MEASURE=1) ---- */

static double checks_per_s(porteiro_t *p, const porteiro_policy *pol, const char *key, int ms,
                           long long *n_out) {
    long long n = 0;
    int64_t start = test_mono_ms(), end = start + ms;
    while (test_mono_ms() < end) {
        for (int i = 0; i < 1000; i++) {
            porteiro_decision d;
            assert_int_equal(policy_check(p, pol, key, strlen(key), 1, PORTEIRO_NOW, &d),
                             PORTEIRO_OK);
            n++;
        }
    }
    *n_out = n;
    return (double)n * 1000.0 / (double)(test_mono_ms() - start);
}

/* A paced worker: rate checks per second, on time (not sleeps added). */
typedef struct paced {
    porteiro_t *p;
    porteiro_policy pol;
    double rate;
    int64_t until_ms;
    long long allowed, denied, other;
    pthread_t th;
} paced;

static void *pace(void *arg) {
    paced *k = arg;
    int64_t start = test_mono_ms();
    long long n = 0;
    while (test_mono_ms() < k->until_ms) {
        int64_t due = start + (int64_t)((double)n * 1000.0 / k->rate);
        int64_t now = test_mono_ms();
        if (due > now) {
            test_sleep_ms((int)(due - now));
            continue;
        }
        porteiro_decision d;
        porteiro_status st = policy_check(k->p, &k->pol, "steady", 6, 1, PORTEIRO_NOW, &d);
        if (st != PORTEIRO_OK || d.fallback != PORTEIRO_FALLBACK_NONE)
            k->other++;
        else if (d.allowed)
            k->allowed++;
        else
            k->denied++;
        n++;
    }
    return NULL;
}

/* Under-admission at steady load over one window of P = 20 s standing for
 * a day (scale 1:4320: rates and L as a day's, 4320 times faster), the
 * regions' demand 60/30/10 % at `demand` × L over the window. */
static void steady(world *w, long long Lw, double demand) {
    const int64_t P = 20000;
    char limit[64];
    snprintf(limit, sizeof(limit), "fixed_window %lld/20s", Lw);
    /* Start 200 ms into a window (windows are multiples of P since the
     * epoch: Redis's clock, this machine's). */
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    int64_t now = (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
    int64_t wait = P - now % P + 200;
    test_sleep_ms((int)wait);
    static const int region[4] = {0, 0, 1, 2};
    static const double share[4] = {0.3, 0.3, 0.3, 0.1};
    paced k[4];
    int64_t until = test_mono_ms() + P - 600;
    for (int i = 0; i < 4; i++) {
        memset(&k[i], 0, sizeof(k[i]));
        k[i].p = open_handle(w->reg[region[i]].url, PORTEIRO_ON_ERROR_CLOSED);
        policy_of(w, region[i], limit, PORTEIRO_ON_ERROR_CLOSED, &k[i].pol);
        k[i].rate = demand * (double)Lw * share[i] / ((double)P / 1000.0);
        k[i].until_ms = until;
        assert_int_equal(pthread_create(&k[i].th, NULL, pace, &k[i]), 0);
    }
    long long allowed = 0, denied = 0, other = 0, home = 0;
    for (int i = 0; i < 4; i++) {
        pthread_join(k[i].th, NULL);
        allowed += k[i].allowed;
        denied += k[i].denied;
        other += k[i].other;
    }
    home = home_count(w, limit, "steady");
    long long wanted = allowed + denied;
    long long ideal = wanted < Lw ? wanted : Lw;
    printf("steady %.1f x L: L %lld per 20 s window, checks %lld, allowed %lld, denied %lld, "
           "other %lld, home counted %lld; under-admission %lld = %.2f %% of L\n",
           demand, Lw, wanted, allowed, denied, other, home, ideal - allowed,
           100.0 * (double)(ideal - allowed) / (double)Lw);
    assert_true(allowed <= Lw);
    for (int i = 0; i < 4; i++)
        porteiro_free(k[i].p);
}

static void measure(void **state) {
    (void)state;
    if (env_int("PT_REGIONS_MEASURE", 0) == 0) {
        skip();
        return;
    }
    world w0, *w = get_world(&w0);
    /* 1. A hot key in region 1 (the 3×delay link): home round trips per
     * 10 000 decisions, and decisions/s with the global limit against the
     * same limit regional-only: with a quota lease of the same size, and
     * without. One thread, blocking checks, 2 s a row, 3 rounds. */
    porteiro_t *p = open_handle(w->reg[1].url, PORTEIRO_ON_ERROR_CLOSED);
    porteiro_policy g, r, rp;
    policy_of(w, 1, "fixed_window 1000000000/366d", PORTEIRO_ON_ERROR_CLOSED, &g);
    g.global_block_max = 100000000; /* a block lasts block_ms at ~2M/s */
    g.global_block_ms = 5000;
    g.lease = (porteiro_quota_lease){.max_ms = 200, .max_units = 1000};
    r = g;
    r.global_home = NULL;
    rp = r;
    rp.lease = (porteiro_quota_lease){0};
    long long n;
    (void)checks_per_s(p, &g, "hot", 1000, &n); /* warm-up: the first blocks */
    (void)checks_per_s(p, &r, "hotr", 1000, &n);
    porteiro_stats s0, s1;
    long long gn = 0, calls = 0;
    for (int round = 0; round < 3; round++) {
        long long rn, pn;
        porteiro_stats_get(p, &s0);
        double gr = checks_per_s(p, &g, "hot", 2000, &n);
        porteiro_stats_get(p, &s1);
        gn += n;
        calls += (long long)(s1.global_home_calls - s0.global_home_calls);
        double rr = checks_per_s(p, &r, "hotr", 2000, &rn);
        porteiro_stats a0, a1;
        porteiro_stats_get(p, &a0);
        double pr = checks_per_s(p, &rp, "hotp", 2000, &pn);
        porteiro_stats_get(p, &a1);
        unsigned long long trips = 0;
        for (int b = 0; b < PORTEIRO_LATENCY_BUCKETS; b++)
            trips += a1.latency[b] - a0.latency[b];
        printf(
            "  plain row: %lld checks, %llu allowed, %llu Redis round trips, quota_local %llu, global_local %llu\n",
            pn, (unsigned long long)(a1.allowed - a0.allowed), trips,
            (unsigned long long)(a1.quota_local - a0.quota_local),
            (unsigned long long)(a1.global_local - a0.global_local));
        printf("round %d: global %.0f/s (%lld decisions, home calls %llu), regional-only with a "
               "lease %.0f/s (ratio %.2f), regional-only plain %.0f/s\n",
               round, gr, n, (unsigned long long)(s1.global_home_calls - s0.global_home_calls), rr,
               gr / rr, pr);
    }
    printf("home round trips per 10 000 decisions of the hot key: %.4f (%lld in %lld)\n",
           10000.0 * (double)calls / (double)gn, calls, gn);
    porteiro_free(p);
    /* 2. Under-admission at steady load (PT_REGIONS_MEASURE=2: the rates
     * alone). */
    if (env_int("PT_REGIONS_MEASURE", 0) != 2) {
        steady(w, 60000, 1.5);
        steady(w, 60000, 0.8);
    }
    put_world(w);
}

int main(void) {
    bool full = env_int("PT_REGIONS_FULL", 0) != 0;
    const struct CMUnitTest quick[] = {
        cmocka_unit_test(config_global),      cmocka_unit_test(fixed_window_exact),
        cmocka_unit_test(window_edges),       cmocka_unit_test(partition_short),
        cmocka_unit_test(give_back_on_close), cmocka_unit_test(shrink_gives_back),
        cmocka_unit_test(async_short),        cmocka_unit_test(measure),
    };
    const struct CMUnitTest all[] = {
        cmocka_unit_test(config_global),      cmocka_unit_test(fixed_window_exact),
        cmocka_unit_test(window_edges),       cmocka_unit_test(sliding_window_exact),
        cmocka_unit_test(token_bucket_exact), cmocka_unit_test(partition_long),
        cmocka_unit_test(home_restart),       cmocka_unit_test(regional_failover),
        cmocka_unit_test(give_back_on_close), cmocka_unit_test(shrink_gives_back),
        cmocka_unit_test(async_path),
    };
    return full ? cmocka_run_group_tests(all, NULL, NULL)
                : cmocka_run_group_tests(quick, group_setup, group_teardown);
}
