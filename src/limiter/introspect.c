/* introspect.c — what tools ask of a limiter: the script it runs, and the
 * Redis memory its keys use. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "limiter/handle.h"
#include "redis/async_conn.h"
#include "redis/command.h"
#include "topology/acluster.h"

/* Keys asked for per SCAN step (a hint to Redis, not a bound). */
#define SCAN_COUNT "1000"

/* Sums MEMORY USAGE over KEYS in one round trip; a key that expired between
 * the SCAN and this call counts nothing. */
static const char usage_script[] = "local n = 0\n"
                                   "for i = 1, #KEYS do\n"
                                   "  local b = redis.call('MEMORY', 'USAGE', KEYS[i])\n"
                                   "  if b then n = n + b end\n"
                                   "end\n"
                                   "return n\n";

const char *porteiro_script_for(porteiro_algorithm a, size_t *len) {
    if ((unsigned)a > PORTEIRO_CONCURRENCY)
        return NULL;
    /* What a check of one limit of a runs: its flat script where it has one. */
    const pt_script *s =
        a > 0 && a < PT_SCRIPT_CHECKED ? &pt_scripts[PT_SCRIPT_CHECK(a)] : &pt_scripts[a];
    if (len != NULL)
        *len = s->len;
    return s->text;
}

const char *porteiro_script(size_t *len) {
    return porteiro_script_for(PT_SCRIPT_ALL, len);
}

const char *porteiro_script_for_limits(const porteiro_limit *limits, size_t n, size_t *len) {
    pt_call call; /* only what chooses the script: the algorithms, their count */
    if (limits == NULL || n == 0 || n > PORTEIRO_MAX_LIMITS)
        return NULL;
    call.nlimits = n;
    call.refund = false;
    for (size_t i = 0; i < n; i++) {
        if (porteiro_algorithm_name(limits[i].algorithm) == NULL)
            return NULL;
        call.limits[i] = limits[i];
    }
    const pt_script *s = pt_script_for(&call);
    if (len != NULL)
        *len = s->len;
    return s->text;
}

/* "prefix:*" with the glob characters of the prefix escaped, so that a
 * prefix such as "a*" matches only itself. out holds 2 * n + 3 bytes. */
static size_t match_pattern(const char *prefix, size_t n, char *out) {
    size_t k = 0;
    for (size_t i = 0; i < n; i++) {
        if (strchr("*?[]\\", prefix[i]) != NULL)
            out[k++] = '\\';
        out[k++] = prefix[i];
    }
    memcpy(out + k, ":*", 3);
    return k + 2;
}

static porteiro_status bad_reply(porteiro_t *p, redisReply *reply, const char *what) {
    if (reply->type == REDIS_REPLY_ERROR) {
        snprintf(p->errmsg, sizeof(p->errmsg), "redis: %.*s", (int)reply->len, reply->str);
        return pt_reply_error_status(reply);
    }
    snprintf(p->errmsg, sizeof(p->errmsg), "redis: unexpected reply to %s", what);
    return PORTEIRO_ERR_PROTOCOL;
}

/* MEMORY USAGE of the n keys of a SCAN step, summed by one EVAL. */
static porteiro_status sum_bytes(porteiro_t *p, size_t node, redisReply *const *keys, size_t n,
                                 uint64_t *bytes) {
    const char **argv = malloc((n + 3) * sizeof(*argv));
    size_t *lens = malloc((n + 3) * sizeof(*lens));
    char count[24];
    redisReply *reply = NULL;
    porteiro_status st = PORTEIRO_ERR_NOMEM;

    if (argv != NULL && lens != NULL) {
        argv[0] = "EVAL", lens[0] = 4;
        argv[1] = usage_script, lens[1] = sizeof(usage_script) - 1;
        lens[2] = (size_t)snprintf(count, sizeof(count), "%zu", n), argv[2] = count;
        for (size_t i = 0; i < n; i++)
            argv[i + 3] = keys[i]->str, lens[i + 3] = keys[i]->len;
        st = pt_router_command_node(p->redis, node, (int)(n + 3), argv, lens, &reply, p->errmsg,
                                    sizeof(p->errmsg));
    }
    if (st == PORTEIRO_OK) {
        if (reply->type == REDIS_REPLY_INTEGER && reply->integer >= 0)
            *bytes += (uint64_t)reply->integer;
        else
            st = bad_reply(p, reply, "MEMORY USAGE");
    }
    if (reply != NULL)
        freeReplyObject(reply);
    free(argv);
    free(lens);
    return st;
}

/* One SCAN step of node from cursor (a decimal string, updated in place):
 * *reply (the caller frees it) holds the keys found at element[1]. */
static porteiro_status scan_once(porteiro_t *p, size_t node, const char *pattern,
                                 size_t pattern_len, char cursor[32], redisReply **reply) {
    const char *argv[] = {"SCAN", cursor, "MATCH", pattern, "COUNT", SCAN_COUNT};
    size_t lens[] = {4, strlen(cursor), 5, pattern_len, 5, strlen(SCAN_COUNT)};
    redisReply *r = NULL;
    porteiro_status st =
        pt_router_command_node(p->redis, node, 6, argv, lens, &r, p->errmsg, sizeof(p->errmsg));
    if (st != PORTEIRO_OK)
        return st;
    if (r->type != REDIS_REPLY_ARRAY || r->elements != 2 ||
        r->element[0]->type != REDIS_REPLY_STRING || r->element[0]->len >= 32 ||
        r->element[1]->type != REDIS_REPLY_ARRAY) {
        st = bad_reply(p, r, "SCAN");
        freeReplyObject(r);
        return st;
    }
    memcpy(cursor, r->element[0]->str, r->element[0]->len);
    cursor[r->element[0]->len] = '\0';
    *reply = r;
    return PORTEIRO_OK;
}

/* What one SCAN step's keys (found, an array) are given to. */
typedef porteiro_status scan_fn(porteiro_t *p, size_t node, const redisReply *found, void *ctx);

/* SCAN of pattern on every node that serves (a node without slots holds
 * no live keys), each until Redis hands back cursor 0 again; each step's
 * keys to fn. Stops at the first failure. */
static porteiro_status scan_keys(porteiro_t *p, const char *pattern, size_t pattern_len,
                                 scan_fn *fn, void *ctx) {
    porteiro_status st = PORTEIRO_OK;
    size_t nodes = pt_router_node_count(p->redis);
    for (size_t i = 0; st == PORTEIRO_OK && i < nodes; i++) {
        if (!pt_router_node_serves(p->redis, i))
            continue;
        char cursor[32] = "0";
        do {
            redisReply *reply = NULL;
            st = scan_once(p, i, pattern, pattern_len, cursor, &reply);
            if (st == PORTEIRO_OK) {
                st = fn(p, i, reply->element[1], ctx);
                freeReplyObject(reply);
            }
        } while (st == PORTEIRO_OK && strcmp(cursor, "0") != 0);
    }
    return st;
}

typedef struct {
    uint64_t keys, bytes;
} usage_sum;

/* The keys and bytes of one SCAN step's keys. */
static porteiro_status usage_step(porteiro_t *p, size_t node, const redisReply *found, void *ctx) {
    usage_sum *u = ctx;
    porteiro_status st = PORTEIRO_OK;
    u->keys += found->elements;
    /* On a cluster one SCAN step's keys share a node, not a slot: one
     * EVAL per key (a script's declared keys must share a slot). */
    bool cluster = pt_router_is_cluster(p->redis);
    for (size_t k = 0; st == PORTEIRO_OK && k < found->elements; k += cluster ? 1 : found->elements)
        st = sum_bytes(p, node, found->element + k, cluster ? 1 : found->elements, &u->bytes);
    return st;
}

porteiro_status porteiro_key_usage(porteiro_t *p, uint64_t *keys, uint64_t *bytes) {
    char pattern[2 * PT_MAX_PREFIX + 3];
    usage_sum u = {0, 0};
    porteiro_status st = PORTEIRO_OK;

    if (p == NULL || keys == NULL || bytes == NULL)
        return PORTEIRO_ERR_INVALID;
    pthread_mutex_lock(&p->mu);
    p->errmsg[0] = '\0';
    if (p->redis == NULL) {
        snprintf(p->errmsg, sizeof(p->errmsg),
                 "key usage needs Redis: the memory backend "
                 "lives only inside its process");
        st = PORTEIRO_ERR_UNSUPPORTED;
    }
    size_t pattern_len = match_pattern(p->prefix, p->prefix_len, pattern);
    if (st == PORTEIRO_OK)
        st = scan_keys(p, pattern, pattern_len, usage_step, &u);
    pthread_mutex_unlock(&p->mu);
    if (st == PORTEIRO_OK) {
        *keys = u.keys;
        *bytes = u.bytes;
    }
    return st;
}

/* ---- porteiro_migrate_keys: older multi-key items to this layout -------- */

/* The state and PTTL of an older item (false: gone meanwhile, or a key of
 * another type that only looks like one: left alone). */
static const char read_script[] = "local v = redis.pcall('GET', KEYS[1])\n"
                                  "if not v or type(v) ~= 'string' then return false end\n"
                                  "return {v, redis.call('PTTL', KEYS[1])}\n";

/* Writes an older item's state (ARGV: its algorithm, state, PTTL) at its
 * new name. Where a state is there already (this version counted since),
 * both were consumed: they are added up, aligned to the later window or
 * time, and the key lives as long as either needs (the safe side: what
 * goes unremembered would be admitted again). Returns 0 written, 1 added,
 * -1 left alone (either key holds something else than a state). */
#define MERGE_FUNCTION                                                                                     \
    "local function merge(k, code, v, ttl)\n"                                                              \
    "local size = 16\n"                                                                                    \
    "if code == 3 or code == 4 then size = 24 end\n"                                                       \
    "if #v ~= size then return -1 end\n"                                                                   \
    "local cur = redis.pcall('GET', k)\n"                                                                  \
    "if type(cur) == 'table' or (cur and #cur ~= size) then return -1 end\n"                               \
    "local function put(value, px)\n"                                                                      \
    "  if px and px > 0 then redis.call('SET', k, value, 'PX', px) else redis.call('SET', k, value) end\n" \
    "end\n"                                                                                                \
    "if not cur then put(v, ttl) return 0 end\n"                                                           \
    "local ct = redis.call('PTTL', k)\n"                                                                   \
    "local mx, sum = math.max(ttl, ct), ttl + ct\n"                                                        \
    "if ttl < 0 or ct < 0 then mx, sum = nil, nil end\n"                                                   \
    "if code == 1 then\n"                                                                                  \
    "  local w1, n1 = struct.unpack('<dd', v)\n"                                                           \
    "  local w2, n2 = struct.unpack('<dd', cur)\n"                                                         \
    "  if w1 == w2 then put(struct.pack('<dd', w1, n1 + n2), mx)\n"                                        \
    "  elseif w1 > w2 then put(v, ttl) end\n"                                                              \
    "elseif code == 4 then\n"                                                                              \
    "  local w1, c1, p1 = struct.unpack('<ddd', v)\n"                                                      \
    "  local w2, c2, p2 = struct.unpack('<ddd', cur)\n"                                                    \
    "  if w1 == w2 then put(struct.pack('<ddd', w1, c1 + c2, p1 + p2), mx)\n"                              \
    "  elseif w1 == w2 + 1 then put(struct.pack('<ddd', w1, c1, p1 + c2), mx)\n"                           \
    "  elseif w2 == w1 + 1 then put(struct.pack('<ddd', w2, c2, p2 + c1), mx)\n"                           \
    "  elseif w1 > w2 then put(v, ttl) end\n"                                                              \
    "elseif code == 2 then\n"                                                                              \
    "  local u1, t1 = struct.unpack('<dd', v)\n"                                                           \
    "  local u2, t2 = struct.unpack('<dd', cur)\n"                                                         \
    "  put(struct.pack('<dd', u1 + u2, math.max(t1, t2)), sum)\n"                                          \
    "else\n"                                                                                               \
    "  local t = redis.call('TIME')\n"                                                                     \
    "  local now = t[1] * 1000 + math.floor(t[2] / 1000)\n"                                                \
    "  local a1, b1, l1 = struct.unpack('<ddd', v)\n"                                                      \
    "  local a2, b2, l2 = struct.unpack('<ddd', cur)\n"                                                    \
    "  local r = math.max(0, a1 - now + b1 / l1) + math.max(0, a2 - now + b2 / l2)\n"                      \
    "  local whole = math.floor(r)\n"                                                                      \
    "  local ticks = math.ceil((r - whole) * l2)\n"                                                        \
    "  if ticks >= l2 then whole, ticks = whole + 1, ticks - l2 end\n"                                     \
    "  put(struct.pack('<ddd', now + whole, ticks, l2), whole + 2)\n"                                      \
    "end\n"                                                                                                \
    "return 1\n"                                                                                           \
    "end\n"

static const char merge_script[] =
    MERGE_FUNCTION "return merge(KEYS[1], tonumber(ARGV[1]), ARGV[2], tonumber(ARGV[3]))\n";

/* A command about key whose reply the caller reads (freed here). */
static porteiro_status key_command(porteiro_t *p, const char *key, size_t key_len, int argc,
                                   const char **argv, const size_t *lens, redisReply **reply) {
    porteiro_status st = pt_router_command_key(p->redis, key, key_len, argc, argv, lens, reply,
                                               p->errmsg, sizeof(p->errmsg));
    if (st == PORTEIRO_OK && (*reply)->type == REDIS_REPLY_ERROR) {
        st = bad_reply(p, *reply, "the migration");
        freeReplyObject(*reply);
        *reply = NULL;
    }
    return st;
}

/* Moves one older item (old) to its new name: read, write or add there,
 * then delete the old key. */
static porteiro_status migrate_one(porteiro_t *p, const char *old, size_t old_len,
                                   const char *new_name, size_t new_len, porteiro_algorithm a,
                                   porteiro_migration *m) {
    const char *rargv[] = {"EVAL", read_script, "1", old};
    size_t rlens[] = {4, sizeof(read_script) - 1, 1, old_len};
    redisReply *got = NULL, *put = NULL, *del = NULL;
    porteiro_status st = key_command(p, old, old_len, 4, rargv, rlens, &got);
    if (st != PORTEIRO_OK || got == NULL)
        return st != PORTEIRO_OK ? st : PORTEIRO_ERR_REDIS;
    if (got->type != REDIS_REPLY_ARRAY || got->elements != 2 ||
        got->element[0]->type != REDIS_REPLY_STRING ||
        got->element[1]->type != REDIS_REPLY_INTEGER) {
        freeReplyObject(got); /* expired meanwhile (nil), or not ours */
        return PORTEIRO_OK;
    }
    char code[8], ttl[24];
    snprintf(code, sizeof(code), "%d", (int)a);
    snprintf(ttl, sizeof(ttl), "%lld", (long long)got->element[1]->integer);
    const char *margv[] = {"EVAL", merge_script, "1", new_name, code, got->element[0]->str, ttl};
    size_t mlens[] = {
        4, sizeof(merge_script) - 1, 1, new_len, strlen(code), got->element[0]->len, strlen(ttl)};
    st = key_command(p, new_name, new_len, 7, margv, mlens, &put);
    freeReplyObject(got);
    if (st != PORTEIRO_OK)
        return st;
    bool done = put->type == REDIS_REPLY_INTEGER && put->integer >= 0;
    m->moved += done;
    m->merged += done && put->integer == 1;
    freeReplyObject(put);
    if (!done)
        return PORTEIRO_OK; /* not a state: left as it is */
    const char *dargv[] = {"DEL", old};
    size_t dlens[] = {3, old_len};
    st = key_command(p, old, old_len, 2, dargv, dlens, &del);
    if (del != NULL)
        freeReplyObject(del);
    return st;
}

/* One SCAN step's keys: each older item found moved. */
static porteiro_status migrate_step(porteiro_t *p, size_t node, const redisReply *found,
                                    void *ctx) {
    (void)node;
    porteiro_migration *m = ctx;
    porteiro_status st = PORTEIRO_OK;
    char new_name[PT_MAX_FULL_KEY];
    for (size_t k = 0; st == PORTEIRO_OK && k < found->elements; k++) {
        redisReply *key = found->element[k];
        if (key->type != REDIS_REPLY_STRING)
            continue;
        m->scanned++;
        size_t new_len = 0;
        porteiro_algorithm a = 0;
        int kind = pt_call_migrate_name(p->prefix, p->prefix_len, key->str, key->len, new_name,
                                        &new_len, &a);
        if (kind == PT_MIGRATE_LOST)
            m->lost++;
        else if (kind == PT_MIGRATE_NEW)
            st = migrate_one(p, key->str, key->len, new_name, new_len, a, m);
    }
    return st;
}

porteiro_status porteiro_migrate_keys(porteiro_t *p, porteiro_migration *out) {
    char pattern[2 * PT_MAX_PREFIX + 3];
    porteiro_migration m = {0};
    porteiro_status st = PORTEIRO_OK;
    if (p == NULL || out == NULL)
        return PORTEIRO_ERR_INVALID;
    pthread_mutex_lock(&p->mu);
    p->errmsg[0] = '\0';
    if (p->redis == NULL) {
        snprintf(p->errmsg, sizeof(p->errmsg), "migrating keys needs Redis");
        st = PORTEIRO_ERR_UNSUPPORTED;
    }
    size_t pattern_len = match_pattern(p->prefix, p->prefix_len, pattern);
    if (st == PORTEIRO_OK)
        st = scan_keys(p, pattern, pattern_len, migrate_step, &m);
    pthread_mutex_unlock(&p->mu);
    *out = m; /* what was done, also when it stopped on a failure */
    return st;
}

/* ---- porteiro_migrate_policy_keys: named policies' plain counters ------ */

/* Copies a plain key's state (KEYS[1]) to a policy's key (KEYS[2]) unless
 * the marker (KEYS[3]) says it was copied already; ARGV: the algorithm.
 * The three keys share their hash tag (the client's key): one slot, one
 * atomic step. A string state is merged as migrate-keys merges; a sliding
 * log's entries are added (an entry the policy's log holds already, the
 * same ms and sequence, is added under another member: never one less).
 * Returns 0 written, 1 added, -1 left alone (not a state), -2 copied
 * before, -3 gone meanwhile. */
static const char policy_copy_script[] = MERGE_FUNCTION
    "local old, new, mark, code = KEYS[1], KEYS[2], KEYS[3], tonumber(ARGV[1])\n"
    "if redis.call('EXISTS', mark) == 1 then return -2 end\n"
    "local ty = redis.call('TYPE', old)['ok']\n"
    "if ty == 'none' then return -3 end\n"
    "local ttl = redis.call('PTTL', old)\n"
    "local r\n"
    "if code == 5 then\n"
    "  local nt = redis.call('TYPE', new)['ok']\n"
    "  if ty ~= 'zset' or (nt ~= 'none' and nt ~= 'zset') then return -1 end\n"
    "  r = nt == 'zset' and 1 or 0\n"
    "  local n = redis.call('ZCARD', old)\n"
    "  for i = 0, n - 1, 500 do\n"
    "    local v = redis.call('ZRANGE', old, i, i + 499, 'WITHSCORES')\n"
    "    local args = {}\n"
    "    for j = 1, #v, 2 do\n"
    "      local m = v[j]\n"
    "      if redis.call('ZSCORE', new, m) then m = m .. ':m' end\n"
    "      args[#args + 1] = v[j + 1]\n"
    "      args[#args + 1] = m\n"
    "    end\n"
    "    if #args > 0 then redis.call('ZADD', new, unpack(args)) end\n"
    "  end\n"
    "  local ct = redis.call('PTTL', new)\n"
    "  if ttl > 0 and ct >= 0 and ttl > ct then redis.call('PEXPIRE', new, ttl) end\n"
    "else\n"
    "  if ty ~= 'string' then return -1 end\n"
    "  r = merge(new, code, redis.call('GET', old), ttl)\n"
    "  if r < 0 then return r end\n"
    "end\n"
    "if ttl > 0 then redis.call('SET', mark, '1', 'PX', ttl) else redis.call('SET', mark, '1') end\n"
    "return r\n";

#define PT_MIGRATE_MAX_POLICIES 1024
#define PT_MIGRATE_DESC 64

/* One (policy, limit) to copy to: what follows the head in the policy's
 * key ("=" TAG ":"), and D. */
typedef struct policy_target {
    char tag[80];
    size_t tag_len;
    char d[PT_MIGRATE_DESC];
    size_t d_len;
    porteiro_algorithm a;
} policy_target;

/* The targets of policies (one per distinct name and D) into *out. */
static porteiro_status policy_targets(porteiro_t *p, const porteiro_policy *policies, size_t n,
                                      policy_target **out, size_t *count) {
    static const char probe[] = "k"; /* any key: only the parts after it matter */
    policy_target *t = calloc(n * PORTEIRO_MAX_LIMITS, sizeof(*t));
    pt_call *plain = malloc(sizeof(*plain)), *named = malloc(sizeof(*named));
    size_t nt = 0, head = p->prefix_len + 5; /* prefix ":{k}" and the byte after */
    porteiro_status st =
        t != NULL && plain != NULL && named != NULL ? PORTEIRO_OK : PORTEIRO_ERR_NOMEM;
    for (size_t i = 0; st == PORTEIRO_OK && i < n; i++) {
        const porteiro_policy *pol = &policies[i];
        if (pol->name == NULL || pol->name[0] == '\0') {
            snprintf(p->errmsg, sizeof(p->errmsg), "policy %zu has no name", i);
            st = PORTEIRO_ERR_INVALID;
            break;
        }
        st = pt_call_prepare_in(plain, p->prefix, p->prefix_len, NULL, pol->limits, pol->nlimits,
                                probe, 1, 0, PORTEIRO_NOW, p->errmsg, sizeof(p->errmsg));
        if (st == PORTEIRO_OK)
            st = pt_call_prepare_in(named, p->prefix, p->prefix_len, pol->name, pol->limits,
                                    pol->nlimits, probe, 1, 0, PORTEIRO_NOW, p->errmsg,
                                    sizeof(p->errmsg));
        for (size_t j = 0; st == PORTEIRO_OK && j < plain->nlimits; j++) {
            policy_target c = {.a = plain->limits[j].algorithm};
            c.d_len = plain->key_lens[j] - head;
            c.tag_len = named->key_lens[j] - c.d_len - (head - 1);
            if (c.d_len >= sizeof(c.d) || c.tag_len >= sizeof(c.tag))
                continue; /* no descriptor or tag part is that long */
            memcpy(c.d, plain->keys[j] + head, c.d_len);
            memcpy(c.tag, named->keys[j] + head - 1, c.tag_len);
            bool seen = false;
            for (size_t k = 0; k < nt && !seen; k++)
                seen = t[k].d_len == c.d_len && t[k].tag_len == c.tag_len &&
                       memcmp(t[k].d, c.d, c.d_len) == 0 && memcmp(t[k].tag, c.tag, c.tag_len) == 0;
            if (!seen)
                t[nt++] = c;
        }
    }
    free(plain);
    free(named);
    if (st != PORTEIRO_OK) {
        free(t);
        return st;
    }
    *out = t;
    *count = nt;
    return PORTEIRO_OK;
}

/* Copies the plain key name[0..len) (head: pt_call_single_head's) to
 * target t's key, once. */
static porteiro_status policy_copy(porteiro_t *p, const char *name, size_t len, size_t head,
                                   const policy_target *t, porteiro_migration *m) {
    char new_name[PT_MAX_FULL_KEY + 160], mark[PT_MAX_FULL_KEY + 160];
    size_t n = head;
    memcpy(new_name, name, head);             /* prefix ":{" K "}" (or "}#" SHA) */
    memcpy(new_name + n, t->tag, t->tag_len); /* "=" TAG ":" */
    n += t->tag_len;
    memcpy(new_name + n, t->d, t->d_len);
    n += t->d_len;
    memcpy(mark, new_name, n);
    mark[head] = '!'; /* no check's key: "}" is followed by ":", "=" or "#" */
    char code[8];
    snprintf(code, sizeof(code), "%d", (int)t->a);
    const char *argv[] = {"EVAL", policy_copy_script, "3", name, new_name, mark, code};
    size_t lens[] = {4, sizeof(policy_copy_script) - 1, 1, len, n, n, strlen(code)};
    redisReply *r = NULL;
    porteiro_status st = key_command(p, name, len, 7, argv, lens, &r);
    if (st != PORTEIRO_OK || r == NULL) /* no reply: an error, never read */
        return st != PORTEIRO_OK ? st : PORTEIRO_ERR_REDIS;
    if (r->type == REDIS_REPLY_INTEGER && r->integer >= 0) {
        m->moved++;
        m->merged += r->integer == 1;
    }
    freeReplyObject(r);
    return PORTEIRO_OK;
}

/* The policies' targets, and what was done. */
typedef struct {
    const policy_target *t;
    size_t nt;
    porteiro_migration *m;
} policy_walk;

/* One SCAN step's keys: each plain counter of a named policy copied. */
static porteiro_status policy_step(porteiro_t *p, size_t node, const redisReply *found, void *ctx) {
    (void)node;
    const policy_walk *w = ctx;
    const policy_target *t = w->t;
    size_t nt = w->nt;
    porteiro_migration *m = w->m;
    porteiro_status st = PORTEIRO_OK;
    for (size_t k = 0; st == PORTEIRO_OK && k < found->elements; k++) {
        redisReply *key = found->element[k];
        if (key->type != REDIS_REPLY_STRING || key->len > PT_MAX_FULL_KEY)
            continue;
        m->scanned++;
        size_t head = pt_call_single_head(p->prefix, p->prefix_len, key->str, key->len);
        if (head == 0)
            continue;
        const char *d = key->str + head + 1;
        size_t d_len = key->len - head - 1;
        for (size_t i = 0; st == PORTEIRO_OK && i < nt; i++)
            if (t[i].d_len == d_len && memcmp(t[i].d, d, d_len) == 0)
                st = policy_copy(p, key->str, key->len, head, &t[i], m);
    }
    return st;
}

porteiro_status porteiro_migrate_policy_keys(porteiro_t *p, const porteiro_policy *policies,
                                             size_t npolicies, porteiro_migration *out) {
    char pattern[2 * PT_MAX_PREFIX + 3];
    porteiro_migration m = {0};
    if (p == NULL || out == NULL || policies == NULL || npolicies == 0 ||
        npolicies > PT_MIGRATE_MAX_POLICIES)
        return PORTEIRO_ERR_INVALID;
    pthread_mutex_lock(&p->mu);
    p->errmsg[0] = '\0';
    policy_target *t = NULL;
    size_t nt = 0;
    porteiro_status st = PORTEIRO_OK;
    if (p->redis == NULL) {
        snprintf(p->errmsg, sizeof(p->errmsg), "migrating keys needs Redis");
        st = PORTEIRO_ERR_UNSUPPORTED;
    }
    if (st == PORTEIRO_OK)
        st = policy_targets(p, policies, npolicies, &t, &nt);
    size_t pattern_len = match_pattern(p->prefix, p->prefix_len, pattern);
    policy_walk w = {t, nt, &m};
    if (st == PORTEIRO_OK)
        st = scan_keys(p, pattern, pattern_len, policy_step, &w);
    free(t);
    pthread_mutex_unlock(&p->mu);
    *out = m;
    return st;
}

bool porteiro_is_cluster(const porteiro_t *p) {
    return p != NULL && p->redis != NULL && pt_router_is_cluster(p->redis);
}

/* PING on node i: true when it answered PONG. */
static bool ping_node(porteiro_t *p, size_t i) {
    const char *argv[] = {"PING"};
    size_t lens[] = {4};
    redisReply *reply = NULL;
    char err[256];
    bool up = pt_router_command_node(p->redis, i, 1, argv, lens, &reply, err, sizeof(err)) ==
                  PORTEIRO_OK &&
              reply->type == REDIS_REPLY_STATUS && strcmp(reply->str, "PONG") == 0;
    if (reply != NULL)
        freeReplyObject(reply);
    return up;
}

size_t porteiro_nodes(porteiro_t *p, bool ping, porteiro_node *out, size_t max) {
    if (p == NULL || p->redis == NULL)
        return 0;
    pthread_mutex_lock(&p->mu);
    bool cluster = pt_router_is_cluster(p->redis);
    size_t n = 0, total = pt_router_node_count(p->redis);
    for (size_t i = 0; i < total; i++) {
        if (!pt_router_node_serves(p->redis, i))
            continue; /* a master that lost its slots (failed over, resharded away) */
        if (n < max) {
            const pt_breaker *b =
                cluster && i < PT_CLUSTER_MAX_NODES ? &p->node_breakers[i] : &p->breaker;
            pt_router_node_name(p->redis, i, out[n].name, sizeof(out[n].name));
            out[n].breaker_state = (int)b->state;
            out[n].up = ping ? ping_node(p, i) : b->state != 1;
            /* Either of its connections: the blocking one, the loop's. */
            out[n].module = pt_router_node_module(p->redis, i) ||
                            (p->aconn != NULL && pt_aconn_uses_module(p->aconn)) ||
                            (p->acluster != NULL && pt_acluster_node_module(p->acluster, i));
        }
        n++;
    }
    pthread_mutex_unlock(&p->mu);
    return n;
}
