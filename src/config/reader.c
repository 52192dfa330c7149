/* reader.c — the walker of the config file (porteiro_config.h, "A
 * program's own sections"): a mapping walked with a table of its fields,
 * scalars read with the same checks everywhere, errors in one form,
 * "FILE:LINE: PATH: message". The library's schema (config_walk.c) and
 * porteirod's (daemon/ops/daemon_config.c) are both tables of it. */
#include <ctype.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "config/config.h"

porteiro_status porteiro_config_fail(porteiro_config_reader *r, const porteiro_config_value *v,
                                     const char *path, const char *fmt, ...) {
    char msg[256];
    const yaml_node_t *n = pt_config_node(v);
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof(msg), fmt, ap);
    va_end(ap);
    if (r != NULL && r->errbuf != NULL && r->errlen > 0)
        snprintf(r->errbuf, r->errlen, "%s:%zu: %s: %s", r->file,
                 n != NULL ? (size_t)n->start_mark.line + 1 : (size_t)1,
                 path != NULL && path[0] != '\0' ? path : "config", msg);
    return PORTEIRO_ERR_CONFIG;
}

/* libyaml NUL-terminates a scalar; a NUL byte inside (from an escape) would
 * cut it, so it is refused. */
const char *porteiro_config_scalar(porteiro_config_reader *r, const porteiro_config_value *v,
                                   const char *path, const char *want) {
    const yaml_node_t *n = pt_config_node(v);
    if (n == NULL || n->type != YAML_SCALAR_NODE) {
        porteiro_config_fail(r, v, path, "expected %s", want);
        return NULL;
    }
    const char *s = (const char *)n->data.scalar.value;
    if (strlen(s) != n->data.scalar.length) {
        porteiro_config_fail(r, v, path, "contains a NUL byte");
        return NULL;
    }
    /* A plain ~ or null is YAML's null: nothing was given. */
    if (n->data.scalar.style == YAML_PLAIN_SCALAR_STYLE &&
        (strcmp(s, "~") == 0 || strcmp(s, "null") == 0 || strcmp(s, "Null") == 0 ||
         strcmp(s, "NULL") == 0)) {
        porteiro_config_fail(r, v, path, "expected %s, got null", want);
        return NULL;
    }
    return s;
}

porteiro_config_kind porteiro_config_value_kind(const porteiro_config_value *v, size_t *count) {
    const yaml_node_t *n = pt_config_node(v);
    porteiro_config_kind kind = PORTEIRO_CONFIG_NONE;
    size_t len = 0;
    if (n != NULL && n->type == YAML_SCALAR_NODE) {
        kind = PORTEIRO_CONFIG_SCALAR;
    } else if (n != NULL && n->type == YAML_SEQUENCE_NODE) {
        kind = PORTEIRO_CONFIG_SEQUENCE;
        len = (size_t)(n->data.sequence.items.top - n->data.sequence.items.start);
    } else if (n != NULL && n->type == YAML_MAPPING_NODE) {
        kind = PORTEIRO_CONFIG_MAPPING;
        len = (size_t)(n->data.mapping.pairs.top - n->data.mapping.pairs.start);
    }
    if (count != NULL)
        *count = len;
    return kind;
}

const porteiro_config_value *porteiro_config_value_at(porteiro_config_reader *r,
                                                      const porteiro_config_value *v, size_t i,
                                                      const porteiro_config_value **key) {
    const yaml_node_t *n = pt_config_node(v);
    size_t count = 0;
    porteiro_config_kind kind = porteiro_config_value_kind(v, &count);
    if (key != NULL)
        *key = NULL;
    if (r == NULL || i >= count)
        return NULL;
    if (kind == PORTEIRO_CONFIG_SEQUENCE)
        return pt_config_value(yaml_document_get_node(r->doc, n->data.sequence.items.start[i]));
    const yaml_node_pair_t *pair = &n->data.mapping.pairs.start[i];
    if (key != NULL)
        *key = pt_config_value(yaml_document_get_node(r->doc, pair->key));
    return pt_config_value(yaml_document_get_node(r->doc, pair->value));
}

/* name is one of the fields of a porteiro_config_parse_with caller. */
static bool is_extra(const porteiro_config_reader *r, const char *name) {
    for (size_t i = 0; i < r->nextra; i++)
        if (r->extra[i].name != NULL && strcmp(r->extra[i].name, name) == 0)
            return true;
    return false;
}

porteiro_status porteiro_config_walk(porteiro_config_reader *r, const porteiro_config_value *v,
                                     const char *path, const porteiro_config_field *fields,
                                     size_t nfields, unsigned flags, void *target) {
    bool seen[PORTEIRO_CONFIG_MAX_FIELDS] = {false};
    bool shared = (flags & PORTEIRO_CONFIG_SHARED) != 0;
    size_t count = 0;
    if (path == NULL)
        path = "";
    if (nfields > PORTEIRO_CONFIG_MAX_FIELDS || (fields == NULL && nfields > 0))
        return porteiro_config_fail(r, v, path, "a table of more than %d fields",
                                    PORTEIRO_CONFIG_MAX_FIELDS);
    if (porteiro_config_value_kind(v, &count) != PORTEIRO_CONFIG_MAPPING)
        return porteiro_config_fail(r, v, path, "expected a mapping");
    for (size_t p = 0; p < count; p++) {
        const porteiro_config_value *k, *value = porteiro_config_value_at(r, v, p, &k);
        const char *name = porteiro_config_scalar(r, k, path, "a field name");
        if (name == NULL)
            return PORTEIRO_ERR_CONFIG;
        char sub[PORTEIRO_CONFIG_PATH_MAX];
        /* A path deeper than the buffer is cut: it only names the place. */
        if (snprintf(sub, sizeof(sub), "%s%s%.64s", path, path[0] ? "." : "", name) >=
            (int)sizeof(sub))
            sub[sizeof(sub) - 1] = '\0';
        size_t i = 0;
        while (i < nfields && strcmp(fields[i].name, name) != 0)
            i++;
        if (i == nfields) {
            /* A shared mapping's other names are another reader's; so are a
             * caller's top-level names in the library's walk. */
            if (shared || (path[0] == '\0' && is_extra(r, name)))
                continue;
            return porteiro_config_fail(r, k, sub, "unknown field");
        }
        if (seen[i])
            return porteiro_config_fail(r, k, sub, "given twice");
        seen[i] = true;
        /* handler NULL: a field another reader owns, skipped. */
        porteiro_status st = fields[i].handler != NULL
                                 ? fields[i].handler(r, value, sub, &fields[i], target)
                                 : PORTEIRO_OK;
        if (st != PORTEIRO_OK)
            return st;
    }
    for (size_t i = 0; !shared && i < nfields; i++)
        if (fields[i].required && !seen[i])
            return porteiro_config_fail(r, v, path[0] ? path : "config", "missing field '%s'",
                                        fields[i].name);
    return PORTEIRO_OK;
}

/* ---- the stock handlers ---- */

porteiro_status porteiro_config_set_int(porteiro_config_reader *r, const porteiro_config_value *v,
                                        const char *path, const porteiro_config_field *f,
                                        void *target) {
    const char *s = porteiro_config_scalar(r, v, path, "an integer");
    if (s == NULL)
        return PORTEIRO_ERR_CONFIG;
    long long min = f->min, max = f->max;
    const char *p = s;
    bool neg = *p == '-';
    int64_t x = 0;
    p += neg;
    if (!isdigit((unsigned char)*p))
        return porteiro_config_fail(r, v, path, "expected an integer, got '%.40s'", s);
    for (; isdigit((unsigned char)*p); p++) {
        if (x > (INT64_MAX - 9) / 10)
            return porteiro_config_fail(r, v, path, "must be between %lld and %lld", min, max);
        x = x * 10 + (*p - '0');
    }
    if (*p != '\0')
        return porteiro_config_fail(r, v, path, "expected an integer, got '%.40s'", s);
    x = neg ? -x : x;
    if (x < f->min || x > f->max)
        return porteiro_config_fail(r, v, path, "must be between %lld and %lld", min, max);
    memcpy((char *)target + f->offset, &x, sizeof(x));
    return PORTEIRO_OK;
}

porteiro_status porteiro_config_set_string(porteiro_config_reader *r,
                                           const porteiro_config_value *v, const char *path,
                                           const porteiro_config_field *f, void *target) {
    const char *s = porteiro_config_scalar(r, v, path, "a string");
    if (s == NULL)
        return PORTEIRO_ERR_CONFIG;
    size_t max = f->max > 0 ? (size_t)f->max : 0;
    if (*s == '\0')
        return porteiro_config_fail(r, v, path, "must not be empty");
    if (strlen(s) > max)
        return porteiro_config_fail(r, v, path, "longer than %zu bytes", max);
    char *copy = strdup(s), *old;
    if (copy == NULL)
        return porteiro_config_fail(r, v, path, "out of memory");
    memcpy(&old, (char *)target + f->offset, sizeof(old));
    free(old);
    memcpy((char *)target + f->offset, &copy, sizeof(copy));
    return PORTEIRO_OK;
}

porteiro_status porteiro_config_set_bool(porteiro_config_reader *r, const porteiro_config_value *v,
                                         const char *path, const porteiro_config_field *f,
                                         void *target) {
    const char *s = porteiro_config_scalar(r, v, path, "true or false");
    if (s == NULL)
        return PORTEIRO_ERR_CONFIG;
    if (strcmp(s, "true") != 0 && strcmp(s, "false") != 0)
        return porteiro_config_fail(r, v, path, "expected true or false, got '%.40s'", s);
    bool b = s[0] == 't';
    memcpy((char *)target + f->offset, &b, sizeof(b));
    return PORTEIRO_OK;
}

porteiro_status porteiro_config_set_duration(porteiro_config_reader *r,
                                             const porteiro_config_value *v, const char *path,
                                             const porteiro_config_field *f, void *target) {
    const char *s = porteiro_config_scalar(r, v, path, "a duration");
    int64_t ms;
    if (s == NULL)
        return PORTEIRO_ERR_CONFIG;
    if (porteiro_parse_duration(s, &ms) != PORTEIRO_OK)
        return porteiro_config_fail(
            r, v, path, "expected a duration such as 250ms, 1s, 1m, 1h, 1d, got '%.40s'", s);
    if ((f->min != 0 || f->max != 0) && (ms < f->min || ms > f->max))
        return porteiro_config_fail(r, v, path, "must be between %lldms and %lldms, got '%.40s'",
                                    (long long)f->min, (long long)f->max, s);
    memcpy((char *)target + f->offset, &ms, sizeof(ms));
    return PORTEIRO_OK;
}
