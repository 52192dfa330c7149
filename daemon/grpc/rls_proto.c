/* rls_proto.c — RLS v3 and gRPC health messages <-> envoy_rls.h (rls_proto.h). */
#include "rls_proto.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "rls.pb-c.h"

#define ARENA_BYTES 2048 /* a typical request's unpacked parts fit: one malloc */

/* The unpacked message and the arrays pointing into it come from one arena
 * inside this struct; what does not fit is malloc'ed, one block each. */
struct pd_rls_decoded {
    Pdrls__Request *msg;
    pd_rls_descriptor *descriptors;
    pd_rls_entry *entries;
    ProtobufCAllocator allocator;
    size_t used;
    _Alignas(max_align_t) unsigned char arena[ARENA_BYTES];
};

static void *arena_alloc(void *data, size_t size) {
    pd_rls_decoded *d = data;
    size_t need = (size + _Alignof(max_align_t) - 1) & ~(_Alignof(max_align_t) - 1);
    if (need <= ARENA_BYTES - d->used) {
        void *p = d->arena + d->used;
        d->used += need;
        return p;
    }
    return malloc(size);
}

static void arena_free(void *data, void *p) {
    pd_rls_decoded *d = data;
    if ((unsigned char *)p < d->arena || (unsigned char *)p >= d->arena + ARENA_BYTES)
        free(p); /* the arena itself goes with d */
}

static void *arena_calloc(pd_rls_decoded *d, size_t n, size_t size) {
    if (n == 0)
        n = 1;
    if (n > SIZE_MAX / size)
        return NULL;
    void *p = arena_alloc(d, n * size);
    if (p != NULL)
        memset(p, 0, n * size);
    return p;
}

void pd_rls_decoded_free(pd_rls_decoded *d) {
    if (d == NULL)
        return;
    if (d->msg != NULL)
        pdrls__request__free_unpacked(d->msg, &d->allocator);
    if (d->descriptors != NULL)
        arena_free(d, d->descriptors);
    if (d->entries != NULL)
        arena_free(d, d->entries);
    free(d);
}

/* The text of a bytes field: never NULL (protobuf-c leaves an empty one
 * NULL), so that the decision side may memcpy it whatever its length. */
static const char *text_of(const ProtobufCBinaryData *b) {
    return b->data != NULL ? (const char *)b->data : "";
}

/* Units the contract knows; any other number (an open proto3 enum) is unknown. */
static pd_rls_unit unit_of(int v) {
    return v >= PD_RLS_SECOND && v <= PD_RLS_WEEK ? (pd_rls_unit)v : PD_RLS_UNIT_UNKNOWN;
}

/* Points req's descriptors and entries into the unpacked message. */
static int fill_request(pd_rls_decoded *d, pd_rls_request *req) {
    const Pdrls__Request *m = d->msg;
    size_t nentries = 0;
    for (size_t i = 0; i < m->n_descriptors; i++)
        nentries += m->descriptors[i]->n_entries;
    pd_rls_descriptor *descriptors = d->descriptors =
        arena_calloc(d, m->n_descriptors, sizeof(*descriptors));
    pd_rls_entry *e = d->entries = arena_calloc(d, nentries, sizeof(*e));
    if (descriptors == NULL || e == NULL)
        return -1;
    for (size_t i = 0; i < m->n_descriptors; i++) {
        const Pdrls__Descriptor *src = m->descriptors[i];
        pd_rls_descriptor *dst = &descriptors[i];
        dst->entries = e;
        dst->nentries = src->n_entries;
        for (size_t j = 0; j < src->n_entries; j++, e++) {
            e->key = text_of(&src->entries[j]->key);
            e->key_len = src->entries[j]->key.len;
            e->value = text_of(&src->entries[j]->value);
            e->value_len = src->entries[j]->value.len;
        }
        if (src->limit != NULL) {
            dst->has_limit = true;
            dst->limit_requests_per_unit = src->limit->requests_per_unit;
            dst->limit_unit = unit_of(src->limit->unit);
        }
        if (src->hits_addend != NULL) {
            dst->has_hits_addend = true;
            dst->hits_addend = src->hits_addend->value;
        }
    }
    req->domain = text_of(&m->domain);
    req->domain_len = m->domain.len;
    req->descriptors = descriptors;
    req->ndescriptors = m->n_descriptors;
    req->hits_addend = m->hits_addend;
    return 0;
}

int pd_rls_decode_request(const uint8_t *buf, size_t len, pd_rls_request *req,
                          pd_rls_decoded **owner, bool *oom, char *err, size_t errlen) {
    *owner = NULL;
    *oom = false;
    memset(req, 0, sizeof(*req));
    pd_rls_decoded *d = malloc(sizeof(*d));
    if (d == NULL) {
        *oom = true;
        snprintf(err, errlen, "out of memory");
        return -1;
    }
    /* protobuf-c says NULL for malformed input and for a failed allocation
     * alike; the message size is bounded before we get here, so it is the
     * input that is blamed. */
    d->msg = NULL;
    d->descriptors = NULL;
    d->entries = NULL;
    d->used = 0;
    d->allocator = (ProtobufCAllocator){arena_alloc, arena_free, d};
    d->msg = pdrls__request__unpack(&d->allocator, len, buf);
    if (d->msg == NULL) {
        free(d);
        snprintf(err, errlen, "malformed RateLimitRequest (protobuf)");
        return -1;
    }
    if (fill_request(d, req) != 0) {
        pd_rls_decoded_free(d);
        memset(req, 0, sizeof(*req));
        *oom = true;
        snprintf(err, errlen, "out of memory");
        return -1;
    }
    *owner = d;
    return 0;
}

/* ---- the response ------------------------------------------------------ */

/* One status's message and the two it points to, built side by side. */
typedef struct status_parts {
    Pdrls__DescriptorStatus status;
    Pdrls__RateLimit limit;
    Pdrls__Duration reset;
} status_parts;

static void fill_status(status_parts *p, const pd_rls_status *s) {
    pdrls__descriptor_status__init(&p->status);
    p->status.code = (Pdrls__Code)s->code;
    p->status.limit_remaining = s->limit_remaining;
    if (s->has_limit) {
        pdrls__rate_limit__init(&p->limit);
        p->limit.requests_per_unit = s->requests_per_unit;
        p->limit.unit = (Pdrls__Unit)s->unit;
        p->limit.name = (char *)(s->limit_name != NULL ? s->limit_name : "");
        p->status.current_limit = &p->limit;
    }
    if (s->duration_until_reset_ms >= 0) {
        pdrls__duration__init(&p->reset);
        p->reset.seconds = s->duration_until_reset_ms / 1000;
        p->reset.nanos = (int32_t)(s->duration_until_reset_ms % 1000) * 1000000;
        p->status.duration_until_reset = &p->reset;
    }
}

uint8_t *pd_rls_encode_response(const pd_rls_response *resp, size_t reserve, size_t *len) {
    size_t ns = resp->nstatuses, nh = resp->nheaders;
    /* One block: the statuses' parts and pointers, the headers and theirs. */
    size_t bytes = ns * (sizeof(status_parts) + sizeof(void *)) +
                   nh * (sizeof(Pdrls__HeaderValue) + sizeof(void *)) + 1;
    char *block = malloc(bytes);
    if (block == NULL)
        return NULL;
    status_parts *parts = (status_parts *)block;
    Pdrls__HeaderValue *hv = (Pdrls__HeaderValue *)(parts + ns);
    Pdrls__DescriptorStatus **sp = (Pdrls__DescriptorStatus **)(hv + nh);
    Pdrls__HeaderValue **hp = (Pdrls__HeaderValue **)(sp + ns);
    Pdrls__Response m = PDRLS__RESPONSE__INIT;
    m.overall_code = (Pdrls__Code)resp->overall_code;
    for (size_t i = 0; i < ns; i++) {
        fill_status(&parts[i], &resp->statuses[i]);
        sp[i] = &parts[i].status;
    }
    for (size_t i = 0; i < nh; i++) {
        pdrls__header_value__init(&hv[i]);
        hv[i].key = (char *)resp->headers[i].name;
        hv[i].value = (char *)resp->headers[i].value;
        hp[i] = &hv[i];
    }
    m.n_statuses = ns;
    m.statuses = sp;
    m.n_response_headers_to_add = nh;
    m.response_headers_to_add = hp;
    size_t n = pdrls__response__get_packed_size(&m);
    uint8_t *out = malloc(reserve + n + 1);
    if (out != NULL)
        *len = pdrls__response__pack(&m, out + reserve);
    free(block);
    return out;
}

/* ---- health ------------------------------------------------------------- */

int pd_rls_decode_health(const uint8_t *buf, size_t len, char *service, size_t cap,
                         size_t *service_len) {
    Pdrls__HealthCheckRequest *m = pdrls__health_check_request__unpack(NULL, len, buf);
    if (m == NULL)
        return -1;
    size_t n = m->service != NULL ? strlen(m->service) : 0;
    *service_len = n;
    if (cap > 0) {
        size_t keep = n < cap - 1 ? n : cap - 1;
        memcpy(service, m->service != NULL ? m->service : "", keep);
        service[keep] = '\0';
    }
    pdrls__health_check_request__free_unpacked(m, NULL);
    return 0;
}

size_t pd_rls_encode_health(int status, uint8_t *out) {
    Pdrls__HealthCheckResponse m = PDRLS__HEALTH_CHECK_RESPONSE__INIT;
    m.status = (Pdrls__HealthCheckResponse__ServingStatus)status;
    return pdrls__health_check_response__pack(&m, out); /* tag + one-byte varint */
}
