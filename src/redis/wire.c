/* wire.c — RESP out and in without a malloc per command or reply element
 * (wire.h). */
#include "redis/wire.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "redis/command.h"

/* ---- out ---- */

static int reserve(pt_buf *b, size_t more) {
    if (b->off > 0 && b->off == b->len)
        b->off = b->len = 0; /* all written: start over at the front */
    if (b->len + more <= b->cap)
        return 0;
    size_t cap = b->cap > 0 ? b->cap : 4096;
    while (cap < b->len + more)
        cap *= 2;
    char *grown = realloc(b->data, cap);
    if (grown == NULL)
        return -1;
    b->data = grown;
    b->cap = cap;
    return 0;
}

/* "<c><n>\r\n" at p; returns its length. */
static size_t put_header(char *p, char c, size_t n) {
    char digits[24];
    size_t k = 0;
    do {
        digits[k++] = (char)('0' + n % 10);
        n /= 10;
    } while (n > 0);
    size_t len = 0;
    p[len++] = c;
    while (k > 0)
        p[len++] = digits[--k];
    p[len++] = '\r';
    p[len++] = '\n';
    return len;
}

int pt_buf_command(pt_buf *b, int argc, const char *const *argv, const size_t *argvlen) {
    size_t need = 24;
    for (int i = 0; i < argc; i++)
        need += 24 + argvlen[i] + 2;
    if (reserve(b, need) != 0)
        return -1;
    char *p = b->data + b->len;
    p += put_header(p, '*', (size_t)argc);
    for (int i = 0; i < argc; i++) {
        p += put_header(p, '$', argvlen[i]);
        memcpy(p, argv[i], argvlen[i]);
        p += argvlen[i];
        *p++ = '\r';
        *p++ = '\n';
    }
    b->len = (size_t)(p - b->data);
    return 0;
}

void pt_buf_consume(pt_buf *b, size_t n) {
    b->off += n;
    if (b->off == b->len)
        b->off = b->len = 0;
}

void pt_buf_free(pt_buf *b) {
    free(b->data);
    *b = (pt_buf){0};
}

/* ---- in: reply objects from an arena ---- */

/* Blocks of the arena; the first stays between replies, the others go. */
typedef struct pt_block {
    struct pt_block *next;
    size_t used, cap;
    max_align_t mem[];
} pt_block;

struct pt_wire_reader {
    redisReader *reader;
    pt_block *blocks; /* the newest first */
    bool too_big;     /* an element count or length past the bounds */
    bool handed;      /* the last call returned a complete reply */
};

#define FIRST_BLOCK 8192

static void *arena_alloc(pt_wire_reader *w, size_t size) {
    size = (size + sizeof(max_align_t) - 1) / sizeof(max_align_t) * sizeof(max_align_t);
    pt_block *b = w->blocks;
    if (b == NULL || b->cap - b->used < size) {
        size_t cap = size > FIRST_BLOCK ? size : FIRST_BLOCK;
        pt_block *nb = malloc(sizeof(*nb) + cap);
        if (nb == NULL)
            return NULL;
        nb->next = b;
        nb->used = 0;
        nb->cap = cap;
        w->blocks = b = nb;
    }
    void *p = (char *)b->mem + b->used;
    b->used += size;
    return p;
}

/* Between replies: keeps the oldest block, empty. */
static void arena_reset(pt_wire_reader *w) {
    while (w->blocks != NULL && w->blocks->next != NULL) {
        pt_block *b = w->blocks;
        w->blocks = b->next;
        free(b);
    }
    if (w->blocks != NULL)
        w->blocks->used = 0;
}

/* A new object, hung into its parent array (as hiredis's own functions do). */
static void *create(const redisReadTask *task, int type) {
    pt_wire_reader *w = task->privdata;
    redisReply *r = arena_alloc(w, sizeof(*r));
    if (r == NULL)
        return NULL;
    memset(r, 0, sizeof(*r));
    r->type = type;
    if (task->parent != NULL) {
        redisReply *parent = task->parent->obj;
        parent->element[task->idx] = r;
    }
    return r;
}

static void *create_string(const redisReadTask *task, char *str, size_t len) {
    pt_wire_reader *w = task->privdata;
    char *copy = arena_alloc(w, len + 1);
    redisReply *r = copy != NULL ? create(task, task->type) : NULL;
    if (r == NULL)
        return NULL;
    memcpy(copy, str, len);
    copy[len] = '\0';
    r->str = copy;
    r->len = len;
    return r;
}

static void *create_array(const redisReadTask *task, int elements) {
    pt_wire_reader *w = task->privdata;
    if (elements < 0 || elements > PT_MAX_REPLY_ELEMENTS) {
        w->too_big = true;
        return NULL;
    }
    redisReply **el = NULL;
    if (elements > 0 && (el = arena_alloc(w, (size_t)elements * sizeof(*el))) == NULL)
        return NULL;
    redisReply *r = create(task, REDIS_REPLY_ARRAY);
    if (r == NULL)
        return NULL;
    if (el != NULL)
        memset(el, 0, (size_t)elements * sizeof(*el));
    r->element = el;
    r->elements = (size_t)elements;
    return r;
}

static void *create_integer(const redisReadTask *task, long long value) {
    redisReply *r = create(task, REDIS_REPLY_INTEGER);
    if (r != NULL)
        r->integer = value;
    return r;
}

static void *create_nil(const redisReadTask *task) {
    return create(task, REDIS_REPLY_NIL);
}

static void free_object(void *obj) {
    (void)obj; /* the arena's */
}

static redisReplyObjectFunctions arena_functions = {create_string, create_array, create_integer,
                                                    create_nil, free_object};

pt_wire_reader *pt_wire_reader_new(void) {
    pt_wire_reader *w = calloc(1, sizeof(*w));
    if (w == NULL)
        return NULL;
    w->reader = redisReaderCreateWithFunctions(&arena_functions);
    if (w->reader == NULL) {
        free(w);
        return NULL;
    }
    w->reader->privdata = w;
    return w;
}

void pt_wire_reader_free(pt_wire_reader *w) {
    if (w == NULL)
        return;
    redisReaderFree(w->reader);
    arena_reset(w);
    free(w->blocks);
    free(w);
}

int pt_wire_reader_feed(pt_wire_reader *w, const char *buf, size_t len) {
    return redisReaderFeed(w->reader, buf, len) == REDIS_OK ? 0 : -1;
}

int pt_wire_reader_next(pt_wire_reader *w, redisReply **reply, char *errbuf, size_t errlen) {
    void *r = NULL;
    /* The reply handed out last has been used: its objects go. (A reply
     * still incomplete keeps its objects between calls.) */
    if (w->handed)
        arena_reset(w);
    w->handed = false;
    if (redisReaderGetReply(w->reader, &r) != REDIS_OK) {
        snprintf(errbuf, errlen, "redis: %s",
                 w->too_big ? "protocol error: reply too large" : w->reader->errstr);
        return -1;
    }
    if (r == NULL) {
        if (!pt_reader_overfull(w->reader))
            return 0;
        snprintf(errbuf, errlen, "redis: protocol error: reply too large");
        return -1;
    }
    *reply = r;
    w->handed = true;
    return 1;
}
