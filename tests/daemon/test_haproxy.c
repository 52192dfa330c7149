/* test_haproxy.c — Debian's HAProxy (2.6) asking porteirod over SPOP, with
 * examples/haproxy/ as written (only its ports, its limit and the Redis
 * address moved), on loopback ports of the test's own:
 *   - two HAProxy instances in front of one porteirod and one Redis: 40
 *     concurrent requests of one key on a limit of 5 let exactly 5 through;
 *     beside them two HAProxy instances limiting with a stick table shared
 *     through peers, and what they admit (printed: docs/haproxy.md);
 *   - Redis killed and restarted: nothing admitted beyond what on_error
 *     (closed here) says, then exact again;
 *   - porteirod killed and restarted: HAProxy's set-on-error path (the
 *     example fails open), then exact again;
 *   - HAProxy reloaded (-sf) with 40 requests written and not yet answered:
 *     all answered, decided, exact; the new process decides as the old;
 *   - envoy-style descriptors (domain, dN.KEY), and a policy's tiers,
 *     overrides and shadow mode, from a raw socket;
 *   - from a raw socket: malformed frames answered with AGENT-DISCONNECT and
 *     their status code, porteirod alive after; pipelined NOTIFY frames each
 *     acknowledged once, within the negotiated max-frame-size; a health
 *     check's HELLO answered, then closed; 1000 connections at once, each
 *     with its HELLO and a NOTIFY of one key: all answered, 5 allowed;
 *     ACKs out of order on one connection (a leased key's answered while
 *     earlier checks wait on a frozen Redis);
 *   - through a third HAProxy (the probe: the example's files, policy and
 *     cost read from headers, every variable copied to a response header,
 *     and a second frontend with docs/haproxy.md's fail-closed lines): the
 *     variables' values at cost 2, a leased policy (few Redis calls) and
 *     its top keys on the admin listener; porteirod stopped past timeout
 *     processing (fail open, and 503 fail closed);
 *   - with requests in flight: Redis killed (closed, open, local: each as
 *     on_error says, all answered), porteirod killed (all answered, fail
 *     open or 503 as configured), then exact again.
 * PT_HAPROXY_ONLY=PATTERN runs only the matching tests.
 * Exit 77 (skipped) without haproxy. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/time.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "http_client.h"
#include "redis_server.h"
#include "spop_client.h"

#define LIMIT 5
#define BURST 40

typedef struct hap {
    pid_t pid;
    int front;
    int front2; /* the probe's fail-closed frontend (0: none) */
    char dir[64];
} hap;

static test_redis redis;
static test_daemon pd;
static char pd_yaml[8192];
static int spoe_port;
static hap spoe_haps[2], stick_haps[2];
/* A third HAProxy on the example's files, its message reading the policy
 * and the cost from headers (X-Policy, X-Cost), every variable copied to a
 * response header, timeout processing 1s, and a second frontend with the
 * two fail-closed lines of docs/haproxy.md. */
static hap probe;
static int admin_port; /* porteirod's admin listener (/v1/top) */
static int run_id;     /* keys of this run are its own */

/* ---- processes --------------------------------------------------------------- */

static pid_t started[8];

static void kill_haproxies(void) {
    for (size_t i = 0; i < sizeof(started) / sizeof(started[0]); i++)
        if (started[i] > 0) {
            kill(started[i], SIGKILL);
            waitpid(started[i], NULL, 0);
            started[i] = 0;
        }
}

static void remember(pid_t pid) {
    static bool hooked;
    if (!hooked) {
        atexit(kill_haproxies);
        hooked = true;
    }
    for (size_t i = 0; i < sizeof(started) / sizeof(started[0]); i++)
        if (started[i] == 0) {
            started[i] = pid;
            return;
        }
}

static bool accepts(int port) {
    struct sockaddr_in a = {.sin_family = AF_INET,
                            .sin_port = htons((uint16_t)port),
                            .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    bool ok = fd >= 0 && connect(fd, (struct sockaddr *)&a, sizeof(a)) == 0;
    if (fd >= 0)
        close(fd);
    return ok;
}

/* text with each "from" replaced by "to" (in place, within cap). */
static void replace_all(char *text, size_t cap, const char *from, const char *to) {
    char *out = malloc(cap);
    assert_non_null(out);
    size_t n = 0, flen = strlen(from), tlen = strlen(to);
    for (const char *p = text; *p != '\0';) {
        if (strncmp(p, from, flen) == 0) {
            assert_true(n + tlen < cap);
            memcpy(out + n, to, tlen);
            n += tlen;
            p += flen;
        } else {
            assert_true(n + 1 < cap);
            out[n++] = *p++;
        }
    }
    out[n] = '\0';
    memcpy(text, out, n + 1);
    free(out);
}

static void replace_port(char *text, size_t cap, int from, int to) {
    char f[32], t[32];
    snprintf(f, sizeof(f), "127.0.0.1:%d", from);
    snprintf(t, sizeof(t), "127.0.0.1:%d", to);
    replace_all(text, cap, f, t);
}

static void read_example(const char *name, char *out, size_t cap) {
    char path[512];
    snprintf(path, sizeof(path), "%s/examples/haproxy/%s", getenv("PORTEIRO_SOURCE_DIR"), name);
    FILE *f = fopen(path, "r");
    assert_non_null(f);
    size_t n = fread(out, 1, cap - 1, f);
    fclose(f);
    out[n] = '\0';
}

static void write_file(const char *dir, const char *name, const char *text) {
    char path[256];
    snprintf(path, sizeof(path), "%s/%s", dir, name);
    FILE *f = fopen(path, "w");
    assert_non_null(f);
    fputs(text, f);
    fclose(f);
}

/* Starts haproxy -db on cfg (written into h->dir), as peer local_name
 * (NULL: none), and waits until its front port accepts. */
static int hap_start(hap *h, const char *cfg, const char *local_name) {
    char log[128];
    snprintf(log, sizeof(log), "%s/haproxy.log", h->dir);
    write_file(h->dir, "haproxy.cfg", cfg);
    h->pid = fork();
    if (h->pid == 0) {
        int fd = open(log, O_WRONLY | O_CREAT | O_TRUNC, 0600);
        dup2(fd, STDERR_FILENO);
        dup2(fd, STDOUT_FILENO);
        if (chdir(h->dir) != 0)
            _exit(126);
        if (local_name != NULL)
            execlp("haproxy", "haproxy", "-db", "-f", "haproxy.cfg", "-L", local_name,
                   (char *)NULL);
        else
            execlp("haproxy", "haproxy", "-db", "-f", "haproxy.cfg", (char *)NULL);
        _exit(127);
    }
    remember(h->pid);
    for (int i = 0; i < 500; i++) {
        if (accepts(h->front))
            return 0;
        if (waitpid(h->pid, NULL, WNOHANG) == h->pid)
            break;
        test_sleep_ms(10);
    }
    char text[4096] = "";
    FILE *f = fopen(log, "r");
    if (f != NULL) {
        text[fread(text, 1, sizeof(text) - 1, f)] = '\0';
        fclose(f);
    }
    print_error("haproxy did not start: %s\n", text);
    return -1;
}

/* ---- HTTP, many requests at once ---------------------------------------------- */

typedef struct tally {
    int ok, denied, other;
    int unavailable;    /* of other: 503 (the fail-closed lines) */
    int unanswered;     /* of other: no status within the deadline (a stuck stream) */
    int agent_errors;   /* answers marked X-Agent-Error (set-on-error) */
    int agent_timeouts; /* of those: X-Agent-Error: 1 (timeout processing) */
    int fallbacks;      /* answers marked X-Fallback (decided without Redis) */
    int ok_fallbacks;   /* of ok: marked X-Fallback (admitted without Redis) */
    int64_t ms;         /* from the last request written to the last answer */
    bool retry_after_on_429, ratelimit_on_429, policy_on_200;
} tally;

/* X-Policy of every burst: the probe HAProxy's message reads it (the
 * example's two send policy api whatever it says). */
static const char *burst_policy = "api";

static bool has_header(const char *head, const char *name, const char *value) {
    char want[256];
    snprintf(want, sizeof(want), "\r\n%s: %s", name, value != NULL ? value : "");
    for (const char *p = head; (p = strstr(p, "\r\n")) != NULL; p += 2)
        if (strncasecmp(p, want, strlen(want)) == 0)
            return true;
    return false;
}

/* n requests of key at once, round robin over ports (each its own
 * connection, all written before any is read), tallied per port in
 * each[nports]; between (may be NULL) runs after they are written, before
 * the answers are read. A request without a status within 15 s is
 * unanswered. */
static void burst_each(const int *ports, int nports, int n, const char *key, tally *each,
                       void (*between)(void)) {
    int fds[BURST * 2];
    char bufs[BURST * 2][2048];
    size_t lens[BURST * 2] = {0};
    assert_true(n <= BURST * 2);
    memset(each, 0, sizeof(*each) * (size_t)nports);
    for (int i = 0; i < n; i++) {
        struct sockaddr_in a = {.sin_family = AF_INET,
                                .sin_port = htons((uint16_t)ports[i % nports]),
                                .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
        fds[i] = socket(AF_INET, SOCK_STREAM, 0);
        assert_true(fds[i] >= 0);
        assert_int_equal(connect(fds[i], (struct sockaddr *)&a, sizeof(a)), 0);
    }
    char req[384];
    int len = snprintf(req, sizeof(req),
                       "GET / HTTP/1.1\r\nHost: x\r\nX-Api-Key: %s\r\nX-Policy: %s\r\n"
                       "Connection: close\r\n\r\n",
                       key, burst_policy);
    for (int i = 0; i < n; i++)
        assert_int_equal(send(fds[i], req, (size_t)len, MSG_NOSIGNAL), len);
    int64_t written = test_mono_ms(), last = written;
    if (between != NULL)
        between();
    int open_fds = n;
    int64_t deadline = test_mono_ms() + 15000;
    while (open_fds > 0 && test_mono_ms() < deadline) {
        struct pollfd pfd[BURST * 2];
        int map[BURST * 2], np = 0;
        for (int i = 0; i < n; i++)
            if (fds[i] >= 0) {
                pfd[np] = (struct pollfd){.fd = fds[i], .events = POLLIN};
                map[np++] = i;
            }
        if (poll(pfd, (nfds_t)np, 500) <= 0)
            continue;
        for (int k = 0; k < np; k++) {
            if (!(pfd[k].revents & (POLLIN | POLLHUP | POLLERR)))
                continue;
            int i = map[k];
            ssize_t r = recv(fds[i], bufs[i] + lens[i], sizeof(bufs[i]) - 1 - lens[i], 0);
            if (r > 0) {
                lens[i] += (size_t)r;
                continue;
            }
            close(fds[i]);
            fds[i] = -1;
            open_fds--;
            last = test_mono_ms();
        }
    }
    for (int i = 0; i < n; i++) {
        tally *t = &each[i % nports];
        if (fds[i] >= 0)
            close(fds[i]);
        bufs[i][lens[i]] = '\0';
        int status = 0;
        sscanf(bufs[i], "HTTP/1.%*d %d", &status);
        const char *head = bufs[i];
        bool fallback = has_header(head, "X-Fallback", NULL);
        if (status == 200) {
            t->ok++;
            t->ok_fallbacks += fallback;
            t->policy_on_200 = t->policy_on_200 || has_header(head, "RateLimit-Policy", NULL);
        } else if (status == 429) {
            t->denied++;
            t->retry_after_on_429 = t->retry_after_on_429 || has_header(head, "Retry-After", NULL);
            t->ratelimit_on_429 = t->ratelimit_on_429 || has_header(head, "RateLimit", NULL);
        } else {
            t->other++;
            t->unavailable += status == 503;
            t->unanswered += status == 0;
        }
        t->agent_errors += has_header(head, "X-Agent-Error", NULL);
        t->agent_timeouts += has_header(head, "X-Agent-Error", "1\r\n");
        t->fallbacks += fallback;
        t->ms = last - written;
    }
}

/* burst_each, the ports' tallies summed into t. */
static void burst_with(const int *ports, int nports, int n, const char *key, tally *t,
                       void (*between)(void)) {
    tally each[8];
    assert_true(nports <= 8);
    burst_each(ports, nports, n, key, each, between);
    memset(t, 0, sizeof(*t));
    for (int p = 0; p < nports; p++) {
        t->ok += each[p].ok;
        t->denied += each[p].denied;
        t->other += each[p].other;
        t->unavailable += each[p].unavailable;
        t->unanswered += each[p].unanswered;
        t->agent_errors += each[p].agent_errors;
        t->agent_timeouts += each[p].agent_timeouts;
        t->fallbacks += each[p].fallbacks;
        t->ok_fallbacks += each[p].ok_fallbacks;
        t->ms = each[p].ms > t->ms ? each[p].ms : t->ms;
        t->retry_after_on_429 = t->retry_after_on_429 || each[p].retry_after_on_429;
        t->ratelimit_on_429 = t->ratelimit_on_429 || each[p].ratelimit_on_429;
        t->policy_on_200 = t->policy_on_200 || each[p].policy_on_200;
    }
}

static void burst(const int *ports, int nports, int n, const char *key, tally *t) {
    burst_with(ports, nports, n, key, t, NULL);
}

static void fresh_key(char *key, size_t cap, const char *what) {
    static int n;
    snprintf(key, cap, "%s-%d-%d", what, run_id, ++n);
}

/* ---- setup ------------------------------------------------------------------------- */

/* porteirod from examples/haproxy/porteirod.yaml: this Redis, a limit of 5
 * per hour, on_error closed (what the Redis test checks), and a Redis time
 * budget a loaded test machine meets (50 ms is missed there now and then,
 * and the check becomes on_error's). */
/* Room for thousand_connections beside HAProxy's own connections. */
static const char *const pd_args[] = {"--max-connections", "4096", NULL};

static void start_porteirod(void) {
    test_daemon_must_start(&pd, pd_yaml, pd_args);
}

static void make_porteirod_yaml(void) {
    char spoe[32];
    read_example("porteirod.yaml", pd_yaml, sizeof(pd_yaml));
    replace_all(pd_yaml, sizeof(pd_yaml), "127.0.0.1:8080", "127.0.0.1:%PORT%");
    snprintf(spoe, sizeof(spoe), "127.0.0.1:%d", spoe_port);
    replace_all(pd_yaml, sizeof(pd_yaml), "127.0.0.1:12345", spoe);
    replace_all(pd_yaml, sizeof(pd_yaml), "redis://127.0.0.1:6379", redis.url);
    replace_all(pd_yaml, sizeof(pd_yaml), "gcra 100/1m burst 20", "fixed_window 5/366d");
    replace_all(pd_yaml, sizeof(pd_yaml), "on_error: open", "on_error: closed");
    replace_all(pd_yaml, sizeof(pd_yaml), "timeout_ms: 50", "timeout_ms: 2000");
    /* The test's own: a policy with a quota lease (for the lease, top keys
     * and out-of-order ACKs), the api limit with on_error open and local
     * (Redis killed under load), and the admin listener (/v1/top). */
    size_t n = strlen(pd_yaml);
    snprintf(pd_yaml + n, sizeof(pd_yaml) - n,
             "  leased:\n"
             "    limits: [fixed_window 1000/366d]\n"
             "    lease: {max_ms: 60000, max_units: 100}\n"
             "  api_open:\n"
             "    on_error: open\n"
             "    limits: [fixed_window %d/366d]\n"
             "  api_local:\n"
             "    on_error: local\n"
             "    limits: [fixed_window %d/366d]\n"
             "admin:\n"
             "  listen: 127.0.0.1:%d\n",
             LIMIT, LIMIT, admin_port);
}

/* replace_all of a text that must be there (the example and the test
 * cannot drift apart silently). */
static void must_replace(char *text, size_t cap, const char *from, const char *to) {
    if (strstr(text, from) == NULL)
        print_error("'%s' is not in the example any more\n", from);
    assert_non_null(strstr(text, from));
    replace_all(text, cap, from, to);
}

/* examples/haproxy/haproxy.cfg and spoe.conf, ports moved, plus two
 * headers that show the test what happened: X-Agent-Error (set-on-error)
 * and X-Fallback (porteirod decided without Redis). */
static int start_spoe_hap(hap *h) {
    h->front2 = 0;
    char cfg[16384], spoe_conf[8192], spoe_path[128];
    int app = test_free_port();
    h->front = test_free_port();
    snprintf(h->dir, sizeof(h->dir), "/tmp/porteiro-haproxy-XXXXXX");
    assert_non_null(mkdtemp(h->dir));
    read_example("spoe.conf", spoe_conf, sizeof(spoe_conf));
    /* a loaded test machine: no timeout that a slow pass of the loop meets */
    replace_all(spoe_conf, sizeof(spoe_conf), "timeout processing 500ms", "timeout processing 5s");
    write_file(h->dir, "spoe.conf", spoe_conf);
    read_example("haproxy.cfg", cfg, sizeof(cfg));
    replace_port(cfg, sizeof(cfg), 8000, h->front);
    replace_port(cfg, sizeof(cfg), 8001, app);
    replace_port(cfg, sizeof(cfg), 12345, spoe_port);
    snprintf(spoe_path, sizeof(spoe_path), "config %s/spoe.conf", h->dir);
    replace_all(cfg, sizeof(cfg), "config spoe.conf", spoe_path);
    replace_all(cfg, sizeof(cfg), "    default_backend app\n",
                "    http-after-response set-header X-Agent-Error %[var(txn.porteiro.agent_error)] "
                "if { var(txn.porteiro.agent_error) -m found }\n"
                "    http-after-response set-header X-Fallback %[var(txn.porteiro.fallback)] "
                "if { var(txn.porteiro.fallback) -m found }\n"
                "    default_backend app\n");
    return hap_start(h, cfg, NULL);
}

/* The lines of docs/haproxy.md that make HAProxy fail closed (those that
 * begin with "http-request deny deny_status 503"), each indented, into out. */
static void fail_closed_lines(char *out, size_t cap) {
    char path[512], line[1024];
    snprintf(path, sizeof(path), "%s/docs/haproxy.md", getenv("PORTEIRO_SOURCE_DIR"));
    FILE *f = fopen(path, "r");
    assert_non_null(f);
    int found = 0;
    out[0] = '\0';
    while (fgets(line, sizeof(line), f) != NULL)
        if (strncmp(line, "http-request deny deny_status 503 ", 34) == 0) {
            assert_true(strlen(out) + 4 + strlen(line) < cap);
            strcat(out, "    ");
            strcat(out, line);
            found++;
        }
    fclose(f);
    assert_int_equal(found, 2);
}

static const char probe_headers[] =
    "    http-after-response set-header X-Agent-Error %[var(txn.porteiro.agent_error)] "
    "if { var(txn.porteiro.agent_error) -m found }\n"
    "    http-after-response set-header X-Fallback %[var(txn.porteiro.fallback)] "
    "if { var(txn.porteiro.fallback) -m found }\n"
    "    http-after-response set-header X-Allowed %[var(txn.porteiro.allowed)] "
    "if { var(txn.porteiro.allowed) -m found }\n"
    "    http-after-response set-header X-Remaining %[var(txn.porteiro.remaining)] "
    "if { var(txn.porteiro.remaining) -m found }\n"
    "    http-after-response set-header X-Limit %[var(txn.porteiro.limit)] "
    "if { var(txn.porteiro.limit) -m found }\n"
    "    http-after-response set-header X-Reset-Ms %[var(txn.porteiro.reset_ms)] "
    "if { var(txn.porteiro.reset_ms) -m found }\n"
    "    http-after-response set-header X-Retry-After-Ms %[var(txn.porteiro.retry_after_ms)] "
    "if { var(txn.porteiro.retry_after_ms) -m found }\n"
    "    http-after-response set-header X-Error %[var(txn.porteiro.error)] "
    "if { var(txn.porteiro.error) -m found }\n"
    "    default_backend app\n";

static int start_probe_hap(hap *h) {
    char cfg[32768], spoe_conf[8192], spoe_path[128], closed[1024], www[16384];
    int app = test_free_port();
    h->front = test_free_port();
    h->front2 = test_free_port();
    snprintf(h->dir, sizeof(h->dir), "/tmp/porteiro-haproxy-XXXXXX");
    assert_non_null(mkdtemp(h->dir));
    read_example("spoe.conf", spoe_conf, sizeof(spoe_conf));
    must_replace(spoe_conf, sizeof(spoe_conf), "timeout processing 500ms", "timeout processing 1s");
    must_replace(spoe_conf, sizeof(spoe_conf),
                 "args policy=str(api) key=req.hdr(x-api-key) cost=int(1)",
                 "args policy=req.hdr(x-policy) key=req.hdr(x-api-key) cost=req.hdr(x-cost)");
    write_file(h->dir, "spoe.conf", spoe_conf);
    read_example("haproxy.cfg", cfg, sizeof(cfg));
    replace_port(cfg, sizeof(cfg), 8001, app);
    replace_port(cfg, sizeof(cfg), 12345, spoe_port);
    snprintf(spoe_path, sizeof(spoe_path), "config %s/spoe.conf", h->dir);
    must_replace(cfg, sizeof(cfg), "config spoe.conf", spoe_path);
    must_replace(cfg, sizeof(cfg), "    default_backend app\n", probe_headers);
    /* The frontend again, named www_closed, with docs/haproxy.md's two
     * fail-closed lines before its deny 429. */
    const char *from = strstr(cfg, "frontend www\n");
    assert_non_null(from);
    const char *to = strstr(from, "    default_backend app\n");
    assert_non_null(to);
    to += strlen("    default_backend app\n");
    snprintf(www, sizeof(www), "%.*s", (int)(to - from), from);
    fail_closed_lines(closed, sizeof(closed));
    strncat(closed, "    http-request deny deny_status 429", sizeof(closed) - strlen(closed) - 1);
    must_replace(www, sizeof(www), "    http-request deny deny_status 429", closed);
    must_replace(www, sizeof(www), "frontend www\n", "frontend www_closed\n");
    replace_port(www, sizeof(www), 8000, h->front2);
    replace_port(cfg, sizeof(cfg), 8000, h->front);
    strncat(cfg, "\n", sizeof(cfg) - strlen(cfg) - 1);
    assert_true(strlen(cfg) + strlen(www) + 1 < sizeof(cfg));
    strcat(cfg, www);
    return hap_start(h, cfg, NULL);
}

/* The same limit with HAProxy's own tools: a stick table counting requests
 * per key, shared by the two instances through peers. */
static int start_stick_hap(hap *h, const char *name, int port_a, int port_b) {
    char cfg[4096];
    h->front = test_free_port();
    snprintf(h->dir, sizeof(h->dir), "/tmp/porteiro-haproxy-XXXXXX");
    assert_non_null(mkdtemp(h->dir));
    snprintf(
        cfg, sizeof(cfg),
        "global\n    nbthread 1\n"
        "defaults\n    mode http\n    timeout connect 1s\n    timeout client 5s\n"
        "    timeout server 5s\n"
        "peers mesh\n    peer hapA 127.0.0.1:%d\n    peer hapB 127.0.0.1:%d\n"
        "frontend www\n    bind 127.0.0.1:%d\n"
        "    stick-table type string len 64 size 100k expire 1h store http_req_cnt peers mesh\n"
        "    http-request track-sc0 req.hdr(x-api-key)\n"
        "    http-request deny deny_status 429 if { sc_http_req_cnt(0) gt %d }\n"
        "    http-request return status 200 content-type text/plain string \"hello\\n\"\n",
        port_a, port_b, h->front, LIMIT);
    return hap_start(h, cfg, name);
}

static int wait_until_decided(void);

static int setup(void **state) {
    (void)state;
    run_id = (int)getpid();
    if (test_redis_start(&redis, NULL) != 0)
        return -1;
    spoe_port = test_free_port();
    admin_port = test_free_port();
    make_porteirod_yaml();
    if (test_daemon_start(&pd, pd_yaml, pd_args) != 0)
        return -1;
    for (int i = 0; i < 2; i++)
        if (start_spoe_hap(&spoe_haps[i]) != 0)
            return -1;
    if (start_probe_hap(&probe) != 0)
        return -1;
    int pa = test_free_port(), pb = test_free_port();
    if (start_stick_hap(&stick_haps[0], "hapA", pa, pb) != 0 ||
        start_stick_hap(&stick_haps[1], "hapB", pa, pb) != 0)
        return -1;
    return wait_until_decided();
}

static int teardown(void **state) {
    (void)state;
    kill_haproxies();
    test_daemon_stop(&pd);
    test_redis_stop(&redis);
    char cmd[512];
    for (int i = 0; i < 2; i++) {
        snprintf(cmd, sizeof(cmd), "rm -rf %s %s %s", spoe_haps[i].dir, stick_haps[i].dir,
                 i == 0 ? probe.dir : "");
        if (system(cmd) != 0)
            print_error("cannot remove %s\n", spoe_haps[i].dir);
    }
    return 0;
}

static const int *spoe_fronts(void) {
    static int ports[2];
    ports[0] = spoe_haps[0].front;
    ports[1] = spoe_haps[1].front;
    return ports;
}

/* Sends requests of a probe key through each HAProxy until porteirod
 * decides one with Redis (no set-on-error, no fallback), up to 10 s: after
 * a restart HAProxy's health check must see porteirod up again, and
 * porteirod must reach Redis. */
static int wait_until_decided(void) {
    int fronts[4] = {spoe_haps[0].front, spoe_haps[1].front, probe.front, probe.front2};
    for (int h = 0; h < 4; h++) {
        int i = 0;
        for (; i < 200; i++) {
            char key[64];
            tally t;
            fresh_key(key, sizeof(key), "probe");
            burst(&fronts[h], 1, 1, key, &t);
            if (t.ok == 1 && t.agent_errors == 0 && t.fallbacks == 0)
                break;
            test_sleep_ms(50);
        }
        if (i == 200) {
            print_error("HAProxy %d: porteirod did not decide with Redis within 10 s\n", h);
            return -1;
        }
    }
    return 0;
}

/* ---- through HAProxy ----------------------------------------------------------- */

static void exactly_the_limit_through_two_haproxies(void **state) {
    (void)state;
    for (int round = 0; round < 3; round++) {
        char key[64];
        tally t;
        fresh_key(key, sizeof(key), "hot");
        burst(spoe_fronts(), 2, BURST, key, &t);
        print_message("SPOE -> porteirod -> Redis, 2 HAProxy: %d of %d admitted (limit %d)\n", t.ok,
                      BURST, LIMIT);
        assert_int_equal(t.agent_errors, 0);
        assert_int_equal(t.fallbacks, 0);
        assert_int_equal(t.other, 0);
        assert_int_equal(t.ok, LIMIT);
        assert_int_equal(t.denied, BURST - LIMIT);
        assert_true(t.retry_after_on_429);
        assert_true(t.ratelimit_on_429);
        assert_true(t.policy_on_200);
    }
}

static void stick_tables_with_peers_for_comparison(void **state) {
    (void)state;
    int ports[2] = {stick_haps[0].front, stick_haps[1].front};
    test_sleep_ms(300); /* the peers connect to each other */
    int total = 0;
    for (int round = 0; round < 3; round++) {
        char key[64];
        tally t;
        fresh_key(key, sizeof(key), "stick");
        burst(ports, 2, BURST, key, &t);
        print_message("stick table + peers, 2 HAProxy: %d of %d admitted (limit %d)\n", t.ok, BURST,
                      LIMIT);
        assert_int_equal(t.other, 0);
        assert_true(t.ok >= LIMIT); /* each admits what it counted itself */
        total += t.ok;
    }
    print_message("stick table + peers: %d admitted over 3 rounds, SPOE: %d\n", total, 3 * LIMIT);
}

static void redis_killed_and_restarted(void **state) {
    (void)state;
    char key[64];
    tally t;
    test_redis_kill9(&redis);
    fresh_key(key, sizeof(key), "down");
    burst(spoe_fronts(), 2, 10, key, &t);
    /* on_error: closed: every one denied, decided without Redis. */
    assert_int_equal(t.ok, 0);
    assert_int_equal(t.denied, 10);
    assert_int_equal(t.fallbacks, 10);
    assert_int_equal(t.agent_errors, 0);
    assert_int_equal(test_redis_restart(&redis), 0);
    assert_int_equal(wait_until_decided(), 0);
    fresh_key(key, sizeof(key), "back");
    burst(spoe_fronts(), 2, 20, key, &t);
    assert_int_equal(t.ok, LIMIT);
    assert_int_equal(t.denied, 20 - LIMIT);
    assert_int_equal(t.fallbacks, 0);
}

static void porteirod_killed_and_restarted(void **state) {
    (void)state;
    char key[64];
    tally t;
    pid_t old = pd.pid;
    test_daemon_stop(&pd); /* SIGKILL */
    assert_int_not_equal(kill(old, 0), 0);
    fresh_key(key, sizeof(key), "agentless");
    burst(spoe_fronts(), 2, 10, key, &t);
    /* HAProxy's set-on-error path: the example lets them through, marked. */
    assert_int_equal(t.agent_errors, 10);
    assert_int_equal(t.ok, 10);
    start_porteirod();
    assert_int_equal(wait_until_decided(), 0);
    fresh_key(key, sizeof(key), "agent-back");
    burst(spoe_fronts(), 2, 20, key, &t);
    assert_int_equal(t.agent_errors, 0);
    assert_int_equal(t.ok, LIMIT);
}

/* ---- the variables' values, through the probe HAProxy ------------------------- */

typedef struct answer {
    int status;
    long long allowed, remaining, limit, reset_ms, retry_after_ms, retry_after; /* -1: absent */
    char ratelimit[128], policy[128], fallback[16], error[128];
} answer;

static long long header_int(const http_response *r, const char *name) {
    char buf[64];
    return http_header(r, name, buf, sizeof(buf)) != NULL ? atoll(buf) : -1;
}

/* One request through the probe HAProxy's fail-open frontend; the
 * variables porteirod set, read from the response headers. */
static void probe_ask(const char *policy, const char *key, int cost, answer *a) {
    char headers[512];
    static http_response r;
    snprintf(headers, sizeof(headers), "X-Policy: %s\r\nX-Api-Key: %s\r\nX-Cost: %d\r\n", policy,
             key, cost);
    assert_int_equal(http_request(probe.front, "GET", "/", headers, NULL, &r), 0);
    a->status = r.status;
    a->allowed = header_int(&r, "X-Allowed");
    a->remaining = header_int(&r, "X-Remaining");
    a->limit = header_int(&r, "X-Limit");
    a->reset_ms = header_int(&r, "X-Reset-Ms");
    a->retry_after_ms = header_int(&r, "X-Retry-After-Ms");
    a->retry_after = header_int(&r, "Retry-After");
    if (http_header(&r, "RateLimit", a->ratelimit, sizeof(a->ratelimit)) == NULL)
        a->ratelimit[0] = '\0';
    if (http_header(&r, "RateLimit-Policy", a->policy, sizeof(a->policy)) == NULL)
        a->policy[0] = '\0';
    if (http_header(&r, "X-Fallback", a->fallback, sizeof(a->fallback)) == NULL)
        a->fallback[0] = '\0';
    if (http_header(&r, "X-Error", a->error, sizeof(a->error)) == NULL)
        a->error[0] = '\0';
    assert_int_equal(header_int(&r, "X-Agent-Error"), -1);
}

/* The RateLimit value porteirod should send: "api";r=R;t=T, T the reset
 * in seconds, rounded up. */
static void assert_ratelimit(const answer *a, long long remaining) {
    char want[128];
    snprintf(want, sizeof(want), "\"api\";r=%lld;t=%lld", remaining, (a->reset_ms + 999) / 1000);
    if (strcmp(a->ratelimit, want) != 0)
        print_error("RateLimit '%s', expected '%s'\n", a->ratelimit, want);
    assert_string_equal(a->ratelimit, want);
}

/* Policy api (fixed_window 5/366d) at cost 2 through HAProxy: 5 → 3 → 1,
 * the third (2 > 1 left) denied with its retry, then cost 1 takes the
 * last unit. Each variable's value, and the RateLimit header values. */
static void ack_values_through_haproxy(void **state) {
    (void)state;
    const long long window_ms = 366LL * 24 * 3600 * 1000;
    char key[64];
    answer a[4];
    fresh_key(key, sizeof(key), "values");
    for (int i = 0; i < 3; i++)
        probe_ask("api", key, 2, &a[i]);
    probe_ask("api", key, 1, &a[3]);
    print_message(
        "cost 2: allowed %lld remaining %lld limit %lld reset_ms %lld retry_after_ms %lld "
        "RateLimit %s RateLimit-Policy %s\n",
        a[0].allowed, a[0].remaining, a[0].limit, a[0].reset_ms, a[0].retry_after_ms,
        a[0].ratelimit, a[0].policy);
    long long remaining[4] = {3, 1, 1, 0};
    for (int i = 0; i < 4; i++) {
        bool denied = i == 2;
        assert_int_equal(a[i].status, denied ? 429 : 200);
        assert_int_equal(a[i].allowed, denied ? 0 : 1);
        assert_int_equal(a[i].remaining, remaining[i]);
        assert_int_equal(a[i].limit, LIMIT);
        assert_true(a[i].reset_ms > 0 && a[i].reset_ms <= window_ms);
        /* one window: the reset only comes nearer */
        assert_true(i == 0 || (a[i].reset_ms <= a[i - 1].reset_ms &&
                               a[i].reset_ms > a[i - 1].reset_ms - 5000));
        assert_string_equal(a[i].policy, "\"api\";q=5;w=31622400");
        assert_ratelimit(&a[i], remaining[i]);
        assert_string_equal(a[i].fallback, "");
        assert_string_equal(a[i].error, "");
        if (denied) { /* fixed window: a retry passes when the window ends */
            assert_int_equal(a[i].retry_after_ms, a[i].reset_ms);
            assert_int_equal(a[i].retry_after, (a[i].retry_after_ms + 999) / 1000);
        } else {
            assert_int_equal(a[i].retry_after_ms, 0);
            assert_int_equal(a[i].retry_after, -1); /* Retry-After on denials only */
        }
    }
    /* A cost no integer of 0..10^9: denied, with the reason. */
    answer bad;
    char headers[256];
    static http_response r;
    snprintf(headers, sizeof(headers), "X-Policy: api\r\nX-Api-Key: %s-x\r\nX-Cost: -1\r\n", key);
    assert_int_equal(http_request(probe.front, "GET", "/", headers, NULL, &r), 0);
    assert_int_equal(r.status, 429);
    assert_non_null(http_header(&r, "X-Error", bad.error, sizeof(bad.error)));
    assert_non_null(strstr(bad.error, "cost"));
}

/* A policy with a quota lease through HAProxy: Redis is called for a few
 * of the checks only (INFO commandstats), every check answered, the count
 * exact; and the key is in porteirod's top keys (/v1/top on the admin
 * listener) under the policy, with every unit. */
static void lease_and_top_through_spoe(void **state) {
    (void)state;
    enum { CHECKS = 60 };
    char key[64], target[128];
    answer a;
    fresh_key(key, sizeof(key), "leased");
    long long before = test_redis_decision_calls(&redis);
    for (int i = 0; i < CHECKS; i++) {
        probe_ask("leased", key, 1, &a);
        assert_int_equal(a.status, 200);
        assert_int_equal(a.remaining, 1000 - 1 - i);
        assert_string_equal(a.fallback, "");
    }
    long long calls = test_redis_decision_calls(&redis) - before;
    print_message("lease through SPOE: %d checks, %lld Redis calls\n", CHECKS, calls);
    assert_true(calls >= 1);
    assert_true(calls <= CHECKS / 4); /* the first 8 cold, then a lease of up to 100 */
    static http_response r;
    snprintf(target, sizeof(target), "/v1/top?policy=leased&outcome=allowed&n=64");
    assert_int_equal(http_request(admin_port, "GET", target, NULL, NULL, &r), 0);
    assert_int_equal(r.status, 200);
    char want[128];
    snprintf(want, sizeof(want), "{\"key\":\"%s\",\"count\":%d,", key, CHECKS);
    if (strstr(r.body, want) == NULL)
        print_error("%s not in %s\n", want, r.body);
    assert_non_null(strstr(r.body, want));
}

/* ---- failures with requests in flight ------------------------------------------- */

/* Run between the writes and the reads of a burst whose checks wait on a
 * frozen Redis: every request has reached porteirod and its check was sent
 * to Redis (hold_until_in_flight), then the kill. */
static void test_redis_kill9_now(void) {
    test_redis_kill9(&redis);
}

/* The bytes waiting unread in the frozen Redis's sockets (its end of
 * established connections on its port, /proc/net/tcp's rx_queue). */
static long redis_unread(void) {
    FILE *f = fopen("/proc/net/tcp", "r");
    char line[512];
    long sum = 0;
    if (f == NULL)
        return -1;
    while (fgets(line, sizeof(line), f) != NULL) {
        unsigned local_port, state;
        unsigned long tx, rx;
        if (sscanf(line, " %*d: %*8x:%4x %*8x:%*4x %2x %8lx:%8lx", &local_port, &state, &tx, &rx) ==
                4 &&
            (int)local_port == redis.port && state == 1)
            sum += (long)rx;
    }
    fclose(f);
    return sum;
}

/* Until the checks of a burst are in flight on the frozen Redis: at least
 * 300 ms, then until its unread bytes have stopped growing for 200 ms (a
 * loaded machine forwards 40 requests slowly), at most 3 s. */
static void hold_until_in_flight(void) {
    int64_t start = test_mono_ms(), still_since = start;
    long last = -1;
    while (test_mono_ms() - start < 3000) {
        long now = redis_unread();
        if (now != last) {
            last = now;
            still_since = test_mono_ms();
        } else if (now > 0 && test_mono_ms() - start >= 300 &&
                   test_mono_ms() - still_since >= 200) {
            return;
        }
        test_sleep_ms(20);
    }
}

static void hold_then_kill_redis(void) {
    hold_until_in_flight();
    test_redis_kill9(&redis);
}

static void hold_then_kill_porteirod(void) {
    hold_until_in_flight();
    test_daemon_stop(&pd); /* SIGKILL */
}

/* A burst through the probe HAProxy's fail-open frontend on policy, its
 * checks in flight on a frozen Redis when Redis is killed; Redis back. */
static void redis_killed_in_flight_probe(const char *policy, tally *t) {
    char key[64];
    int port = probe.front;
    fresh_key(key, sizeof(key), policy);
    burst_policy = policy;
    test_redis_freeze(&redis);
    burst_with(&port, 1, 20, key, t, hold_then_kill_redis);
    burst_policy = "api";
    assert_int_equal(test_redis_restart(&redis), 0);
    assert_int_equal(wait_until_decided(), 0);
}

/* Redis killed with 40 checks waiting on it (frozen first, so that they
 * are in flight when it dies, whatever the machine's speed): every request
 * answered at once, each as its policy's on_error says (closed: denied;
 * open: admitted; local: the limit, counted in porteirod's memory), every
 * one marked; nothing admitted by a closed policy. Then exact again. */
static void redis_killed_under_load(void **state) {
    (void)state;
    char key[64];
    tally t;
    /* on_error: closed, through the example's two HAProxy. */
    fresh_key(key, sizeof(key), "inflight");
    test_redis_freeze(&redis);
    burst_with(spoe_fronts(), 2, BURST, key, &t, hold_then_kill_redis);
    print_message("Redis killed under load, closed: %d ok, %d denied, %d other, %lld ms\n", t.ok,
                  t.denied, t.other, (long long)t.ms);
    assert_int_equal(t.unanswered, 0);
    assert_int_equal(t.other, 0);
    assert_int_equal(t.agent_errors, 0);
    assert_int_equal(t.ok, 0);
    assert_int_equal(t.denied, BURST);
    assert_int_equal(t.fallbacks, BURST);
    assert_true(t.ms < 4000); /* on the connection's loss, not a timeout (5 s) */
    /* Killed without the freeze, as the answers come: whatever was decided
     * before the kill, never more than the limit, never a fallback admitted. */
    assert_int_equal(test_redis_restart(&redis), 0);
    assert_int_equal(wait_until_decided(), 0);
    fresh_key(key, sizeof(key), "inflight-raw");
    burst_with(spoe_fronts(), 2, BURST, key, &t, test_redis_kill9_now);
    assert_int_equal(t.other, 0);
    assert_int_equal(t.agent_errors, 0);
    assert_true(t.ok <= LIMIT);
    assert_int_equal(t.ok_fallbacks, 0);
    assert_int_equal(t.ok + t.denied, BURST);
    assert_int_equal(test_redis_restart(&redis), 0);
    assert_int_equal(wait_until_decided(), 0);
    /* on_error: open: all admitted, each marked open. */
    redis_killed_in_flight_probe("api_open", &t);
    assert_int_equal(t.other, 0);
    assert_int_equal(t.agent_errors, 0);
    assert_int_equal(t.ok, 20);
    assert_int_equal(t.ok_fallbacks, 20);
    /* on_error: local: the limit, decided in porteirod's memory. */
    redis_killed_in_flight_probe("api_local", &t);
    assert_int_equal(t.other, 0);
    assert_int_equal(t.agent_errors, 0);
    assert_int_equal(t.ok, LIMIT);
    assert_int_equal(t.denied, 20 - LIMIT);
    assert_int_equal(t.fallbacks, 20);
    /* Back: exact, decided in Redis. */
    fresh_key(key, sizeof(key), "inflight-back");
    burst(spoe_fronts(), 2, 20, key, &t);
    assert_int_equal(t.ok, LIMIT);
    assert_int_equal(t.denied, 20 - LIMIT);
    assert_int_equal(t.fallbacks, 0);
}

/* porteirod killed with 40 checks in flight (Redis frozen, so that they
 * wait in porteirod when it dies): every request answered, by HAProxy's
 * set-on-error path: the example's frontend lets them through marked
 * (fail open), the frontend with docs/haproxy.md's two fail-closed lines
 * answers 503. Then exact again. */
static void porteirod_killed_under_load(void **state) {
    (void)state;
    char key[64];
    tally each[4];
    int ports[4] = {spoe_haps[0].front, spoe_haps[1].front, probe.front, probe.front2};
    fresh_key(key, sizeof(key), "agent-inflight");
    test_redis_freeze(&redis);
    burst_each(ports, 4, BURST, key, each, hold_then_kill_porteirod);
    test_redis_thaw(&redis);
    for (int p = 0; p < 4; p++) {
        tally *t = &each[p];
        print_message("porteirod killed under load, front %d: %d ok, %d denied, %d 503, %d "
                      "unanswered, %d agent errors, %lld ms\n",
                      p, t->ok, t->denied, t->unavailable, t->unanswered, t->agent_errors,
                      (long long)t->ms);
        assert_int_equal(t->unanswered, 0);
        assert_int_equal(t->agent_errors, BURST / 4);
        assert_int_equal(t->denied, 0);
        if (p < 3) { /* fail open */
            assert_int_equal(t->ok, BURST / 4);
        } else { /* fail closed */
            assert_int_equal(t->unavailable, BURST / 4);
        }
        assert_true(t->ms < 4000);
    }
    /* Down, not yet marked down by HAProxy's health check (fall 3 x inter
     * 1s): each request waits timeout processing (1 s on the probe; the
     * example's two, 5 s here, are left out for time), then the same. */
    fresh_key(key, sizeof(key), "agent-down");
    burst_each(&ports[2], 2, 8, key, each, NULL);
    for (int p = 0; p < 2; p++) {
        assert_int_equal(each[p].unanswered, 0);
        assert_int_equal(each[p].agent_errors, 4);
        assert_int_equal(each[p].agent_timeouts, 4);
        assert_int_equal(p == 0 ? each[p].ok : each[p].unavailable, 4);
        assert_true(each[p].ms < 3000);
    }
    start_porteirod();
    assert_int_equal(wait_until_decided(), 0);
    fresh_key(key, sizeof(key), "agent-inflight-back");
    burst_each(ports, 4, BURST, key, each, NULL);
    int ok = 0;
    for (int p = 0; p < 4; p++) {
        assert_int_equal(each[p].agent_errors, 0);
        assert_int_equal(each[p].other, 0);
        ok += each[p].ok;
    }
    assert_int_equal(ok, LIMIT);
}

/* Whether pid is stopped (state T in /proc/PID/stat). */
static bool stopped(pid_t pid) {
    char path[64], text[256] = "";
    snprintf(path, sizeof(path), "/proc/%d/stat", (int)pid);
    FILE *f = fopen(path, "r");
    if (f == NULL)
        return false;
    text[fread(text, 1, sizeof(text) - 1, f)] = '\0';
    fclose(f);
    const char *end = strrchr(text, ')');
    return end != NULL && end[1] == ' ' && end[2] == 'T';
}

/* porteirod stopped (SIGSTOP) beyond the probe HAProxy's timeout
 * processing (1 s): every request is answered when that timeout ends,
 * with agent_error 1 (a timeout), while porteirod is still stopped: the
 * example's frontend lets it through (fail open), the one with
 * docs/haproxy.md's fail-closed lines answers 503. porteirod continued,
 * decisions are exact again (the late answers were dropped). */
static void slow_agent_fails_as_configured(void **state) {
    (void)state;
    char key[64];
    tally each[2];
    int ports[2] = {probe.front, probe.front2};
    fresh_key(key, sizeof(key), "slow");
    assert_int_equal(kill(pd.pid, SIGSTOP), 0);
    burst_each(ports, 2, 16, key, each, NULL);
    bool still_stopped = stopped(pd.pid); /* answered while it was */
    assert_int_equal(kill(pd.pid, SIGCONT), 0);
    for (int p = 0; p < 2; p++) {
        tally *t = &each[p];
        print_message("porteirod stopped, %s frontend: %d ok, %d 503, %d unanswered, %d agent "
                      "errors (%d timeouts), %lld ms\n",
                      p == 0 ? "fail-open" : "fail-closed", t->ok, t->unavailable, t->unanswered,
                      t->agent_errors, t->agent_timeouts, (long long)t->ms);
        assert_int_equal(t->unanswered, 0);
        assert_int_equal(t->agent_errors, 8);
        assert_int_equal(t->agent_timeouts, 8);
        assert_int_equal(t->denied, 0);
        assert_int_equal(p == 0 ? t->ok : t->unavailable, 8);
        assert_true(t->ms >= 900 && t->ms < 4000); /* timeout processing 1s */
    }
    assert_true(still_stopped);
    assert_int_equal(wait_until_decided(), 0);
    fresh_key(key, sizeof(key), "slow-back");
    burst_each(ports, 2, 16, key, each, NULL);
    assert_int_equal(each[0].ok + each[1].ok, LIMIT);
    assert_int_equal(each[0].agent_errors + each[1].agent_errors, 0);
    assert_int_equal(each[0].other + each[1].other, 0);
}

/* HAProxy's reload: a new process on the same configuration takes the port
 * and tells the old one to finish its streams (-sf), whose SPOE
 * connections then go (HAPROXY-DISCONNECT, or a close). */
static void reload_first_haproxy(void) {
    hap *h = &spoe_haps[0];
    pid_t old = h->pid;
    char pid_text[32];
    snprintf(pid_text, sizeof(pid_text), "%d", (int)old);
    h->pid = fork();
    if (h->pid == 0) {
        char log[128];
        snprintf(log, sizeof(log), "%s/haproxy-reload.log", h->dir);
        int fd = open(log, O_WRONLY | O_CREAT | O_TRUNC, 0600);
        dup2(fd, STDERR_FILENO);
        dup2(fd, STDOUT_FILENO);
        if (chdir(h->dir) != 0)
            _exit(126);
        execlp("haproxy", "haproxy", "-db", "-f", "haproxy.cfg", "-sf", pid_text, (char *)NULL);
        _exit(127);
    }
    remember(h->pid);
    /* The old one finishes what it has and exits. */
    for (int i = 0; i < 500 && waitpid(old, NULL, WNOHANG) != old; i++)
        test_sleep_ms(10);
    for (size_t i = 0; i < sizeof(started) / sizeof(started[0]); i++)
        if (started[i] == old)
            started[i] = 0;
}

static void haproxy_reloaded_under_load(void **state) {
    (void)state;
    char key[64];
    tally t;
    fresh_key(key, sizeof(key), "reload");
    /* 40 requests written to both, then the first one reloads: every
     * request is answered, decided, and the limit holds. */
    burst_with(spoe_fronts(), 2, BURST, key, &t, reload_first_haproxy);
    assert_int_equal(t.other, 0);
    assert_int_equal(t.agent_errors, 0);
    assert_int_equal(t.ok, LIMIT);
    assert_int_equal(t.denied, BURST - LIMIT);
    /* The new process asks porteirod as the old one did. */
    assert_int_equal(wait_until_decided(), 0);
    fresh_key(key, sizeof(key), "reloaded");
    burst(spoe_fronts(), 2, BURST, key, &t);
    assert_int_equal(t.ok, LIMIT);
    assert_int_equal(t.agent_errors, 0);
}

/* ---- raw SPOP --------------------------------------------------------------------- */

/* Sends w on a new connection and expects AGENT-DISCONNECT with status,
 * then the close. */
static void expect_disconnect(const spop_wire *w, int status) {
    int fd = spop_connect(spoe_port);
    spop_wire in = {.n = 0};
    bool closed;
    spop_send(fd, w);
    int n = spop_read_frames(fd, &in, 99, &closed);
    assert_true(closed);
    assert_true(n >= 1);
    pd_spop_frame f;
    spop_frame_at(&in, n - 1, &f);
    assert_int_equal(f.type, PD_SPOP_AGENT_DISCONNECT);
    uint32_t code; /* read as HAProxy reads it: the same KV layout */
    const uint8_t *msg;
    size_t mlen;
    assert_int_equal(pd_spop_disconnect_parse(&f, &code, &msg, &mlen), PD_SPOP_NORMAL);
    assert_int_equal(code, status);
    assert_true(mlen > 0 && mlen <= 255);
    close(fd);
}

static void malformed_frames_are_disconnected(void **state) {
    (void)state;
    char key[64];
    fresh_key(key, sizeof(key), "raw");
    spop_wire w;
    /* A NOTIFY before any HELLO. */
    w.n = 0;
    spop_check_frame(&w, 1, 1, "api", key, strlen(key));
    expect_disconnect(&w, PD_SPOP_INVALID);
    /* HELLO: no 2.x version; no max-frame-size; no versions at all; 100 bytes. */
    w.n = 0;
    spop_hello_frame(&w, "1.0,3.0", 16380, false);
    expect_disconnect(&w, PD_SPOP_BAD_VERSION);
    w.n = 0;
    spop_hello_frame(&w, "2.0", 0, false);
    expect_disconnect(&w, PD_SPOP_NO_FRAME_SIZE);
    w.n = 0;
    spop_hello_frame(&w, NULL, 16380, false);
    expect_disconnect(&w, PD_SPOP_NO_VERSION);
    w.n = 0;
    spop_hello_frame(&w, "2.0", 100, false);
    expect_disconnect(&w, PD_SPOP_BAD_FRAME_SIZE);
    /* After a good HELLO: a frame over the negotiated 300 bytes, a NOTIFY
     * without FIN, a NOTIFY whose arguments are cut, garbage. */
    w.n = 0;
    spop_hello_frame(&w, "2.0", 300, false);
    uint8_t big[4] = {0, 0, 1, 45}; /* 301 */
    spop_put(&w, big, 4);
    expect_disconnect(&w, PD_SPOP_TOO_BIG);
    w.n = 0;
    spop_hello_frame(&w, "2.0", 16380, false);
    spop_notify_frame(&w, 0, 1, 1, "api", key, strlen(key));
    expect_disconnect(&w, PD_SPOP_FRAGMENTED);
    w.n = 0;
    spop_hello_frame(&w, "2.0", 16380, false);
    size_t at = spop_begin_frame(&w, PD_SPOP_NOTIFY, PD_SPOP_FIN, 1, 1);
    spop_put_str(&w, "check");
    spop_put(&w, "\x05", 1); /* 5 arguments announced, 1 sent */
    spop_put_str(&w, "policy");
    spop_put(&w, "\x08", 1);
    spop_put_str(&w, "api");
    spop_end_frame(&w, at);
    expect_disconnect(&w, PD_SPOP_INVALID);
    w.n = 0;
    spop_hello_frame(&w, "2.0", 16380, false);
    spop_put(&w, "\0\0\0\x03\x03\0\0", 7); /* a frame of 3 bytes: no metadata */
    expect_disconnect(&w, PD_SPOP_INVALID);
    /* porteirod is alive and still decides. */
    assert_int_equal(kill(pd.pid, 0), 0);
    tally t;
    burst(spoe_fronts(), 2, 8, key, &t);
    assert_int_equal(t.ok, LIMIT);
    assert_int_equal(t.agent_errors, 0);
}

static void pipelined_notify_frames(void **state) {
    (void)state;
    enum { FRAMES = 60 };
    char key[64];
    fresh_key(key, sizeof(key), "pipe");
    int fd = spop_connect(spoe_port);
    spop_wire w = {.n = 0}, in = {.n = 0};
    bool closed;
    spop_hello_frame(&w, "2.0", 300, false);
    spop_send(fd, &w);
    assert_int_equal(spop_read_frames(fd, &in, 1, &closed), 1);
    pd_spop_frame f;
    spop_frame_at(&in, 0, &f);
    assert_int_equal(f.type, PD_SPOP_AGENT_HELLO);
    /* All the NOTIFY frames in one write, before any ACK is read. */
    in.n = 0;
    w.n = 0;
    for (int i = 0; i < FRAMES; i++)
        spop_check_frame(&w, 1000 + (uint64_t)i, (uint64_t)i % 3 + 1, "api", key, strlen(key));
    spop_send(fd, &w);
    assert_int_equal(spop_read_frames(fd, &in, FRAMES, &closed), FRAMES);
    bool seen[FRAMES] = {false};
    int allowed = 0;
    for (int i = 0; i < FRAMES; i++) {
        size_t len = spop_frame_at(&in, i, &f);
        assert_int_equal(f.type, PD_SPOP_ACK);
        assert_int_equal(f.flags, PD_SPOP_FIN);
        assert_true(len <= 300); /* the negotiated max-frame-size */
        assert_true(f.stream_id >= 1000 && f.stream_id < 1000 + FRAMES);
        int k = (int)(f.stream_id - 1000);
        assert_false(seen[k]);
        seen[k] = true;
        assert_int_equal(f.frame_id, (uint64_t)k % 3 + 1);
        int64_t a = spop_ack_int(&f, "allowed");
        assert_true(a == 0 || a == 1);
        allowed += (int)a;
    }
    assert_int_equal(allowed, LIMIT);
    /* HAProxy's DISCONNECT: answered with status 0, then the close. */
    w.n = 0;
    in.n = 0;
    size_t at = spop_begin_frame(&w, PD_SPOP_HAPROXY_DISCONNECT, PD_SPOP_FIN, 0, 0);
    spop_put_str(&w, "status-code");
    spop_put(&w, "\x03", 1);
    spop_put_varint(&w, 0);
    spop_put_str(&w, "message");
    spop_put(&w, "\x08", 1);
    spop_put_str(&w, "normal");
    spop_end_frame(&w, at);
    spop_send(fd, &w);
    assert_int_equal(spop_read_frames(fd, &in, 2, &closed), 1);
    assert_true(closed);
    spop_frame_at(&in, 0, &f);
    assert_int_equal(f.type, PD_SPOP_AGENT_DISCONNECT);
    close(fd);
}

/* A NOTIFY of message check: policy, key, cost 1. */
static void policy_frame(spop_wire *w, uint64_t sid, uint64_t fid, const char *policy,
                         const char *key) {
    size_t at = spop_begin_frame(w, PD_SPOP_NOTIFY, PD_SPOP_FIN, sid, fid);
    spop_put_str(w, "check");
    spop_put(w, "\x02", 1);
    spop_put_str(w, "policy");
    spop_put(w, "\x08", 1);
    spop_put_str(w, policy);
    spop_put_str(w, "key");
    spop_put(w, "\x08", 1);
    spop_put_str(w, key);
    spop_end_frame(w, at);
}

/* Out of order on one connection: porteirod answers each NOTIFY when its
 * decision completes. With Redis frozen, three checks of policy api (each
 * a Redis call) are pipelined first, then three of a key that holds a
 * quota lease (answered from memory): the three later ones are ACKed
 * first, with their own stream and frame ids, while the earlier ones wait;
 * Redis back, those come, decided by Redis (no fallback). */
static void acks_out_of_order(void **state) {
    (void)state;
    char hot[64], cold[64];
    fresh_key(hot, sizeof(hot), "ooo-leased");
    fresh_key(cold, sizeof(cold), "ooo-api");
    int fd = spop_connect(spoe_port);
    spop_wire w = {.n = 0}, in = {.n = 0};
    bool closed;
    pd_spop_frame f;
    spop_hello_frame(&w, "2.0", 16380, false);
    spop_send(fd, &w);
    assert_int_equal(spop_read_frames(fd, &in, 1, &closed), 1);
    /* The leased key made hot: 20 checks, one at a time (a lease from the 8th). */
    for (int i = 0; i < 20; i++) {
        w.n = in.n = 0;
        policy_frame(&w, 1 + (uint64_t)i, 1, "leased", hot);
        spop_send(fd, &w);
        assert_int_equal(spop_read_frames(fd, &in, 1, &closed), 1);
        spop_frame_at(&in, 0, &f);
        assert_int_equal(spop_ack_int(&f, "allowed"), 1);
    }
    long long before = test_redis_decision_calls(&redis);
    test_redis_freeze(&redis);
    w.n = in.n = 0;
    for (int i = 0; i < 3; i++)
        policy_frame(&w, 100 + (uint64_t)i, 7, "api", cold);
    for (int i = 0; i < 3; i++)
        policy_frame(&w, 200 + (uint64_t)i, 9, "leased", hot);
    spop_send(fd, &w);
    /* First: the leased ones, while the api ones wait on Redis. */
    assert_int_equal(spop_read_frames(fd, &in, 3, &closed), 3);
    bool seen[3] = {false};
    for (int i = 0; i < 3; i++) {
        spop_frame_at(&in, i, &f);
        assert_int_equal(f.type, PD_SPOP_ACK);
        if (f.stream_id < 200 || f.stream_id > 202)
            print_error("ACK %d of the pipelined six: stream %llu (frame %llu) came before the "
                        "leased ones\n",
                        i, (unsigned long long)f.stream_id, (unsigned long long)f.frame_id);
        assert_true(f.stream_id >= 200 && f.stream_id <= 202);
        assert_int_equal(f.frame_id, 9);
        assert_false(seen[f.stream_id - 200]);
        seen[f.stream_id - 200] = true;
        assert_int_equal(spop_ack_int(&f, "allowed"), 1);
        assert_false(spop_ack_has(&f, "fallback"));
    }
    struct pollfd pfd = {.fd = fd, .events = POLLIN};
    assert_int_equal(poll(&pfd, 1, 300), 0); /* the api ones still wait */
    test_redis_thaw(&redis);
    in.n = 0;
    assert_int_equal(spop_read_frames(fd, &in, 3, &closed), 3);
    bool seen_api[3] = {false};
    for (int i = 0; i < 3; i++) {
        spop_frame_at(&in, i, &f);
        assert_int_equal(f.type, PD_SPOP_ACK);
        assert_true(f.stream_id >= 100 && f.stream_id <= 102);
        assert_int_equal(f.frame_id, 7);
        assert_false(seen_api[f.stream_id - 100]);
        seen_api[f.stream_id - 100] = true;
        assert_int_equal(spop_ack_int(&f, "allowed"), 1);
        assert_false(spop_ack_has(&f, "fallback"));
    }
    /* The leased checks called nothing: only the three of api did. */
    long long calls = test_redis_decision_calls(&redis) - before;
    assert_true(calls >= 1 && calls <= 3);
    close(fd);
}

/* 1000 HAProxy-like connections at once, each its HELLO and a NOTIFY of
 * one key in one write: every one answered, the key's limit exact. */
static void thousand_connections(void **state) {
    (void)state;
    enum { CONNS = 1000 };
    static int fds[CONNS];
    char key[64];
    fresh_key(key, sizeof(key), "many");
    spop_wire w = {.n = 0};
    spop_hello_frame(&w, "2.0", 16380, false);
    spop_check_frame(&w, 1, 1, "api", key, strlen(key));
    for (int i = 0; i < CONNS; i++)
        fds[i] = spop_connect(spoe_port);
    for (int i = 0; i < CONNS; i++)
        spop_send(fds[i], &w);
    int allowed = 0;
    for (int i = 0; i < CONNS; i++) {
        spop_wire in = {.n = 0};
        bool closed;
        int got = spop_read_frames(fds[i], &in, 2, &closed);
        if (got != 2)
            print_error("connection %d: %d frames, closed %d, errno %d\n", i, got, closed, errno);
        assert_int_equal(got, 2);
        pd_spop_frame f;
        spop_frame_at(&in, 1, &f);
        assert_int_equal(f.type, PD_SPOP_ACK);
        int64_t a = spop_ack_int(&f, "allowed");
        assert_true(a == 0 || a == 1);
        allowed += (int)a;
        close(fds[i]);
    }
    assert_int_equal(allowed, LIMIT);
}

/* ---- envoy-style descriptors ------------------------------------------------ */

static const char rules[] = "domain: edge\n"
                            "descriptors:\n"
                            "  - key: user\n"
                            "    rate_limit: {unit: minute, requests_per_unit: 3}\n"
                            "  - key: tenant\n"
                            "    value: blocked\n"
                            "    rate_limit: {unit: minute, requests_per_unit: 0}\n"
                            "  - key: remote_address\n"
                            "    rate_limit: {unit: hour, requests_per_unit: 2}\n";

typedef struct arg {
    const char *name;
    const char *value; /* a string, or (ipv4) 4 address bytes */
    bool ipv4;
} arg;

static void descriptors_frame(spop_wire *w, uint64_t sid, const char *domain, const arg *args,
                              int n) {
    size_t at = spop_begin_frame(w, PD_SPOP_NOTIFY, PD_SPOP_FIN, sid, 1);
    spop_put_str(w, "check");
    uint8_t nargs = (uint8_t)(n + (domain != NULL));
    spop_put(w, &nargs, 1);
    if (domain != NULL) {
        spop_put_str(w, "domain");
        spop_put(w, "\x08", 1);
        spop_put_str(w, domain);
    }
    for (int i = 0; i < n; i++) {
        spop_put_str(w, args[i].name);
        if (args[i].ipv4) {
            spop_put(w, "\x06", 1);
            spop_put(w, args[i].value, 4);
        } else {
            spop_put(w, "\x08", 1);
            spop_put_str(w, args[i].value);
        }
    }
    spop_end_frame(w, at);
}

static int64_t shadow_denied; /* the last ask's shadow_denied (-1: unset) */

/* Sends one NOTIFY (after a HELLO) to the agent at port and returns its
 * ACK's allowed (-1: unset); error gets the error variable ("" none). */
static int64_t ask(int port, const char *domain, const arg *args, int n, char *error,
                   size_t errlen) {
    int saved = spoe_port;
    spoe_port = port;
    int fd = spop_connect(spoe_port);
    spoe_port = saved;
    spop_wire w = {.n = 0}, in = {.n = 0};
    bool closed;
    spop_hello_frame(&w, "2.0", 16380, false);
    descriptors_frame(&w, 9, domain, args, n);
    spop_send(fd, &w);
    assert_int_equal(spop_read_frames(fd, &in, 2, &closed), 2);
    close(fd);
    pd_spop_frame f;
    spop_frame_at(&in, 1, &f);
    assert_int_equal(f.type, PD_SPOP_ACK);
    error[0] = '\0';
    pd_spop_reader r = {f.payload, f.payload + f.payload_len};
    while (r.p + 3 <= r.end) {
        r.p += 3;
        const uint8_t *name;
        size_t nlen;
        pd_spop_value v;
        assert_int_equal(pd_spop_get_string(&r, &name, &nlen), 0);
        assert_int_equal(pd_spop_get_value(&r, &v), 0);
        if (nlen == 5 && memcmp(name, "error", 5) == 0)
            snprintf(error, errlen, "%.*s", (int)v.len, (const char *)v.data);
    }
    shadow_denied = spop_ack_int(&f, "shadow_denied");
    return spop_ack_int(&f, "allowed");
}

static void envoy_descriptors(void **state) {
    (void)state;
    test_daemon d;
    char dir[] = "/tmp/porteiro-spoe-rules-XXXXXX", yaml[1024], err[200];
    assert_non_null(mkdtemp(dir));
    write_file(dir, "rules.yaml", rules);
    int port = test_free_port();
    snprintf(yaml, sizeof(yaml),
             "listen: 127.0.0.1:%%PORT%%\nspoe:\n  listen: 127.0.0.1:%d\n"
             "envoy:\n  config: %s/rules.yaml\n",
             port, dir);
    test_daemon_must_start(&d, yaml, NULL);
    /* user: 3 a minute. */
    arg alice[] = {{"d0.user", "alice", false}};
    int allowed = 0;
    for (int i = 0; i < 5; i++)
        allowed += (int)ask(port, "edge", alice, 1, err, sizeof(err));
    assert_int_equal(allowed, 3);
    /* All or nothing: a blocked tenant denies the request, bob's count is untouched. */
    arg bob_blocked[] = {{"d0.user", "bob", false}, {"d1.tenant", "blocked", false}};
    assert_int_equal(ask(port, "edge", bob_blocked, 2, err, sizeof(err)), 0);
    arg bob[] = {{"d0.user", "bob", false}};
    allowed = 0;
    for (int i = 0; i < 4; i++)
        allowed += (int)ask(port, "edge", bob, 1, err, sizeof(err));
    assert_int_equal(allowed, 3);
    /* An address (src) as a descriptor's value: 2 an hour. */
    arg addr[] = {{"d0.remote_address", "\xc0\x00\x02\x07", true}};
    allowed = 0;
    for (int i = 0; i < 3; i++)
        allowed += (int)ask(port, "edge", addr, 1, err, sizeof(err));
    assert_int_equal(allowed, 2);
    /* A domain without descriptors: refused, never let through. */
    assert_int_equal(ask(port, "edge", NULL, 0, err, sizeof(err)), 0);
    assert_non_null(strstr(err, "no descriptor"));
    test_daemon_must_finish(&d);
    unlink(strcat(strcpy(yaml, dir), "/rules.yaml"));
    rmdir(dir);
}

/* A policy's tiers, overrides and shadow mode, as on the HTTP face. */
static void policies_as_on_the_http_face(void **state) {
    (void)state;
    test_daemon d;
    char yaml[1024], err[200];
    int port = test_free_port();
    snprintf(yaml, sizeof(yaml),
             "listen: 127.0.0.1:%%PORT%%\nspoe:\n  listen: 127.0.0.1:%d\n"
             "policies:\n"
             "  plan:\n"
             "    tier: header X-Plan\n"
             "    default_tier: free\n"
             "    tiers:\n"
             "      free: [fixed_window 2/366d]\n"
             "      pro: [fixed_window 4/366d]\n"
             "    overrides:\n"
             "      vip: fixed_window 1/366d\n"
             "  trial:\n"
             "    shadow: true\n"
             "    limits: [fixed_window 1/366d]\n",
             port);
    test_daemon_must_start(&d, yaml, NULL);
    struct {
        const char *key, *tier;
        int want;
    } cases[] = {
        {"k-free", NULL, 2}, {"k-pro", "pro", 4}, {"k-unknown-tier", "gold", 2}, {"vip", "pro", 1}};
    for (size_t c = 0; c < sizeof(cases) / sizeof(cases[0]); c++) {
        arg args[] = {{"policy", "plan", false},
                      {"key", cases[c].key, false},
                      {"tier", cases[c].tier, false}};
        int allowed = 0;
        for (int i = 0; i < 6; i++)
            allowed += (int)ask(port, NULL, args, cases[c].tier != NULL ? 3 : 2, err, sizeof(err));
        if (allowed != cases[c].want)
            print_error("key %s, tier %s\n", cases[c].key, cases[c].tier ? cases[c].tier : "-");
        assert_int_equal(allowed, cases[c].want);
    }
    /* Shadow: always allowed, the denial reported. */
    arg trial[] = {{"policy", "trial", false}, {"key", "t1", false}};
    assert_int_equal(ask(port, NULL, trial, 2, err, sizeof(err)), 1);
    assert_int_equal(shadow_denied, -1);
    assert_int_equal(ask(port, NULL, trial, 2, err, sizeof(err)), 1);
    assert_int_equal(shadow_denied, 1);
    /* What a client sends cannot get around it: no key, an unknown policy. */
    arg nokey[] = {{"policy", "plan", false}};
    assert_int_equal(ask(port, NULL, nokey, 1, err, sizeof(err)), 0);
    assert_string_equal(err, "missing key");
    arg unknown[] = {{"policy", "nope", false}, {"key", "k", false}};
    assert_int_equal(ask(port, NULL, unknown, 2, err, sizeof(err)), 0);
    assert_string_equal(err, "unknown policy");
    test_daemon_must_finish(&d);
}

static void healthcheck_hello(void **state) {
    (void)state;
    int fd = spop_connect(spoe_port);
    spop_wire w = {.n = 0}, in = {.n = 0};
    bool closed;
    spop_hello_frame(&w, "2.0", 16380, true);
    spop_send(fd, &w);
    assert_int_equal(spop_read_frames(fd, &in, 2, &closed), 1);
    assert_true(closed); /* AGENT-HELLO, then the close */
    pd_spop_frame f;
    spop_frame_at(&in, 0, &f);
    assert_int_equal(f.type, PD_SPOP_AGENT_HELLO);
    close(fd);
}

int main(void) {
    /* PT_HAPROXY_ONLY=PATTERN: only the tests whose name matches (cmocka's filter). */
    if (getenv("PT_HAPROXY_ONLY") != NULL)
        cmocka_set_test_filter(getenv("PT_HAPROXY_ONLY"));
    if (!test_find_program("haproxy")) {
        fprintf(stderr, "test_haproxy: no haproxy: skipped\n");
        return 77;
    }
    /* 1000 connections here and in porteirod (which inherits the limit). */
    struct rlimit nofile;
    if (getrlimit(RLIMIT_NOFILE, &nofile) == 0 && nofile.rlim_cur < 4096 &&
        nofile.rlim_max >= 4096) {
        nofile.rlim_cur = 4096;
        setrlimit(RLIMIT_NOFILE, &nofile);
    }
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(exactly_the_limit_through_two_haproxies),
        cmocka_unit_test(stick_tables_with_peers_for_comparison),
        cmocka_unit_test(malformed_frames_are_disconnected),
        cmocka_unit_test(pipelined_notify_frames),
        cmocka_unit_test(healthcheck_hello),
        cmocka_unit_test(thousand_connections),
        cmocka_unit_test(acks_out_of_order),
        cmocka_unit_test(envoy_descriptors),
        cmocka_unit_test(policies_as_on_the_http_face),
        cmocka_unit_test(haproxy_reloaded_under_load),
        cmocka_unit_test(redis_killed_and_restarted),
        cmocka_unit_test(porteirod_killed_and_restarted),
        cmocka_unit_test(ack_values_through_haproxy),
        cmocka_unit_test(lease_and_top_through_spoe),
        cmocka_unit_test(slow_agent_fails_as_configured),
        cmocka_unit_test(redis_killed_under_load),
        cmocka_unit_test(porteirod_killed_under_load),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
