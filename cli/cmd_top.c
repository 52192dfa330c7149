/* cmd_top.c — porteiro top: porteirod's admin listener (/v1/status,
 * /v1/top) in a terminal, redrawn every second like top(1), or one JSON
 * snapshot for scripts. The screen itself is top_view.c. */
#define _DEFAULT_SOURCE /* cfmakeraw */
#include <errno.h>
#include <jansson.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <termios.h>
#include <time.h>
#include <unistd.h>

#include "commands.h"
#include "http_get.h"
#include "top_view.h"

#define TOP_DEFAULT_ADMIN "http://127.0.0.1:9901"
#define TOP_EVERY_MS 1000   /* one poll a second, as the page */
#define TOP_TIMEOUT_MS 2000 /* for each GET */
#define TOP_ROWS 10         /* keys asked for per policy, as the page */
#define EXIT_UNREACHABLE 1

typedef struct top_ctx {
    http_url url;
    const char *admin;
    const char *outcome, *window; /* toggled by o and w on the live screen */
    char policy_q[400];           /* "&policy=..." or "" */
    char top_path[600];
    char err[512];
} top_ctx;

static volatile sig_atomic_t stop_signal, resized;
static void on_stop(int sig) {
    stop_signal = sig;
}
static void on_winch(int sig) {
    (void)sig;
    resized = 1;
}

static int64_t mono_ms(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

/* GET path and parse its JSON; NULL with ctx->err set when anything fails. */
static json_t *get_json(top_ctx *ctx, const char *path) {
    int status;
    char *body = NULL, err[256];
    size_t len;
    if (http_get(&ctx->url, path, TOP_TIMEOUT_MS, &status, &body, &len, err, sizeof(err)) != 0) {
        snprintf(ctx->err, sizeof(ctx->err), "cannot reach the admin listener at %s: %s",
                 ctx->admin, err);
        return NULL;
    }
    json_error_t jerr;
    json_t *v = status == 200 ? json_loadb(body, len, 0, &jerr) : NULL;
    if (status != 200) {
        /* Say what the server said: {"error":"..."} or the first line. */
        body[strcspn(body, "\r\n")] = '\0';
        char said[208]; /* printed on a terminal: defanged */
        top_view_safe(said, sizeof(said), body, 200);
        snprintf(ctx->err, sizeof(ctx->err), "%s%s answered HTTP %d: %s", ctx->admin, path, status,
                 said);
    } else if (!json_is_object(v)) {
        snprintf(ctx->err, sizeof(ctx->err), "%s%s did not answer a JSON object: %s", ctx->admin,
                 path, v == NULL ? jerr.text : "another type");
        json_decref(v);
        v = NULL;
    }
    free(body);
    return v;
}

static int poll_once(top_ctx *ctx, top_sample *s) {
    s->status = get_json(ctx, "/v1/status");
    s->top = s->status != NULL ? get_json(ctx, ctx->top_path) : NULL;
    s->at_ms = mono_ms();
    if (s->top == NULL) {
        json_decref(s->status);
        s->status = NULL;
        return -1;
    }
    return 0;
}

static void sample_clear(top_sample *s) {
    json_decref(s->status);
    json_decref(s->top);
    s->status = s->top = NULL;
}

/* Query parameters are ours but the policy name is the user's. */
static void append_escaped(char *dst, size_t cap, const char *s) {
    size_t n = strlen(dst);
    for (; *s != '\0' && n + 4 < cap; s++) {
        unsigned char ch = (unsigned char)*s;
        if ((ch >= 'a' && ch <= 'z') || (ch >= 'A' && ch <= 'Z') || (ch >= '0' && ch <= '9') ||
            strchr("-._~", ch) != NULL)
            dst[n++] = (char)ch;
        else
            n += (size_t)snprintf(dst + n, cap - n, "%%%02X", ch);
    }
    dst[n] = '\0';
}

static void top_path(top_ctx *ctx) {
    snprintf(ctx->top_path, sizeof(ctx->top_path), "/v1/top?n=%d&outcome=%s&window=%s%s", TOP_ROWS,
             ctx->outcome, ctx->window, ctx->policy_q);
}

static int setup(const cli_command *cmd, const cli_args *args, top_ctx *ctx) {
    ctx->admin = args->given[F_ADMIN] ? args->text[F_ADMIN] : TOP_DEFAULT_ADMIN;
    char err[384];
    if (http_url_parse(ctx->admin, &ctx->url, err, sizeof(err)) != 0)
        return cli_usage_error(cmd, "--admin %s", err);
    const char *outcome = args->given[F_OUTCOME] ? args->text[F_OUTCOME] : "denied";
    const char *window = args->given[F_WINDOW] ? args->text[F_WINDOW] : "1m";
    if (strcmp(outcome, "denied") != 0 && strcmp(outcome, "allowed") != 0 &&
        strcmp(outcome, "used") != 0)
        return cli_usage_error(cmd, "--outcome is denied, allowed or used, not '%s'", outcome);
    if (strcmp(window, "1m") != 0 && strcmp(window, "10m") != 0)
        return cli_usage_error(cmd, "--window is 1m or 10m, not '%s'", window);
    ctx->outcome = strcmp(outcome, "denied") == 0    ? "denied"
                   : strcmp(outcome, "allowed") == 0 ? "allowed"
                                                     : "used";
    ctx->window = strcmp(window, "1m") == 0 ? "1m" : "10m";
    if (args->given[F_POLICY]) {
        if (args->text[F_POLICY][0] == '\0' || strlen(args->text[F_POLICY]) > 128)
            return cli_usage_error(cmd, "--policy needs a policy name (up to 128 bytes)");
        strcpy(ctx->policy_q, "&policy=");
        append_escaped(ctx->policy_q, sizeof(ctx->policy_q), args->text[F_POLICY]);
    }
    top_path(ctx);
    return -1;
}

/* --once, or stdout not a terminal: the two answers as one JSON line. */
static int snapshot(top_ctx *ctx) {
    top_sample s = {0};
    if (poll_once(ctx, &s) != 0) {
        fprintf(stderr, "porteiro top: %s\n", ctx->err);
        return EXIT_UNREACHABLE;
    }
    json_t *both = json_pack("{s:O,s:O}", "status", s.status, "top", s.top);
    char *text = both != NULL ? json_dumps(both, JSON_COMPACT | JSON_ENSURE_ASCII) : NULL;
    int rc = CLI_EXIT_OK;
    if (text == NULL || printf("%s\n", text) < 0 || fflush(stdout) != 0) {
        fprintf(stderr, "porteiro top: cannot write the snapshot\n");
        rc = EXIT_UNREACHABLE;
    }
    free(text);
    json_decref(both);
    sample_clear(&s);
    return rc;
}

/* The latency counts of the oldest sample within the last 60 s, so the
 * histogram shows the last minute as the page does. */
typedef struct lat_ring {
    uint64_t counts[64][TOP_LATENCY_MAX];
    size_t n[64];
    int64_t at_ms[64];
    size_t head, used;
} lat_ring;

static void ring_push(lat_ring *r, const top_sample *s, top_view *v) {
    const json_t *counts = json_object_get(json_object_get(s->status, "latency"), "counts");
    size_t n = json_array_size(counts), at = (r->head + r->used) % 64;
    if (n > TOP_LATENCY_MAX)
        n = 0;
    for (size_t i = 0; i < n; i++)
        r->counts[at][i] = (uint64_t)json_number_value(json_array_get(counts, i));
    r->n[at] = n;
    r->at_ms[at] = s->at_ms;
    if (r->used < 64)
        r->used++;
    else
        r->head = (r->head + 1) % 64;
    while (r->used > 1 && s->at_ms - r->at_ms[r->head] > 60000) {
        r->head = (r->head + 1) % 64;
        r->used--;
    }
    v->base_n = 0;
    if (r->used > 1 && r->n[r->head] == n) {
        memcpy(v->base_counts, r->counts[r->head], n * sizeof(uint64_t));
        v->base_n = n;
        v->base_age_ms = s->at_ms - r->at_ms[r->head];
    }
}

static void term_size(top_view *v) {
    struct winsize ws;
    v->width = 100;
    v->height = 40;
    if (ioctl(STDOUT_FILENO, TIOCGWINSZ, &ws) == 0 && ws.ws_col > 0 && ws.ws_row > 0) {
        v->width = ws.ws_col;
        v->height = ws.ws_row;
    }
}

/* One screen, written at once (no flicker): home, the lines, erase below. */
static void redraw(const top_view *v, const top_sample *cur, const top_sample *prev) {
    char *buf = NULL;
    size_t len = 0;
    FILE *mem = open_memstream(&buf, &len);
    if (mem == NULL)
        return;
    fputs("\033[H", mem);
    top_view_draw(mem, v, cur, prev);
    fputs("\033[J", mem);
    if (fclose(mem) == 0 && write(STDOUT_FILENO, buf, len) < 0)
        stop_signal = SIGPIPE;
    free(buf);
}

/* Raw input (one key at a time, no echo), the alternate screen, no cursor;
 * all undone by term_leave, whatever ends the loop. */
static struct termios saved_tio;
static int term_enter(void) {
    if (tcgetattr(STDIN_FILENO, &saved_tio) != 0)
        return -1;
    struct termios raw = saved_tio;
    raw.c_lflag &= ~(tcflag_t)(ICANON | ECHO);
    raw.c_cc[VMIN] = 0;
    raw.c_cc[VTIME] = 0;
    if (tcsetattr(STDIN_FILENO, TCSAFLUSH, &raw) != 0)
        return -1;
    fputs("\033[?1049h\033[?25l\033[H\033[2J", stdout);
    fflush(stdout);
    return 0;
}
static void term_leave(bool raw) {
    fputs("\033[?25h\033[?1049l", stdout);
    fflush(stdout);
    if (raw)
        tcsetattr(STDIN_FILENO, TCSAFLUSH, &saved_tio);
}

/* What a key asked for. */
typedef enum key_action { KEY_NONE, KEY_QUIT, KEY_VIEW } key_action;

/* Waits until the next poll is due, or a key: q (or a signal) quits, o
 * switches denied/allowed, w 1m/10m (KEY_VIEW: poll now with the new view). */
static key_action wait_key(top_ctx *ctx, int64_t until) {
    for (;;) {
        int64_t left = until - mono_ms();
        if (stop_signal)
            return KEY_QUIT;
        if (resized || left <= 0)
            return KEY_NONE;
        struct pollfd p = {.fd = STDIN_FILENO, .events = POLLIN};
        int r = poll(&p, 1, (int)left);
        if (r > 0) {
            char keys[32];
            ssize_t n = read(STDIN_FILENO, keys, sizeof(keys));
            if (n == 0) /* the terminal went away */
                return KEY_QUIT;
            key_action act = KEY_NONE;
            for (ssize_t i = 0; i < n; i++) {
                if (keys[i] == 'q' || keys[i] == 'Q' || keys[i] == 3 /* ^C */)
                    return KEY_QUIT;
                if (keys[i] == 'o' || keys[i] == 'O') {
                    /* denied, allowed, used (tokens: issue 38), denied... */
                    ctx->outcome = strcmp(ctx->outcome, "denied") == 0    ? "allowed"
                                   : strcmp(ctx->outcome, "allowed") == 0 ? "used"
                                                                          : "denied";
                    act = KEY_VIEW;
                } else if (keys[i] == 'w' || keys[i] == 'W') {
                    ctx->window = strcmp(ctx->window, "1m") == 0 ? "10m" : "1m";
                    act = KEY_VIEW;
                }
            }
            if (act == KEY_VIEW) {
                top_path(ctx);
                return KEY_VIEW;
            }
        } else if (r < 0 && errno != EINTR) {
            return KEY_QUIT;
        }
    }
}

static int live(top_ctx *ctx) {
    top_sample prev = {0}, cur = {0};
    if (poll_once(ctx, &cur) != 0) { /* a typo in --admin: say so, do not draw */
        fprintf(stderr, "porteiro top: %s\n", ctx->err);
        return EXIT_UNREACHABLE;
    }
    struct sigaction sa = {.sa_handler = on_stop}, wa = {.sa_handler = on_winch};
    sigemptyset(&sa.sa_mask);
    sigemptyset(&wa.sa_mask);
    sigaction(SIGINT, &sa, NULL);
    sigaction(SIGTERM, &sa, NULL);
    sigaction(SIGHUP, &sa, NULL);
    sigaction(SIGWINCH, &wa, NULL);
    signal(SIGPIPE, SIG_IGN);
    bool raw = isatty(STDIN_FILENO) && term_enter() == 0;
    if (!raw) {
        fputs("\033[?1049h\033[?25l", stdout);
        fflush(stdout);
    }
    top_view v = {.admin = ctx->admin, .color = getenv("NO_COLOR") == NULL};
    lat_ring *ring = calloc(1, sizeof(*ring));
    int64_t next = mono_ms();
    while (ring != NULL && !stop_signal) {
        term_size(&v);
        if (!resized) {
            ring_push(ring, &cur, &v);
            next += TOP_EVERY_MS;
        }
        resized = 0;
        redraw(&v, &cur, &prev);
        key_action act = wait_key(ctx, next);
        if (act == KEY_QUIT)
            break;
        if (resized && act == KEY_NONE)
            continue;
        top_sample fresh = {0};
        if (poll_once(ctx, &fresh) == 0) {
            sample_clear(&prev);
            prev = cur;
            cur = fresh;
            v.error = NULL;
        } else {
            v.error = ctx->err; /* keep the last numbers, say they are old */
        }
        if (act == KEY_VIEW) { /* the new view now, then a second as usual */
            resized = 0;
            next = mono_ms();
        } else if (next < mono_ms() - TOP_EVERY_MS) { /* a slow poll: no catch-up burst */
            next = mono_ms();
        }
    }
    term_leave(raw);
    free(ring);
    sample_clear(&prev);
    sample_clear(&cur);
    return CLI_EXIT_OK;
}

int cmd_top(const cli_command *cmd, const cli_args *args) {
    top_ctx ctx = {0};
    int rc = setup(cmd, args, &ctx);
    if (rc >= 0)
        return rc;
    if (args->given[F_ONCE] || !isatty(STDOUT_FILENO))
        return snapshot(&ctx);
    return live(&ctx);
}
