/* scenarios.h — THE scenario table: the exact decisions every backend must
 * return (docs/algorithms.md, each algorithm's examples).
 * tests/core/test_scenarios.c runs each scenario on the memory backend and on a
 * real redis-server (the Lua twin), with the clock injected, so the C
 * arithmetic and the scripts cannot drift apart.
 *
 * A scenario is a policy (1..4 limits) and a sequence of checks on one key.
 * Each step: injected now (ms), cost -> allowed, remaining, reset_ms,
 * retry_after_ms of the policy decision; multi-limit steps also give each
 * limit's remaining and the index of the first denying limit (-1: none).
 * Every number below was worked out by hand from the formulas in
 * docs/algorithms.md; comments show the arithmetic where it is not obvious.
 *
 * Redis expires keys in real time while the rows use injected time, so a
 * row whose state a later row relies on keeps a TTL of 100 ms or more (the
 * runner makes keys persistent right after checking their TTL). */
#ifndef TEST_SCENARIOS_H
#define TEST_SCENARIOS_H

#include "porteiro.h"

typedef struct sc_step {
    int64_t now_ms, cost;
    int allowed;
    int64_t remaining, reset_ms, retry_after_ms;
    int64_t per[4]; /* each limit's remaining (multi-limit scenarios) */
    int denied_by;  /* multi-limit scenarios; single: derived */
} sc_step;

#define SC_MAX_STEPS 40
#define SC_END                                                                                     \
    { .now_ms = -1 }

typedef struct scenario {
    const char *name;
    size_t nlimits;
    porteiro_limit limits[4];
    sc_step steps[SC_MAX_STEPS];
} scenario;

#define FW PORTEIRO_FIXED_WINDOW
#define TB PORTEIRO_TOKEN_BUCKET
#define GC PORTEIRO_GCRA
#define SW PORTEIRO_SLIDING_WINDOW
#define SL PORTEIRO_SLIDING_LOG

/* 18 checks of cost 1 at now, remaining 17..0 (sliding window example). */
#define SW18(now, reset)                                                                           \
    {now, 1, 1, 17, reset, 0}, {now, 1, 1, 16, reset, 0}, {now, 1, 1, 15, reset, 0},               \
        {now, 1, 1, 14, reset, 0}, {now, 1, 1, 13, reset, 0}, {now, 1, 1, 12, reset, 0},           \
        {now, 1, 1, 11, reset, 0}, {now, 1, 1, 10, reset, 0}, {now, 1, 1, 9, reset, 0},            \
        {now, 1, 1, 8, reset, 0}, {now, 1, 1, 7, reset, 0}, {now, 1, 1, 6, reset, 0},              \
        {now, 1, 1, 5, reset, 0}, {now, 1, 1, 4, reset, 0}, {now, 1, 1, 3, reset, 0},              \
        {now, 1, 1, 2, reset, 0}, {now, 1, 1, 1, reset, 0}, {                                      \
        now, 1, 1, 0, reset, 0                                                                     \
    }

/* Single-limit rows leave per and denied_by out. */
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wmissing-field-initializers"
static const scenario scenarios[] = {
    /* ---- GCRA ------------------------------------------------------- */
    {"gcra: docs example, L=1/1s B=5",
     1,
     {{GC, 1, 1000, 5}},
     {{0, 6, 0, 5, 0, -1}, /* more than B: never */
      {0, 1, 1, 4, 1000, 0},
      {0, 1, 1, 3, 2000, 0},
      {0, 1, 1, 2, 3000, 0},
      {0, 1, 1, 1, 4000, 0},
      {0, 1, 1, 0, 5000, 0},
      {0, 1, 0, 0, 5000, 1000},
      {3000, 1, 1, 2, 3000, 0},
      {3000, 0, 1, 2, 3000, 0},    /* peek */
      {3000, 3, 0, 2, 3000, 1000}, /* TAT 6000 + 3000 - 5000 - 3000 */
      {4000, 3, 1, 0, 5000, 0},    /* exactly retry_after later */
      SC_END}},
    {"gcra: issue example, L=10/1s B=L",
     1,
     {{GC, 10, 1000, 0}},
     {{0, 1, 1, 9, 100, 0},
      {0, 9, 1, 0, 1000, 0},
      {0, 1, 0, 0, 1000, 100},
      {100, 1, 1, 0, 1000, 0},
      {150, 0, 1, 0, 950, 0},
      {155, 1, 0, 0, 945, 45}, /* TAT 1100 + 100 - 1000 - 155 */
      {155, 11, 0, 0, 945, -1},
      {3600000, 1, 1, 9, 100, 0}, /* an hour idle: a fresh start */
      SC_END}},
    {"gcra: T = 1000/3 ms keeps its fractions",
     1,
     {{GC, 3, 1000, 3}},
     {{0, 1, 1, 2, 334, 0}, /* TAT 333.3 */
      {0, 2, 1, 0, 1000, 0},
      {0, 1, 0, 0, 1000, 334},
      {333, 1, 0, 0, 667, 1},
      {334, 1, 1, 0, 1000, 0},  /* TAT 1333.3 */
      {667, 1, 1, 0, 1000, 0},  /* TAT 1666.7 */
      {1000, 1, 1, 0, 1000, 0}, /* TAT 2000: no drift after 6 */
      {1333, 1, 0, 0, 667, 1},
      {1334, 1, 1, 0, 1000, 0},
      SC_END}},
    {"gcra: B > L, cost B fits, B + 1 never",
     1,
     {{GC, 2, 1000, 6}},
     {{0, 7, 0, 6, 0, -1},
      {0, 6, 1, 0, 3000, 0},
      {0, 0, 1, 0, 3000, 0},
      {0, 1, 0, 0, 3000, 500},
      SC_END}},
    {"gcra: large numbers, L=10^6 per day",
     1,
     {{GC, 1000000, 86400000, 0}},
     {{0, 999999, 1, 1, 86399914, 0}, /* 999999 x 86.4 ms = 86399913.6 */
      {0, 2, 0, 1, 86399914, 87},     /* 86.4 ms rounded up */
      {87, 2, 1, 0, 86400000, 0},
      SC_END}},
    {"gcra: clock going back",
     1,
     {{GC, 1, 1000, 5}},
     {{100000, 5, 1, 0, 5000, 0},
      {50000, 1, 0, 0, 55000, 51000}, /* TAT 105000 stays: nothing added */
      {50000, 0, 1, 0, 55000, 0},
      {100999, 1, 0, 0, 4001, 1},
      {101000, 1, 1, 0, 5000, 0},
      SC_END}},
    {"gcra: clock going back a little still allows",
     1,
     {{GC, 1, 1000, 5}},
     {{100000, 1, 1, 4, 1000, 0},
      {99000, 1, 1, 2, 3000, 0}, /* TAT 101000 -> 102000 */
      {102000, 0, 1, 5, 0, 0},
      SC_END}},

    /* ---- token bucket ----------------------------------------------- */
    {"token bucket: docs example, L=10/1s B=3",
     1,
     {{TB, 10, 1000, 3}},
     {{0, 2, 1, 1, 200, 0},
      {0, 2, 0, 1, 200, 100},
      {100, 4, 0, 2, 100, -1},
      {100, 2, 1, 0, 300, 0},
      {100, 1, 0, 0, 300, 100},
      {200, 1, 1, 0, 300, 0},
      {250, 0, 1, 0, 250, 0}, /* half a token: kept, not shown */
      {250, 1, 0, 0, 250, 50},
      {300, 1, 1, 0, 300, 0},
      {600, 0, 1, 3, 0, 0},
      {86400000000LL, 3, 1, 0, 300, 0}, /* idle for years: no overflow */
      SC_END}},
    {"token bucket: 3 per s keeps its fractions",
     1,
     {{TB, 3, 1000, 3}},
     {{0, 3, 1, 0, 1000, 0},
      {0, 1, 0, 0, 1000, 334},
      {333, 1, 0, 0, 667, 1}, /* 0.999 tokens */
      {334, 1, 1, 0, 1000, 0},
      {667, 1, 1, 0, 1000, 0},
      {1000, 1, 1, 0, 1000, 0},
      SC_END}},
    {"token bucket: B > L, cost B fits, B + 1 never",
     1,
     {{TB, 2, 1000, 6}},
     {{0, 7, 0, 6, 0, -1}, {0, 6, 1, 0, 3000, 0}, {0, 1, 0, 0, 3000, 500}, SC_END}},
    {"token bucket: large numbers, L=B=10^6 per day",
     1,
     {{TB, 1000000, 86400000, 0}},
     {{0, 999999, 1, 1, 86399914, 0},
      {0, 2, 0, 1, 86399914, 87},
      {87, 2, 1, 0, 86400000, 0},
      SC_END}},
    {"token bucket: clock going back adds nothing",
     1,
     {{TB, 10, 1000, 10}},
     {{10000, 10, 1, 0, 1000, 0},
      {5000, 1, 0, 0, 6000, 5100}, /* refill starts again at 10000 */
      {5000, 0, 1, 0, 6000, 0},
      {10099, 1, 0, 0, 901, 1},
      {10100, 1, 1, 0, 1000, 0},
      SC_END}},
    {"token bucket: clock going back, a write keeps the later time",
     1,
     {{TB, 10, 1000, 10}},
     {{10000, 5, 1, 5, 500, 0},
      {9000, 2, 1, 3, 1700, 0}, /* full at 10000 + 700 */
      {10000, 0, 1, 3, 700, 0},
      SC_END}},

    /* ---- fixed window ----------------------------------------------- */
    {"fixed window: docs example, 10/1min",
     1,
     {{FW, 10, 60000, 0}},
     {{1234000, 1, 1, 9, 26000, 0},
      {1234000, 9, 1, 0, 26000, 0},
      {1234000, 1, 0, 0, 26000, 26000},
      {1259999, 1, 0, 0, 1, 1},
      {1260000, 1, 1, 9, 60000, 0},
      {1260000, 11, 0, 9, 60000, -1},
      {1260000, 0, 1, 9, 60000, 0},
      {1319000, 9, 1, 0, 1000, 0},
      {1320000, 0, 1, 10, 0, 0},
      {9000000000LL, 10, 1, 0, 60000, 0},
      SC_END}},
    {"fixed window: clock going back into an earlier window",
     1,
     {{FW, 3, 1000, 0}},
     {{5500, 3, 1, 0, 500, 0},
      {4900, 1, 0, 0, 1100, 1100}, /* the stored window 5 still counts */
      {4900, 0, 1, 0, 1100, 0},
      {5600, 1, 0, 0, 400, 400},
      {6000, 1, 1, 2, 1000, 0},
      SC_END}},
    /* A stored window ahead of now has not begun (a reservation reached
     * into it, or the clock went back): nothing passes before it begins. */
    {"fixed window: clock going back, nothing passes before the later window",
     1,
     {{FW, 3, 1000, 0}},
     {{5500, 1, 1, 2, 500, 0},
      {4900, 1, 0, 2, 1100, 100}, /* fits in window 5, which begins in 100 ms */
      {5000, 1, 1, 1, 1000, 0},
      {5500, 1, 1, 0, 500, 0},
      {5500, 1, 0, 0, 500, 500},
      SC_END}},

    /* ---- sliding window counter ------------------------------------- */
    {"sliding window: docs example, 50/1min, 42 before, 15s in",
     1,
     {{SW, 50, 60000, 0}},
     {{60000, 42, 1, 8, 120000, 0},
      /* 42 x 45/60 = 31.5 weighted: 18 pass (remaining 17..0) */
      SW18(135000, 105000),
      {135000, 1, 0, 0, 105000, 715}, /* 42 x (60000-15715) + 19 x 60000 <= 50 x 60000 */
      {135715, 1, 1, 0, 104285, 0},
      {180000, 0, 1, 31, 60000, 0}, /* 19 now weigh fully, nothing current */
      {240000, 0, 1, 50, 0, 0},
      SC_END}},
    {"sliding window: retry lands in the next window",
     1,
     {{SW, 4, 1000, 0}},
     {{500, 4, 1, 0, 1500, 0},
      {600, 1, 0, 0, 1400, 650}, /* 4 x 750/1000 + 1 <= 4 at 1250 */
      {1249, 1, 0, 0, 751, 1},
      {1250, 1, 1, 0, 1750, 0},
      {1250, 6, 0, 0, 1750, -1},
      SC_END}},
    {"sliding window: clock going back into an earlier window",
     1,
     {{SW, 4, 1000, 0}},
     {{5500, 4, 1, 0, 1500, 0},
      {4900, 1, 0, 0, 2100, 1350}, /* seen from 5000: 1250 + 100 */
      {4900, 0, 1, 0, 2100, 0},
      {6249, 1, 0, 0, 751, 1},
      {6250, 1, 1, 0, 1750, 0},
      SC_END}},
    {"sliding window: clock going back, nothing passes before the later window",
     1,
     {{SW, 4, 1000, 0}},
     {{5500, 2, 1, 2, 1500, 0},
      {4900, 1, 0, 2, 2100, 100}, /* fits at 5000, the window's start */
      {5000, 1, 1, 1, 2000, 0},
      {5500, 0, 1, 1, 1500, 0},
      SC_END}},

    /* ---- sliding window log ------------------------------------------ */
    {"sliding log: exact retry, L=3/10s",
     1,
     {{SL, 3, 10000, 0}},
     {{1000000, 0, 1, 3, 0, 0},
      {1000000, 1, 1, 2, 10000, 0},
      {1001000, 1, 1, 1, 10000, 0},
      {1002000, 2, 0, 1, 9000, 8000}, /* one unit must leave: the one at 1000000 */
      {1002000, 1, 1, 0, 10000, 0},
      {1005000, 0, 1, 0, 7000, 0},
      {1005000, 1, 0, 0, 7000, 5000},
      {1005000, 3, 0, 0, 7000, 7000}, /* all three: the newest, at 1002000 */
      {1005000, 4, 0, 0, 7000, -1},   /* more than L: never */
      {1009999, 1, 0, 0, 2001, 1},    /* an entry at t counts while t > now - P */
      {1010000, 1, 1, 0, 10000, 0},
      {1010000, 1, 0, 0, 10000, 1000},
      {1030000, 3, 1, 0, 10000, 0}, /* one check of cost 3 */
      {1035000, 2, 0, 0, 5000, 5000},
      {1029000, 1, 0, 0, 11000, 11000}, /* clock back: the entries still count */
      {1040000, 0, 1, 3, 0, 0},
      SC_END}},
    {"sliding log: clock going back, a write keeps its own time",
     1,
     {{SL, 3, 1000, 0}},
     {{5000, 2, 1, 1, 1000, 0},
      {4500, 1, 1, 0, 1500, 0},  /* the newest entry (5000) sets the reset */
      {5400, 1, 0, 0, 600, 100}, /* the unit at 4500 leaves first */
      {5500, 1, 1, 0, 1000, 0},
      {6000, 0, 1, 2, 500, 0},
      SC_END}},

    /* ---- at the largest accepted L x P (2^50): Lua doubles stay exact -- */
    {"sliding window: L x P = 2^50, one unit over by a single ms",
     1,
     {{SW, 1048576, 1073741824, 0}},
     {{0, 1, 1, 1048575, 2147483648LL, 0},
      {1073741824, 1048575, 1, 0, 2147483648LL, 0},
      /* 1 x 1 + L x P > L x P: over by one part in 2^50 */
      {2147483647, 1, 0, 0, 1073741825, 1},
      {2147483648LL, 1, 1, 0, 2147483648LL, 0},
      SC_END}},

    /* ---- the latest injected clock accepted: 2^50 ms ------------------ */
    {"policy: all four algorithms at now = 2^50 ms",
     4,
     {{FW, 3, 1000, 0}, {TB, 10, 1000, 5}, {GC, 4, 1000, 4}, {SW, 6, 1000, 0}},
     {/* 2^50 = 1125899906842624: 624 ms into its window */
      {1125899906842624LL, 1, 1, 2, 1376, 0, {2, 4, 3, 5}, -1},
      {1125899906842624LL, 2, 1, 0, 1376, 0, {0, 2, 1, 3}, -1},
      {1125899906842624LL, 1, 0, 0, 1376, 376, {0, 2, 1, 3}, 0},
      SC_END}},

    {"fixed window: peek on a fresh key, cost > L",
     1,
     {{FW, 7, 1000, 0}},
     {{5, 0, 1, 7, 0, 0}, {5, 8, 0, 7, 0, -1}, SC_END}},
    {"token bucket: peek on a fresh key, cost > B",
     1,
     {{TB, 5, 1000, 7}},
     {{5, 0, 1, 7, 0, 0}, {5, 8, 0, 7, 0, -1}, SC_END}},
    {"gcra: peek on a fresh key, cost > B",
     1,
     {{GC, 5, 1000, 0}},
     {{5, 0, 1, 5, 0, 0}, {5, 6, 0, 5, 0, -1}, SC_END}},
    {"sliding window: peek on a fresh key, cost > L",
     1,
     {{SW, 7, 1000, 0}},
     {{5, 0, 1, 7, 0, 0}, {5, 8, 0, 7, 0, -1}, SC_END}},
    {"sliding log: peek on a fresh key, cost > L",
     1,
     {{SL, 7, 1000, 0}},
     {{5, 0, 1, 7, 0, 0}, {5, 8, 0, 7, 0, -1}, SC_END}},

    /* ---- policies: all-or-nothing ----------------------------------- */
    {"policy: token bucket + gcra, gcra denies, the bucket keeps its tokens",
     2,
     {{TB, 10, 10000, 10}, {GC, 2, 1000, 2}},
     {{0, 2, 1, 0, 2000, 0, {8, 0}, -1},
      {0, 1, 0, 0, 2000, 500, {8, 0}, 1},
      {0, 1, 0, 0, 2000, 500, {8, 0}, 1},
      {0, 1, 0, 0, 2000, 500, {8, 0}, 1},
      {500, 1, 1, 0, 2500, 0, {7, 0}, -1}, /* 8.5 - 1 tokens */
      {500, 11, 0, 0, 2500, -1, {7, 0}, 0},
      SC_END}},
    {"policy: fixed window + sliding window",
     2,
     {{FW, 5, 1000, 0}, {SW, 4, 1000, 0}},
     {{0, 4, 1, 0, 2000, 0, {1, 0}, -1},
      {0, 1, 0, 0, 2000, 1250, {1, 0}, 1},
      {1000, 1, 0, 0, 1000, 250, {5, 0}, 1},
      {1250, 1, 1, 0, 1750, 0, {4, 0}, -1},
      SC_END}},
    {"policy: sliding log + gcra, the log denies, gcra keeps its capacity",
     2,
     {{SL, 2, 1000, 0}, {GC, 5, 1000, 5}},
     {{0, 1, 1, 1, 1000, 0, {1, 4}, -1},
      {0, 2, 0, 1, 1000, 1000, {1, 4}, 0},
      {0, 1, 1, 0, 1000, 0, {0, 3}, -1},
      {500, 1, 0, 0, 500, 500, {0, 5}, 0},
      {1000, 1, 1, 1, 1000, 0, {1, 4}, -1}, /* 4, not 3: the denial took nothing */
      SC_END}},
    {"policy: one limit can never pass, retry -1",
     2,
     {{GC, 10, 1000, 10}, {FW, 5, 1000, 0}},
     {{0, 6, 0, 5, 0, -1, {10, 5}, 1}, {0, 5, 1, 0, 1000, 0, {5, 0}, -1}, SC_END}},
    {"policy: all four algorithms",
     4,
     {{FW, 3, 1000, 0}, {TB, 10, 1000, 5}, {GC, 4, 1000, 4}, {SW, 6, 1000, 0}},
     {{0, 0, 1, 3, 0, 0, {3, 5, 4, 6}, -1},
      {0, 1, 1, 2, 2000, 0, {2, 4, 3, 5}, -1},
      {0, 1, 1, 1, 2000, 0, {1, 3, 2, 4}, -1},
      {0, 1, 1, 0, 2000, 0, {0, 2, 1, 3}, -1},
      {0, 1, 0, 0, 2000, 1000, {0, 2, 1, 3}, 0},
      {1000, 1, 1, 2, 2000, 0, {2, 4, 3, 2}, -1},
      /* the window denies, the sliding window too (retry 334) */
      {1000, 3, 0, 2, 2000, 1000, {2, 4, 3, 2}, 0},
      SC_END}},
};
#pragma GCC diagnostic pop

#undef FW
#undef TB
#undef GC
#undef SW
#undef SL

#endif
