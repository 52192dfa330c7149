/* http_get.c — GET over a socket, HTTP/1.0 so the answer ends when the
 * server closes (no keep-alive); chunked bodies are decoded all the same,
 * in case a server answers 1.1 style. */
#include "http_get.h"

#include <errno.h>
#include <fcntl.h>
#include <netdb.h>
#include <poll.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#define MAX_BODY (8u << 20) /* bytes: an admin answer is a few KiB */

int http_url_parse(const char *text, http_url *url, char *err, size_t errlen) {
    memset(url, 0, sizeof(*url));
    if (strncmp(text, "http://", 7) != 0) {
        snprintf(err, errlen,
                 "'%s': only http://HOST:PORT URLs (the admin listener speaks plain HTTP)", text);
        return -1;
    }
    const char *h = text + 7, *end;
    if (*h == '[') { /* [::1]:9901 */
        end = strchr(h, ']');
        if (end == NULL || (end[1] != ':' && end[1] != '/' && end[1] != '\0'))
            goto bad;
        h++;
    } else {
        end = h + strcspn(h, ":/");
    }
    size_t hl = (size_t)(end - h);
    if (hl == 0 || hl >= sizeof(url->host))
        goto bad;
    memcpy(url->host, h, hl);
    const char *p = *end == ']' ? end + 1 : end;
    strcpy(url->port, "80");
    if (*p == ':') {
        p++;
        size_t pl = strspn(p, "0123456789");
        long port = pl > 0 && pl < 6 ? strtol(p, NULL, 10) : 0;
        if (port < 1 || port > 65535)
            goto bad;
        snprintf(url->port, sizeof(url->port), "%ld", port);
        p += pl;
    }
    if (*p != '\0' && *p != '/')
        goto bad;
    size_t rest = strlen(p);
    while (rest > 0 && p[rest - 1] == '/')
        rest--;
    if (rest >= sizeof(url->prefix) || memchr(p, ' ', rest) != NULL || strpbrk(p, "\r\n?#") != NULL)
        goto bad;
    memcpy(url->prefix, p, rest);
    return 0;
bad:
    snprintf(err, errlen, "'%s' is not a URL of the form http://HOST:PORT", text);
    return -1;
}

static int64_t now_ms(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

/* Waits for events on fd until the deadline; 1 ready, 0 timed out, -1 error. */
static int wait_fd(int fd, short events, int64_t deadline) {
    for (;;) {
        int64_t left = deadline - now_ms();
        if (left <= 0)
            return 0;
        struct pollfd p = {.fd = fd, .events = events};
        int r = poll(&p, 1, (int)left);
        if (r >= 0 || errno != EINTR)
            return r > 0 ? 1 : r;
    }
}

/* A non-blocking connect to each address in turn within the deadline. */
static int dial(const http_url *url, int64_t deadline, int timeout_ms, char *err, size_t errlen) {
    struct addrinfo hints = {.ai_family = AF_UNSPEC, .ai_socktype = SOCK_STREAM}, *res = NULL;
    int rc = getaddrinfo(url->host, url->port, &hints, &res);
    if (rc != 0) {
        snprintf(err, errlen, "cannot resolve %s: %s", url->host, gai_strerror(rc));
        return -1;
    }
    int fd = -1, last = ECONNREFUSED;
    for (struct addrinfo *a = res; a != NULL && fd < 0; a = a->ai_next) {
        fd = socket(a->ai_family, a->ai_socktype | SOCK_NONBLOCK | SOCK_CLOEXEC, a->ai_protocol);
        if (fd < 0) {
            last = errno;
            continue;
        }
        if (connect(fd, a->ai_addr, a->ai_addrlen) != 0 && errno != EINPROGRESS) {
            last = errno;
        } else {
            int w = wait_fd(fd, POLLOUT, deadline);
            socklen_t sl = sizeof(last);
            if (w == 0)
                last = ETIMEDOUT;
            else if (w < 0 || getsockopt(fd, SOL_SOCKET, SO_ERROR, &last, &sl) != 0)
                last = errno;
            if (w == 1 && last == 0)
                break;
        }
        close(fd);
        fd = -1;
    }
    freeaddrinfo(res);
    if (fd < 0) {
        if (last == ETIMEDOUT)
            snprintf(err, errlen, "no connection within %d ms", timeout_ms);
        else
            snprintf(err, errlen, "%s", strerror(last));
    }
    return fd;
}

static int send_all(int fd, const char *buf, size_t len, int64_t deadline) {
    while (len > 0) {
        ssize_t n = send(fd, buf, len, MSG_NOSIGNAL);
        if (n > 0) {
            buf += n;
            len -= (size_t)n;
        } else if (n < 0 && errno != EAGAIN && errno != EINTR) {
            return -1;
        } else if (wait_fd(fd, POLLOUT, deadline) != 1) {
            return -1;
        }
    }
    return 0;
}

/* Decodes a chunked body in place; returns its length, or -1 if malformed. */
static long dechunk(char *b, size_t len) {
    size_t in = 0, out = 0;
    for (;;) {
        char *endp;
        if (in >= len)
            return -1;
        unsigned long n = strtoul(b + in, &endp, 16);
        char *crlf = strstr(b + in, "\r\n");
        if (crlf == NULL || endp == b + in || n > len)
            return -1;
        in = (size_t)(crlf - b) + 2;
        if (n == 0)
            return (long)out;
        if (in + n + 2 > len)
            return -1;
        memmove(b + out, b + in, n);
        out += n;
        in += n + 2;
    }
}

/* Splits the response in buf: the status, and the body moved to the front. */
static int parse_response(char *buf, size_t len, int *status, size_t *body_len, char *err,
                          size_t errlen) {
    int major, minor, code;
    char *head_end = strstr(buf, "\r\n\r\n");
    if (sscanf(buf, "HTTP/%d.%d %d", &major, &minor, &code) != 3 || code < 100 || code > 599 ||
        head_end == NULL) {
        snprintf(err, errlen, "the answer is not HTTP");
        return -1;
    }
    *head_end = '\0';
    int chunked = 0;
    for (char *line = strstr(buf, "\r\n"); line != NULL; line = strstr(line + 2, "\r\n")) {
        if (strncasecmp(line + 2, "Transfer-Encoding:", 18) != 0)
            continue;
        char *value = line + 20, *eol = strstr(value, "\r\n");
        if (eol != NULL)
            *eol = '\0'; /* the search stays on this line */
        chunked = strstr(value, "chunked") != NULL;
        if (eol != NULL)
            *eol = '\r';
    }
    char *body = head_end + 4;
    size_t blen = len - (size_t)(body - buf);
    memmove(buf, body, blen);
    buf[blen] = '\0';
    if (chunked) {
        long n = dechunk(buf, blen);
        if (n < 0) {
            snprintf(err, errlen, "a malformed chunked body");
            return -1;
        }
        blen = (size_t)n;
        buf[blen] = '\0';
    }
    *status = code;
    *body_len = blen;
    return 0;
}

int http_get(const http_url *url, const char *path, int timeout_ms, int *status, char **body,
             size_t *len, char *err, size_t errlen) {
    int64_t deadline = now_ms() + timeout_ms;
    int fd = dial(url, deadline, timeout_ms, err, errlen);
    if (fd < 0)
        return -1;
    char req[1024];
    int rl = snprintf(req, sizeof(req),
                      "GET %s%s HTTP/1.0\r\nHost: %s%s%s:%s\r\nUser-Agent: porteiro-top\r\n"
                      "Accept: application/json\r\nConnection: close\r\n\r\n",
                      url->prefix, path, strchr(url->host, ':') ? "[" : "", url->host,
                      strchr(url->host, ':') ? "]" : "", url->port);
    if (rl < 0 || (size_t)rl >= sizeof(req) || send_all(fd, req, (size_t)rl, deadline) != 0) {
        snprintf(err, errlen, "cannot send the request: %s", strerror(errno));
        close(fd);
        return -1;
    }
    size_t cap = 16384, n = 0;
    char *buf = malloc(cap);
    int rc = -1;
    while (buf != NULL) {
        if (n + 1 >= cap) {
            char *bigger = cap >= MAX_BODY ? NULL : realloc(buf, cap * 2);
            if (bigger == NULL) {
                snprintf(err, errlen, "the answer is over %u bytes", MAX_BODY);
                break;
            }
            buf = bigger;
            cap *= 2;
        }
        ssize_t r = recv(fd, buf + n, cap - 1 - n, 0);
        if (r > 0) {
            n += (size_t)r;
            continue;
        }
        if (r == 0) {
            buf[n] = '\0';
            rc = parse_response(buf, n, status, len, err, errlen);
            break;
        }
        if (errno == EINTR)
            continue;
        if (errno != EAGAIN) {
            snprintf(err, errlen, "reading the answer: %s", strerror(errno));
            break;
        }
        if (wait_fd(fd, POLLIN, deadline) != 1) {
            snprintf(err, errlen, "no complete answer within %d ms", timeout_ms);
            break;
        }
    }
    close(fd);
    if (rc != 0) {
        if (buf == NULL)
            snprintf(err, errlen, "out of memory");
        free(buf);
        return -1;
    }
    *body = buf;
    return 0;
}
