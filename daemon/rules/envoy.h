/* envoy.h — envoy ratelimit's own configuration, read as it is (internal).
 *
 * A file, or a folder of *.yaml / *.yml files, each one `domain` with a tree
 * of `descriptors` (docs/envoy.md has the format and the matching rules
 * with worked examples). load.c reads the YAML into the tree below and
 * checks it; match.c finds the rule a request descriptor reaches and builds
 * its counter key and metric name. Pure: no clock, no I/O but reading the
 * files, no Redis. */
#ifndef PE_ENVOY_H
#define PE_ENVOY_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define PE_MAX_FILE_BYTES (1024 * 1024) /* one config file */
#define PE_MAX_FILES 1024               /* files in a config folder */
#define PE_MAX_DEPTH 16                 /* nested descriptor levels */
#define PE_MAX_RULES 100000             /* descriptor nodes in all files */

/* The units of RLS v3, with their protobuf numbers (as pd_rls_unit). */
typedef enum pe_unit {
    PE_UNIT_UNKNOWN = 0,
    PE_SECOND = 1,
    PE_MINUTE = 2,
    PE_HOUR = 3,
    PE_DAY = 4,
    PE_MONTH = 5,
    PE_YEAR = 6,
    PE_WEEK = 7
} pe_unit;

/* One node of a domain's descriptor tree. */
typedef struct pe_rule {
    char *key;
    char *value;    /* NULL: any value; "...*": a prefix (wildcard) */
    bool wildcard;  /* value ends in '*' */
    bool has_limit; /* rate_limit given (limited or unlimited) */
    bool unlimited;
    uint32_t requests_per_unit; /* 0: every hit is over the limit */
    pe_unit unit;               /* PE_UNIT_UNKNOWN when unlimited */
    char *name;                 /* rate_limit.name, "" when none */
    char **replaces;            /* names this limit replaces */
    size_t nreplaces;
    bool shadow_mode, detailed_metric, value_to_metric, share_threshold;
    char *path;       /* "domain.key_value.key": the metric name */
    size_t id;        /* index in pe_config.rules */
    const char *file; /* where it was read (for messages) */
    size_t line;
    struct pe_rule *children;
    size_t nchildren;
} pe_rule;

typedef struct pe_domain {
    char *name;
    pe_rule *children;
    size_t nchildren;
    char *file;
} pe_domain;

typedef struct pe_config {
    pe_domain *domains;
    size_t ndomains;
    pe_rule **rules; /* every node, by id (metrics) */
    size_t nrules;
} pe_config;

/* Reads a file, or every *.yaml / *.yml file of a folder (in name order;
 * skip_dotfiles: names beginning with '.' are left out). NULL on error,
 * with "FILE:LINE: PATH: message" in errbuf. */
pe_config *pe_config_load(const char *path, bool skip_dotfiles, char *errbuf, size_t errlen);
/* Adds one file's text (name: how messages call it) to cfg; 0, or -1 with
 * the message (cfg is then unchanged but for rules that stay unused). */
int pe_config_add_text(pe_config *cfg, const char *text, size_t len, const char *name, char *errbuf,
                       size_t errlen);
pe_config *pe_config_new(void);
void pe_config_free(pe_config *cfg);

/* The seconds of a unit (month = 30 days, year = 365 days); 0 if unknown. */
int64_t pe_unit_seconds(pe_unit unit);
/* "second" ... "year" (lower case), NULL if unknown. */
const char *pe_unit_name(pe_unit unit);

/* A request's descriptor entry (borrowed, not NUL-terminated). */
typedef struct pe_entry {
    const char *key;
    size_t key_len;
    const char *value;
    size_t value_len;
} pe_entry;

const pe_domain *pe_domain_find(const pe_config *cfg, const char *name, size_t len);

/* The rule a descriptor reaches (envoy ratelimit's matching: at each
 * level key + value, then a wildcard of that key, then the key alone; the
 * rule counts only when reached by the last entry and it has a
 * rate_limit). NULL: no rule limits it. path[i] gets the node entry i
 * reached (up to n; unused when NULL is returned). */
const pe_rule *pe_match(const pe_domain *d, const pe_entry *entries, size_t n,
                        const pe_rule **path);

/* The counter's key of a matched descriptor: each entry as key and value,
 * the value being the rule's own pattern where share_threshold shares a
 * wildcard's counter (path NULL: the request's values, for a limit the
 * request itself gives). Length-prefixed, so two descriptors never meet.
 * Returns the length written, or 0 when it needs more than outlen bytes. */
size_t pe_counter_key(const pe_entry *entries, size_t n, const pe_rule *const *path, char *out,
                      size_t outlen);

#endif
