/* load.c — envoy ratelimit's YAML read into a descriptor tree (envoy.h).
 *
 * Each mapping is checked against its fields: an unknown field, a field
 * given twice, a wrong kind of node, a bad unit, an empty key, two rules
 * with the same key and value at one level, a domain given twice: each is
 * an error "FILE:LINE: PATH: message", e.g.
 * "api.yaml:7: descriptors[0].rate_limit.unit: unknown unit 'sec'". */
#include <dirent.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/stat.h>
#include <yaml.h>

#include "rules/envoy.h"

#define PATH_LEN 256

typedef struct ctx {
    yaml_document_t *doc;
    const char *file;
    char *errbuf;
    size_t errlen;
    pe_config *cfg;
    size_t nrules; /* nodes read so far in this file */
} ctx;

/* "FILE:LINE: PATH: message" (LINE of node n, 1 when NULL; PATH "config"
 * when empty), as porteiro's own config file says its errors. */
static int fail(ctx *c, const yaml_node_t *n, const char *path, const char *fmt, ...) {
    char msg[256];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof(msg), fmt, ap);
    va_end(ap);
    if (c->errbuf != NULL && c->errlen > 0)
        snprintf(c->errbuf, c->errlen, "%s:%zu: %s: %s", c->file,
                 n != NULL ? (size_t)n->start_mark.line + 1 : (size_t)1,
                 path[0] != '\0' ? path : "config", msg);
    return -1;
}

/* A scalar's text (any scalar reads as a string, as envoy ratelimit's YAML
 * library does); NULL after an error. */
static const char *scalar(ctx *c, yaml_node_t *n, const char *path) {
    if (n == NULL || n->type != YAML_SCALAR_NODE) {
        fail(c, n, path, "expected a scalar");
        return NULL;
    }
    const char *s = (const char *)n->data.scalar.value;
    if (strlen(s) != n->data.scalar.length) {
        fail(c, n, path, "contains a NUL byte");
        return NULL;
    }
    return s;
}

/* YAML 1.1 booleans, as envoy ratelimit reads them. */
static int get_bool(ctx *c, yaml_node_t *n, const char *path, bool *out) {
    static const char *const yes[] = {"true", "yes", "on", "y"};
    static const char *const no[] = {"false", "no", "off", "n"};
    const char *s = scalar(c, n, path);
    if (s == NULL)
        return -1;
    for (size_t i = 0; i < 4; i++) {
        if (strcasecmp(s, yes[i]) == 0)
            return *out = true, 0;
        if (strcasecmp(s, no[i]) == 0)
            return *out = false, 0;
    }
    return fail(c, n, path, "expected true or false, got '%.40s'", s);
}

static int get_u32(ctx *c, yaml_node_t *n, const char *path, uint32_t *out) {
    const char *s = scalar(c, n, path);
    if (s == NULL)
        return -1;
    uint64_t v = 0;
    if (*s == '\0')
        return fail(c, n, path, "expected an integer");
    for (const char *p = s; *p != '\0'; p++) {
        if (*p < '0' || *p > '9' || v > UINT32_MAX)
            return fail(c, n, path, "expected an integer from 0 to 4294967295, got '%.40s'", s);
        v = v * 10 + (uint64_t)(*p - '0');
    }
    if (v > UINT32_MAX)
        return fail(c, n, path, "expected an integer from 0 to 4294967295, got '%.40s'", s);
    *out = (uint32_t)v;
    return 0;
}

static const char *const unit_names[] = {NULL,  "second", "minute", "hour",
                                         "day", "month",  "year",   "week"};

const char *pe_unit_name(pe_unit unit) {
    return (unsigned)unit < 8 ? unit_names[unit] : NULL;
}

int64_t pe_unit_seconds(pe_unit unit) {
    static const int64_t secs[] = {0, 1, 60, 3600, 86400, 30 * 86400LL, 365 * 86400LL, 7 * 86400LL};
    return (unsigned)unit < 8 ? secs[unit] : 0;
}

/* Walks a mapping: calls fn for each field, which says whether it knows
 * it; a field given twice is an error. */
typedef int field_fn(ctx *c, const char *name, yaml_node_t *v, const char *path, void *arg);

static int walk_map(ctx *c, yaml_node_t *n, const char *path, field_fn *fn, void *arg) {
    if (n == NULL || n->type != YAML_MAPPING_NODE)
        return fail(c, n, path, "expected a mapping");
    for (yaml_node_pair_t *p = n->data.mapping.pairs.start; p < n->data.mapping.pairs.top; p++) {
        yaml_node_t *k = yaml_document_get_node(c->doc, p->key);
        const char *name = scalar(c, k, path);
        if (name == NULL)
            return -1;
        for (yaml_node_pair_t *q = n->data.mapping.pairs.start; q < p; q++) {
            yaml_node_t *k2 = yaml_document_get_node(c->doc, q->key);
            if (k2->type == YAML_SCALAR_NODE &&
                strcmp((const char *)k2->data.scalar.value, name) == 0)
                return fail(c, k, path, "'%s' is given twice", name);
        }
        char sub[PATH_LEN];
        /* The path only names the field in messages: cut, not overrun. */
        snprintf(sub, sizeof(sub), "%.200s%s%.50s", path, path[0] != '\0' ? "." : "", name);
        if (fn(c, name, yaml_document_get_node(c->doc, p->value), sub, arg) != 0)
            return -1;
    }
    return 0;
}

static void rule_free(pe_rule *r) {
    free(r->key);
    free(r->value);
    free(r->name);
    for (size_t i = 0; i < r->nreplaces; i++)
        free(r->replaces[i]);
    free(r->replaces);
    free(r->path);
    for (size_t i = 0; i < r->nchildren; i++)
        rule_free(&r->children[i]);
    free(r->children);
}

/* rate_limit's fields. */
typedef struct limit_read {
    pe_rule *r;
    bool has_unit;
    yaml_node_t *node;
} limit_read;

static int replaces_field(ctx *c, const char *name, yaml_node_t *v, const char *path, void *arg) {
    char **out = arg;
    if (strcmp(name, "name") != 0)
        return fail(c, v, path, "unknown field (replaces entries have: name)");
    const char *s = scalar(c, v, path);
    if (s == NULL)
        return -1;
    if (*s == '\0')
        return fail(c, v, path, "a replaces entry needs a name");
    *out = strdup(s);
    return *out != NULL ? 0 : fail(c, v, path, "out of memory");
}

static int read_replaces(ctx *c, yaml_node_t *v, const char *path, pe_rule *r) {
    if (v->type != YAML_SEQUENCE_NODE)
        return fail(c, v, path, "expected a list of {name: ...}");
    size_t n = (size_t)(v->data.sequence.items.top - v->data.sequence.items.start);
    r->replaces = calloc(n > 0 ? n : 1, sizeof(*r->replaces));
    if (r->replaces == NULL)
        return fail(c, v, path, "out of memory");
    for (size_t i = 0; i < n; i++) {
        char sub[PATH_LEN];
        snprintf(sub, sizeof(sub), "%s[%zu]", path, i);
        yaml_node_t *e = yaml_document_get_node(c->doc, v->data.sequence.items.start[i]);
        char *name = NULL;
        if (walk_map(c, e, sub, replaces_field, &name) != 0) {
            free(name); /* a later field of the entry failed */
            return -1;
        }
        if (name == NULL)
            return fail(c, e, sub, "a replaces entry needs a name");
        r->replaces[r->nreplaces++] = name;
    }
    return 0;
}

static int limit_field(ctx *c, const char *name, yaml_node_t *v, const char *path, void *arg) {
    limit_read *l = arg;
    pe_rule *r = l->r;
    if (strcmp(name, "unit") == 0) {
        const char *s = scalar(c, v, path);
        if (s == NULL)
            return -1;
        for (int u = 1; u < 8; u++)
            if (strcasecmp(s, unit_names[u]) == 0)
                r->unit = (pe_unit)u;
        if (r->unit == PE_UNIT_UNKNOWN)
            return fail(c, v, path,
                        "unknown unit '%.40s' (second, minute, hour, day, week, month, year)", s);
        l->has_unit = true;
        return 0;
    }
    if (strcmp(name, "requests_per_unit") == 0)
        return get_u32(c, v, path, &r->requests_per_unit);
    if (strcmp(name, "unlimited") == 0)
        return get_bool(c, v, path, &r->unlimited);
    if (strcmp(name, "name") == 0) {
        const char *s = scalar(c, v, path);
        if (s == NULL)
            return -1;
        free(r->name);
        r->name = strdup(s);
        return r->name != NULL ? 0 : fail(c, v, path, "out of memory");
    }
    if (strcmp(name, "replaces") == 0)
        return read_replaces(c, v, path, r);
    return fail(
        c, v, path,
        "unknown field (rate_limit has: unit, requests_per_unit, unlimited, name, replaces)");
}

static int read_limit(ctx *c, yaml_node_t *v, const char *path, pe_rule *r) {
    limit_read l = {r, false, v};
    r->has_limit = true;
    if (walk_map(c, v, path, limit_field, &l) != 0)
        return -1;
    if (r->unlimited && l.has_unit)
        return fail(c, v, path, "an unlimited rate_limit takes no unit");
    if (!r->unlimited && !l.has_unit)
        return fail(c, v, path, "a rate_limit needs a unit (or unlimited: true)");
    if (r->requests_per_unit > 1000000000)
        return fail(c, v, path, "requests_per_unit above 1000000000 (porteiro's bound)");
    for (size_t i = 0; i < r->nreplaces; i++)
        if (r->name != NULL && strcmp(r->replaces[i], r->name) == 0)
            return fail(c, v, path, "a rate_limit cannot replace its own name '%s'", r->name);
    return 0;
}

static int read_rules(ctx *c, yaml_node_t *v, const char *path, const char *parent, int depth,
                      pe_rule **out, size_t *nout);

static int rule_field(ctx *c, const char *name, yaml_node_t *v, const char *path, void *arg) {
    pe_rule *r = arg;
    bool *flag = NULL;
    if (strcmp(name, "key") == 0 || strcmp(name, "value") == 0) {
        const char *s = scalar(c, v, path);
        if (s == NULL)
            return -1;
        char **to = name[0] == 'k' ? &r->key : &r->value;
        free(*to);
        *to = strdup(s);
        return *to != NULL ? 0 : fail(c, v, path, "out of memory");
    }
    if (strcmp(name, "rate_limit") == 0)
        return read_limit(c, v, path, r);
    if (strcmp(name, "descriptors") == 0)
        return 0; /* read once key and value are known (read_rule) */
    if (strcmp(name, "shadow_mode") == 0)
        flag = &r->shadow_mode;
    else if (strcmp(name, "detailed_metric") == 0)
        flag = &r->detailed_metric;
    else if (strcmp(name, "value_to_metric") == 0)
        flag = &r->value_to_metric;
    else if (strcmp(name, "share_threshold") == 0)
        flag = &r->share_threshold;
    if (flag == NULL)
        return fail(c, v, path,
                    "unknown field (a descriptor has: key, value, rate_limit, descriptors, "
                    "shadow_mode, detailed_metric, value_to_metric, share_threshold)");
    return get_bool(c, v, path, flag);
}

static yaml_node_t *field_of(ctx *c, yaml_node_t *map, const char *name) {
    for (yaml_node_pair_t *p = map->data.mapping.pairs.start; p < map->data.mapping.pairs.top;
         p++) {
        yaml_node_t *k = yaml_document_get_node(c->doc, p->key);
        if (k->type == YAML_SCALAR_NODE && strcmp((const char *)k->data.scalar.value, name) == 0)
            return yaml_document_get_node(c->doc, p->value);
    }
    return NULL;
}

static bool same_value(const char *a, const char *b) {
    return (a == NULL && b == NULL) || (a != NULL && b != NULL && strcmp(a, b) == 0);
}

static int read_rule(ctx *c, yaml_node_t *v, const char *path, const char *parent, int depth,
                     pe_rule *r) {
    r->line = (size_t)v->start_mark.line + 1;
    if (++c->nrules + c->cfg->nrules > PE_MAX_RULES)
        return fail(c, v, path, "more than %d descriptors in the configuration", PE_MAX_RULES);
    if (walk_map(c, v, path, rule_field, r) != 0)
        return -1;
    if (r->key == NULL || r->key[0] == '\0')
        return fail(c, v, path, "a descriptor needs a non-empty key");
    if (r->value != NULL && r->value[0] == '\0') { /* as envoy ratelimit: "" is no value */
        free(r->value);
        r->value = NULL;
    }
    r->wildcard = r->value != NULL && r->value[strlen(r->value) - 1] == '*';
    if (r->share_threshold && !r->wildcard)
        return fail(c, v, path, "share_threshold needs a wildcard value (ending in '*')");
    r->name = r->name != NULL ? r->name : strdup("");
    size_t plen = strlen(parent) + strlen(r->key) + (r->value ? strlen(r->value) : 0) + 3;
    r->path = malloc(plen);
    if (r->name == NULL || r->path == NULL)
        return fail(c, v, path, "out of memory");
    snprintf(r->path, plen, "%s.%s%s%s", parent, r->key, r->value ? "_" : "",
             r->value ? r->value : "");
    yaml_node_t *kids = field_of(c, v, "descriptors");
    if (kids == NULL)
        return 0;
    char sub[PATH_LEN];
    snprintf(sub, sizeof(sub), "%.240s.descriptors", path); /* a path is cut, not overrun */
    if (depth + 1 >= PE_MAX_DEPTH)
        return fail(c, kids, sub, "descriptors nested more than %d deep", PE_MAX_DEPTH);
    return read_rules(c, kids, sub, r->path, depth + 1, &r->children, &r->nchildren);
}

static int read_rules(ctx *c, yaml_node_t *v, const char *path, const char *parent, int depth,
                      pe_rule **out, size_t *nout) {
    if (v->type == YAML_SCALAR_NODE && v->data.scalar.length == 0)
        return 0; /* "descriptors:" with nothing: none */
    if (v->type != YAML_SEQUENCE_NODE)
        return fail(c, v, path, "expected a list of descriptors");
    size_t n = (size_t)(v->data.sequence.items.top - v->data.sequence.items.start);
    *out = calloc(n > 0 ? n : 1, sizeof(**out));
    if (*out == NULL)
        return fail(c, v, path, "out of memory");
    for (size_t i = 0; i < n; i++) {
        char sub[PATH_LEN];
        snprintf(sub, sizeof(sub), "%s[%zu]", path, i);
        yaml_node_t *e = yaml_document_get_node(c->doc, v->data.sequence.items.start[i]);
        pe_rule *r = &(*out)[i];
        *nout = i + 1;
        if (read_rule(c, e, sub, parent, depth, r) != 0)
            return -1;
        for (size_t j = 0; j < i; j++)
            if (strcmp((*out)[j].key, r->key) == 0 && same_value((*out)[j].value, r->value))
                return fail(c, e, sub, "duplicate descriptor '%s' (also at line %zu)", r->path,
                            (*out)[j].line);
    }
    return 0;
}

/* The root: domain and descriptors. */
typedef struct root_read {
    pe_domain *d;
    yaml_node_t *descriptors;
    const char *descriptors_path;
} root_read;

static int root_field(ctx *c, const char *name, yaml_node_t *v, const char *path, void *arg) {
    root_read *rr = arg;
    if (strcmp(name, "domain") == 0) {
        const char *s = scalar(c, v, path);
        if (s == NULL)
            return -1;
        if (*s == '\0')
            return fail(c, v, path, "the domain is empty");
        rr->d->name = strdup(s);
        return rr->d->name != NULL ? 0 : fail(c, v, path, "out of memory");
    }
    if (strcmp(name, "descriptors") == 0) {
        rr->descriptors = v;
        return 0;
    }
    return fail(c, v, path, "unknown field (a file has: domain, descriptors)");
}

static void domain_free(pe_domain *d) {
    free(d->name);
    free(d->file);
    for (size_t i = 0; i < d->nchildren; i++)
        rule_free(&d->children[i]);
    free(d->children);
}

static int read_domain(ctx *c, pe_domain *d) {
    yaml_node_t *root = yaml_document_get_root_node(c->doc);
    if (root == NULL)
        return fail(c, NULL, "", "the file is empty (it needs a domain)");
    root_read rr = {d, NULL, NULL};
    if (walk_map(c, root, "", root_field, &rr) != 0)
        return -1;
    if (d->name == NULL)
        return fail(c, root, "domain", "missing (every file names its domain)");
    for (size_t i = 0; i < c->cfg->ndomains; i++)
        if (strcmp(c->cfg->domains[i].name, d->name) == 0)
            return fail(c, root, "domain", "duplicate domain '%s' (also in %s)", d->name,
                        c->cfg->domains[i].file);
    if (rr.descriptors == NULL)
        return 0;
    return read_rules(c, rr.descriptors, "descriptors", d->name, 0, &d->children, &d->nchildren);
}

/* Numbers every rule of d in cfg->rules. */
static void index_rules(pe_config *cfg, pe_rule *rules, size_t n, const char *file) {
    for (size_t i = 0; i < n; i++) {
        rules[i].id = cfg->nrules;
        rules[i].file = file;
        cfg->rules[cfg->nrules++] = &rules[i];
        index_rules(cfg, rules[i].children, rules[i].nchildren, file);
    }
}

pe_config *pe_config_new(void) {
    return calloc(1, sizeof(pe_config));
}

void pe_config_free(pe_config *cfg) {
    if (cfg == NULL)
        return;
    for (size_t i = 0; i < cfg->ndomains; i++)
        domain_free(&cfg->domains[i]);
    free(cfg->domains);
    free(cfg->rules);
    free(cfg);
}

static void parser_error(const yaml_parser_t *p, const char *file, char *errbuf, size_t errlen) {
    if (errbuf != NULL && errlen > 0)
        snprintf(errbuf, errlen, "%s:%zu: config: %s%s%s", file, (size_t)p->problem_mark.line + 1,
                 p->problem ? p->problem : "bad YAML", p->context ? " " : "",
                 p->context ? p->context : "");
}

static int add_document(pe_config *cfg, yaml_document_t *doc, const char *name, char *errbuf,
                        size_t errlen) {
    pe_domain d = {0};
    ctx c = {doc, name, errbuf, errlen, cfg, 0};
    int rc = read_domain(&c, &d);
    d.file = strdup(name);
    pe_domain *grown = rc == 0 && d.file != NULL
                           ? realloc(cfg->domains, (cfg->ndomains + 1) * sizeof(*grown))
                           : NULL;
    pe_rule **rules =
        grown != NULL ? realloc(cfg->rules, (cfg->nrules + c.nrules + 1) * sizeof(*rules)) : NULL;
    if (grown != NULL)
        cfg->domains = grown;
    if (rules == NULL) {
        if (rc == 0)
            fail(&c, NULL, "", "out of memory");
        domain_free(&d);
        return -1;
    }
    cfg->rules = rules;
    cfg->domains[cfg->ndomains] = d;
    /* The domain's rules are numbered where they now live. */
    pe_domain *at = &cfg->domains[cfg->ndomains++];
    index_rules(cfg, at->children, at->nchildren, at->file);
    return 0;
}

int pe_config_add_text(pe_config *cfg, const char *text, size_t len, const char *name, char *errbuf,
                       size_t errlen) {
    yaml_parser_t parser;
    yaml_document_t doc;
    if (len > PE_MAX_FILE_BYTES) {
        snprintf(errbuf, errlen, "%s:1: config: larger than %d bytes", name, PE_MAX_FILE_BYTES);
        return -1;
    }
    if (!yaml_parser_initialize(&parser)) {
        snprintf(errbuf, errlen, "%s:1: config: out of memory", name);
        return -1;
    }
    yaml_parser_set_input_string(&parser, (const unsigned char *)text, len);
    int rc = -1;
    if (!yaml_parser_load(&parser, &doc)) {
        parser_error(&parser, name, errbuf, errlen);
    } else {
        rc = add_document(cfg, &doc, name, errbuf, errlen);
        yaml_document_delete(&doc);
    }
    yaml_parser_delete(&parser);
    return rc;
}

static int add_file(pe_config *cfg, const char *path, char *errbuf, size_t errlen) {
    FILE *f = fopen(path, "rb");
    if (f == NULL) {
        snprintf(errbuf, errlen, "%s:1: config: cannot be read", path);
        return -1;
    }
    char *buf = malloc(PE_MAX_FILE_BYTES + 1);
    size_t n = buf != NULL ? fread(buf, 1, PE_MAX_FILE_BYTES + 1, f) : 0;
    fclose(f);
    int rc = buf != NULL ? pe_config_add_text(cfg, buf, n, path, errbuf, errlen) : -1;
    if (buf == NULL)
        snprintf(errbuf, errlen, "%s:1: config: out of memory", path);
    free(buf);
    return rc;
}

static bool is_yaml(const char *name, bool skip_dotfiles) {
    size_t n = strlen(name);
    if (name[0] == '.' && (skip_dotfiles || n < 2 || strcmp(name, "..") == 0))
        return false;
    return (n > 5 && strcmp(name + n - 5, ".yaml") == 0) ||
           (n > 4 && strcmp(name + n - 4, ".yml") == 0);
}

static int by_name(const void *a, const void *b) {
    return strcmp(*(char *const *)a, *(char *const *)b);
}

static int add_folder(pe_config *cfg, const char *dir, bool skip_dotfiles, char *errbuf,
                      size_t errlen) {
    DIR *d = opendir(dir);
    if (d == NULL) {
        snprintf(errbuf, errlen, "%s:1: config: the folder cannot be read", dir);
        return -1;
    }
    char **names = NULL;
    size_t n = 0;
    int rc = 0;
    for (struct dirent *e; (e = readdir(d)) != NULL;) {
        if (!is_yaml(e->d_name, skip_dotfiles))
            continue;
        char **grown = n < PE_MAX_FILES ? realloc(names, (n + 1) * sizeof(*names)) : NULL;
        if (grown == NULL || (grown[n] = strdup(e->d_name)) == NULL) {
            snprintf(errbuf, errlen, "%s:1: config: too many files (at most %d)", dir,
                     PE_MAX_FILES);
            names = grown != NULL ? grown : names;
            rc = -1;
            break;
        }
        names = grown;
        n++;
    }
    closedir(d);
    if (rc == 0 && n > 1)
        qsort(names, n, sizeof(*names), by_name);
    for (size_t i = 0; rc == 0 && i < n; i++) {
        char path[4096];
        snprintf(path, sizeof(path), "%s/%s", dir, names[i]);
        rc = add_file(cfg, path, errbuf, errlen);
    }
    for (size_t i = 0; i < n; i++)
        free(names[i]);
    free(names);
    return rc;
}

pe_config *pe_config_load(const char *path, bool skip_dotfiles, char *errbuf, size_t errlen) {
    struct stat st;
    pe_config *cfg = pe_config_new();
    if (cfg == NULL) {
        snprintf(errbuf, errlen, "%s:1: config: out of memory", path);
        return NULL;
    }
    int rc;
    if (stat(path, &st) != 0) {
        snprintf(errbuf, errlen, "%s:1: config: no such file or folder", path);
        rc = -1;
    } else if (S_ISDIR(st.st_mode)) {
        rc = add_folder(cfg, path, skip_dotfiles, errbuf, errlen);
    } else {
        rc = add_file(cfg, path, errbuf, errlen);
    }
    if (rc != 0) {
        pe_config_free(cfg);
        return NULL;
    }
    return cfg;
}
