/* notes.c — the one line on stderr that explains a decision Redis did not
 * make (a fallback), and the hint after "Redis unreachable". Written for
 * someone trying porteiro for the first time: which Redis, which mode
 * decided, and what that means for the limits. */
#include "notes.h"

#include <inttypes.h>
#include <string.h>

/* The URL without "user:password@": never print a credential. */
static void redis_where(const char *url, char *out, size_t outlen) {
    if (url == NULL || url[0] == '\0') {
        snprintf(out, outlen, "(none)");
        return;
    }
    const char *scheme_end = strstr(url, "://");
    const char *rest = scheme_end != NULL ? scheme_end + 3 : url;
    const char *at = strchr(rest, '@');
    const char *slash = strchr(rest, '/');
    if (at != NULL && (slash == NULL || at < slash))
        snprintf(out, outlen, "%.*s%s", (int)(rest - url), url, at + 1);
    else
        snprintf(out, outlen, "%s", url);
}

/* "L/4 = 2 per instance" for each limit, as the local backend applied it. */
static void local_shares(const cli_target *t, const porteiro_decision *d, char *out,
                         size_t outlen) {
    size_t n = 0;
    int div = t->opts.local_divisor > 1 ? t->opts.local_divisor : 1;
    out[0] = '\0';
    for (size_t i = 0; i < d->nlimits && i < t->nlimits && n + 1 < outlen; i++) {
        const porteiro_limit *l = &t->limits[i];
        bool burst = (l->algorithm == PORTEIRO_TOKEN_BUCKET || l->algorithm == PORTEIRO_GCRA) &&
                     l->burst > 0;
        int w = snprintf(out + n, outlen - n, "%s%s %s/%d = %" PRId64 " per instance",
                         i > 0 ? ", " : "", porteiro_algorithm_name(l->algorithm),
                         burst ? "B" : "L", div, d->limits[i].limit);
        if (w < 0)
            break;
        n += (size_t)w < outlen - n ? (size_t)w : outlen - n - 1;
    }
}

void cli_fallback_note(FILE *out, const cli_command *cmd, const cli_target *t,
                       const porteiro_decision *d, int64_t cost) {
    if (d->fallback == PORTEIRO_FALLBACK_NONE)
        return;
    char where[512];
    redis_where(t->opts.redis_url, where, sizeof(where));
    fprintf(out, "porteiro %s: fallback: Redis at %s failed (%s), so ", cmd->name, where,
            porteiro_strerror(d->fallback_reason));
    switch (d->fallback) {
        case PORTEIRO_FALLBACK_OPEN:
            fprintf(out, "on_error open allowed it without checking any limit\n");
            return;
        case PORTEIRO_FALLBACK_CLOSED:
            fprintf(out,
                    "on_error closed denied it without checking any limit; Redis is tried again "
                    "in %" PRId64 " ms\n",
                    d->retry_after_ms);
            return;
        default: break;
    }
    char shares[512];
    local_shares(t, d, shares, sizeof(shares));
    if (t->opts.local_divisor > 1)
        fprintf(out,
                "on_error local decided in this process's memory with each limit divided by "
                "local_divisor %d (one instance's share)%s%s; ",
                t->opts.local_divisor, shares[0] ? ": " : "", shares);
    else
        fprintf(out, "on_error local decided in this process's memory with the full limits; ");
    if (d->retry_after_ms < 0)
        fprintf(out, "cost %" PRId64 " can never pass locally\n", cost);
    else if (!d->allowed)
        fprintf(out, "denied locally, retry in %" PRId64 " ms\n", d->retry_after_ms);
    else
        fprintf(out, "allowed locally (a new process starts with full limits)\n");
}

bool cli_unreachable_line(FILE *out, const cli_command *cmd, porteiro_t *p, porteiro_status st,
                          const char *msg) {
    if (st != PORTEIRO_ERR_CONNECT && st != PORTEIRO_ERR_TIMEOUT && st != PORTEIRO_ERR_CIRCUIT_OPEN)
        return false;
    /* The node's "host:port" (never a credential); a cluster names its first. */
    porteiro_node node;
    char where[160] = "the configured address";
    if (p != NULL && porteiro_nodes(p, false, &node, 1) > 0)
        snprintf(where, sizeof(where), "%s", node.name);
    bool decides = (cmd->bit & (CMD_CHECK | CMD_PEEK | CMD_ACQUIRE)) != 0;
    fprintf(out, "porteiro %s: no answer from Redis at %s (%s): start redis-server there%s\n",
            cmd->name, where, msg,
            decides ? ", or give --redis '' to decide in this process's memory, or --on-error "
                      "local|open|closed to decide without Redis"
                    : "");
    return true;
}
