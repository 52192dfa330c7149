/* config.c — porteiro_config_load / _parse / _free and the accessors: reads
 * at most 1 MiB, parses one YAML document with libyaml, and hands it to the
 * schema walk (config_walk.c). */
#include "config/config.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static void set_error(char *errbuf, size_t errlen, const char *file, size_t line, const char *what,
                      const char *msg) {
    if (errbuf != NULL && errlen > 0)
        snprintf(errbuf, errlen, "%s:%zu: %s: %s", file, line, what, msg);
}

void porteiro_config_free(porteiro_config *cfg) {
    if (cfg == NULL)
        return;
    free(cfg->redis_url);
    free(cfg->sentinel_password);
    free(cfg->tls_ca);
    free(cfg->tls_ca_dir);
    free(cfg->tls_cert);
    free(cfg->tls_key);
    free(cfg->tls_server_name);
    free(cfg->prefix);
    for (size_t i = 0; i < cfg->npolicies; i++) {
        free((char *)cfg->policies[i].name);
        free((char *)cfg->policies[i].global_home);
        if (cfg->tiers != NULL)
            pt_policy_tiers_free(&cfg->tiers[i]);
    }
    free(cfg->policies);
    free(cfg->tiers);
    free(cfg);
}

/* libyaml's own complaint, with its line (marks count from 0). */
static void parser_error(const yaml_parser_t *parser, const char *file, char *errbuf,
                         size_t errlen) {
    char msg[256];
    const yaml_mark_t *mark = parser->problem ? &parser->problem_mark : &parser->context_mark;
    snprintf(msg, sizeof(msg), "%s%s%s", parser->problem ? parser->problem : "malformed YAML",
             parser->context ? " " : "", parser->context ? parser->context : "");
    set_error(errbuf, errlen, file, mark->line + 1, "syntax", msg);
}

/* Exactly one document: a second one would be silently ignored. */
static int load_document(yaml_parser_t *parser, yaml_document_t *doc, const char *file,
                         char *errbuf, size_t errlen) {
    if (!yaml_parser_load(parser, doc)) {
        parser_error(parser, file, errbuf, errlen);
        return -1;
    }
    yaml_document_t extra;
    if (!yaml_parser_load(parser, &extra)) {
        parser_error(parser, file, errbuf, errlen);
        yaml_document_delete(doc);
        return -1;
    }
    yaml_node_t *more = yaml_document_get_root_node(&extra);
    size_t line = more != NULL ? more->start_mark.line + 1 : 0;
    yaml_document_delete(&extra);
    if (more != NULL) {
        set_error(errbuf, errlen, file, line, "document", "only one YAML document is allowed");
        yaml_document_delete(doc);
        return -1;
    }
    return 0;
}

/* The library's walk of the document, then the caller's fields (if any)
 * of its top mapping. */
static porteiro_config *parse(const char *text, size_t len, const char *name,
                              const porteiro_config_field *fields, size_t nfields, void *target,
                              char *errbuf, size_t errlen) {
    const char *file = name != NULL ? name : "-";
    if (text == NULL) {
        set_error(errbuf, errlen, file, 0, "file", "no text given");
        return NULL;
    }
    if (len > PT_CONFIG_MAX_BYTES) {
        set_error(errbuf, errlen, file, 0, "file", "larger than 1 MiB");
        return NULL;
    }
    porteiro_config *cfg = calloc(1, sizeof(*cfg));
    if (cfg == NULL) {
        set_error(errbuf, errlen, file, 0, "file", "out of memory");
        return NULL;
    }
    cfg->opts.struct_size = sizeof(cfg->opts); /* porteiro_options_init, calloc did the rest */
    yaml_parser_t parser;
    yaml_document_t doc;
    if (!yaml_parser_initialize(&parser)) {
        free(cfg);
        set_error(errbuf, errlen, file, 0, "file", "out of memory");
        return NULL;
    }
    yaml_parser_set_input_string(&parser, (const unsigned char *)text, len);
    int rc = load_document(&parser, &doc, file, errbuf, errlen);
    yaml_parser_delete(&parser);
    if (rc == 0) {
        pt_config_ctx ctx = {&doc, file, errbuf, errlen, cfg, fields, fields != NULL ? nfields : 0};
        rc = pt_config_walk(&ctx) != PORTEIRO_OK ? -1 : 0;
        if (rc == 0 && fields != NULL &&
            porteiro_config_walk(&ctx, pt_config_value(yaml_document_get_root_node(&doc)), "",
                                 fields, nfields, PORTEIRO_CONFIG_SHARED, target) != PORTEIRO_OK)
            rc = -1;
        yaml_document_delete(&doc);
    }
    if (rc != 0) {
        porteiro_config_free(cfg);
        return NULL;
    }
    return cfg;
}

porteiro_config *porteiro_config_parse(const char *text, size_t len, const char *name, char *errbuf,
                                       size_t errlen) {
    return parse(text, len, name, NULL, 0, NULL, errbuf, errlen);
}

porteiro_config *porteiro_config_parse_with(const char *text, size_t len, const char *name,
                                            const porteiro_config_field *fields, size_t nfields,
                                            void *target, char *errbuf, size_t errlen) {
    return parse(text, len, name, fields, nfields, target, errbuf, errlen);
}

/* The whole file, up to the size bound, NUL-terminated. */
static char *read_file(const char *path, size_t *len, char *errbuf, size_t errlen) {
    FILE *f = fopen(path, "rb");
    if (f == NULL) {
        set_error(errbuf, errlen, path, 0, "file", strerror(errno));
        return NULL;
    }
    char *buf = malloc(PT_CONFIG_MAX_BYTES + 2);
    size_t n = buf != NULL ? fread(buf, 1, PT_CONFIG_MAX_BYTES + 1, f) : 0;
    int failed = buf == NULL || ferror(f);
    fclose(f);
    if (failed || n > PT_CONFIG_MAX_BYTES) {
        set_error(errbuf, errlen, path, 0, "file",
                  buf == NULL ? "out of memory"
                  : failed    ? "read error"
                              : "larger than 1 MiB");
        free(buf);
        return NULL;
    }
    buf[n] = '\0';
    *len = n;
    return buf;
}

porteiro_config *porteiro_config_load(const char *path, char *errbuf, size_t errlen) {
    size_t len = 0;
    if (path == NULL) {
        set_error(errbuf, errlen, "-", 0, "file", "no path given");
        return NULL;
    }
    char *text = read_file(path, &len, errbuf, errlen);
    if (text == NULL)
        return NULL;
    porteiro_config *cfg = porteiro_config_parse(text, len, path, errbuf, errlen);
    free(text);
    return cfg;
}

const porteiro_options *porteiro_config_options(const porteiro_config *cfg) {
    return cfg != NULL ? &cfg->opts : NULL;
}

const porteiro_policy *porteiro_config_policy(const porteiro_config *cfg, const char *name) {
    for (size_t i = 0; cfg != NULL && name != NULL && i < cfg->npolicies; i++)
        if (strcmp(cfg->policies[i].name, name) == 0)
            return &cfg->policies[i];
    return NULL;
}

size_t porteiro_config_policy_count(const porteiro_config *cfg) {
    return cfg != NULL ? cfg->npolicies : 0;
}

const porteiro_policy *porteiro_config_policy_at(const porteiro_config *cfg, size_t i) {
    return cfg != NULL && i < cfg->npolicies ? &cfg->policies[i] : NULL;
}
