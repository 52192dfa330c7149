/*
 * porteiro_config.h — the configuration file of libporteiro: a YAML file
 * (docs/config.md) that gives a limiter's options and its named policies,
 * with their tiers and per-client overrides. A program that builds its
 * options and policies in code does not need it.
 *
 * Ownership: a porteiro_config owns every string and policy it hands out;
 * they stay valid until porteiro_config_free. A loaded config is read-only:
 * several threads may read one at once.
 */
#ifndef PORTEIRO_CONFIG_H
#define PORTEIRO_CONFIG_H

#include "porteiro.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct porteiro_config porteiro_config;

/* Loads a config file, or parses len bytes of YAML text. On error returns
 * NULL with "FILE:LINE: message" (naming the field) in errbuf.
 *
 * The same file may hold porteirod's own settings: the top-level sections
 * listen, client_header_timeout, trusted_proxies, envoy, admin and spoe,
 * top.show and top.hash_key, and a policy's key, deny_status and delay.
 * The library skips them (porteirod reads and checks them: docs/config.md);
 * any other name it does not know is an error (but the names of a
 * porteiro_config_parse_with caller's fields, below). */
PORTEIRO_API porteiro_config *porteiro_config_load(const char *path, char *errbuf, size_t errlen);
PORTEIRO_API porteiro_config *porteiro_config_parse(const char *text, size_t len, const char *name,
                                                    char *errbuf, size_t errlen);
PORTEIRO_API void porteiro_config_free(porteiro_config *cfg);

/* The limiter options the file declares; the strings inside point into cfg
 * and stay valid until porteiro_config_free(). */
PORTEIRO_API const porteiro_options *porteiro_config_options(const porteiro_config *cfg);
/* NULL when there is no policy of that name. Valid until config_free. */
PORTEIRO_API const porteiro_policy *porteiro_config_policy(const porteiro_config *cfg,
                                                           const char *name);
PORTEIRO_API size_t porteiro_config_policy_count(const porteiro_config *cfg);
PORTEIRO_API const porteiro_policy *porteiro_config_policy_at(const porteiro_config *cfg, size_t i);

/* ---- Tiers (docs/config.md, "Tiers and overrides") ------------------ */

/* The request attribute that selects a policy's tier: for `tier: header
 * X-Plan`, "X-Plan". NULL when the policy has no tiers. Valid until
 * porteiro_config_free. */
PORTEIRO_API const char *porteiro_config_tier_header(const porteiro_config *cfg,
                                                     const porteiro_policy *policy);
/* The tiers of a policy of cfg, in the file's order: how many (0 without
 * tiers), and the i-th's name (NULL past the last) with its limits
 * (pointers into cfg, valid until porteiro_config_free). */
PORTEIRO_API size_t porteiro_config_tier_count(const porteiro_config *cfg,
                                               const porteiro_policy *policy);
PORTEIRO_API const char *porteiro_config_tier_at(const porteiro_config *cfg,
                                                 const porteiro_policy *policy, size_t i,
                                                 const porteiro_limit **limits, size_t *nlimits);
/* The per-client overrides the file gives the policy (overrides:). */
PORTEIRO_API size_t porteiro_config_override_count(const porteiro_config *cfg,
                                                   const porteiro_policy *policy);
/* default_tier: the tier of a client whose request names none (NULL
 * without tiers). */
PORTEIRO_API const char *porteiro_config_default_tier(const porteiro_config *cfg,
                                                      const porteiro_policy *policy);

/* The limits of policy for this client by the file alone: the file's
 * override for key, else the tier named tier (NULL, empty or unknown: the
 * default tier), else the policy's limits. */
PORTEIRO_API porteiro_status porteiro_config_choose(const porteiro_config *cfg,
                                                    const porteiro_policy *policy, const char *tier,
                                                    const void *key, size_t key_len,
                                                    porteiro_choice *out);

/* ---- A program's own sections of the file --------------------------
 *
 * A program built on the library may keep its own settings in the same
 * file, as porteirod does (docs/config.md). It declares them as an nginx
 * module declares its directives: a table of fields, each a name and a
 * handler, either a stock one (an integer, a string, a bool, a duration
 * stored at an offset of the caller's struct) or its own (which checks what
 * it must and reads deeper with the functions below). The library's walker
 * reads its own sections with the same functions, so the rules and the form
 * of every error are the same: "FILE:LINE: PATH: message", PATH the field's
 * place such as "admin.listen" or "trusted_proxies[2]" ("config" at the
 * top). docs/api.md, "Your own sections of the config file". */

/* One walk of a file: its document and where the error goes. Made by
 * porteiro_config_parse_with, valid during its handlers' calls only. */
typedef struct porteiro_config_reader porteiro_config_reader;
/* A node of the file: a scalar, a sequence or a mapping. Borrowed from the
 * reader, valid as long as it. */
typedef struct porteiro_config_value porteiro_config_value;
typedef struct porteiro_config_field porteiro_config_field;

/* A field's handler: reads v (the field's value; path names it) into
 * target, the struct given to the walk. Returns PORTEIRO_OK, or the status
 * of porteiro_config_fail (the walk stops there). */
typedef porteiro_status porteiro_config_field_fn(porteiro_config_reader *r,
                                                 const porteiro_config_value *v, const char *path,
                                                 const porteiro_config_field *f, void *target);

/* One field of a mapping. A handler NULL accepts the name and reads nothing
 * (a field another reader owns). offset, min and max are for the stock
 * handlers (and free for a caller's own). */
struct porteiro_config_field {
    const char *name;
    porteiro_config_field_fn *handler;
    bool required; /* a missing one is an error (not in a shared walk) */
    size_t offset; /* where in target a stock handler stores (offsetof) */
    int64_t min;   /* bounds of porteiro_config_set_int / _duration */
    int64_t max;   /* (and _duration without bounds: both 0); the most
                      bytes of porteiro_config_set_string */
};

typedef enum porteiro_config_kind {
    PORTEIRO_CONFIG_NONE = 0, /* no node (v NULL) */
    PORTEIRO_CONFIG_SCALAR = 1,
    PORTEIRO_CONFIG_SEQUENCE = 2,
    PORTEIRO_CONFIG_MAPPING = 3
} porteiro_config_kind;

/* A walk's flag: the mapping is another reader's too (the top of the file,
 * a policy): names not in the table are skipped, required is not checked. */
#define PORTEIRO_CONFIG_SHARED 1u
/* The most fields of one table. */
#define PORTEIRO_CONFIG_MAX_FIELDS 64
/* Paths are cut to this many bytes, NUL included (they only name a place). */
#define PORTEIRO_CONFIG_PATH_MAX 192

/* porteiro_config_parse, and then the caller's fields of the file's top
 * mapping (a shared walk: the library's sections are skipped) into target.
 * The library accepts the names of fields besides its own and porteirod's,
 * and checks its sections first: an error in them is reported, and no
 * handler of fields runs. NULL with "FILE:LINE: PATH: message" in errbuf on
 * any error; what the handlers stored in target until then stays there,
 * for the caller to free. */
PORTEIRO_API porteiro_config *porteiro_config_parse_with(const char *text, size_t len,
                                                         const char *name,
                                                         const porteiro_config_field *fields,
                                                         size_t nfields, void *target, char *errbuf,
                                                         size_t errlen);

/* Walks the mapping v (path names it) with a table of at most
 * PORTEIRO_CONFIG_MAX_FIELDS fields: each field's handler on its value,
 * with target. An unknown field (unless flags has PORTEIRO_CONFIG_SHARED),
 * a field given twice, a required one missing, a value that is not a
 * mapping: an error. */
PORTEIRO_API porteiro_status porteiro_config_walk(porteiro_config_reader *r,
                                                  const porteiro_config_value *v, const char *path,
                                                  const porteiro_config_field *fields,
                                                  size_t nfields, unsigned flags, void *target);

/* Reports an error at v's line (line 1 when v is NULL): "FILE:LINE: PATH:
 * message", the message formatted as printf's (cut at 255 bytes). Returns
 * PORTEIRO_ERR_CONFIG, for the handler to return. */
PORTEIRO_API porteiro_status porteiro_config_fail(porteiro_config_reader *r,
                                                  const porteiro_config_value *v, const char *path,
                                                  const char *fmt, ...)
#if defined(__GNUC__) || defined(__clang__)
    __attribute__((format(printf, 4, 5)))
#endif
    ;

/* The text of the scalar v (NUL-terminated, valid as long as the reader);
 * NULL after reporting "expected WANT" (not a scalar), "expected WANT, got
 * null" (a plain ~ or null), or "contains a NUL byte". */
PORTEIRO_API const char *porteiro_config_scalar(porteiro_config_reader *r,
                                                const porteiro_config_value *v, const char *path,
                                                const char *want);

/* What v is; *count (when count is not NULL) the items of a sequence or
 * the pairs of a mapping, else 0. */
PORTEIRO_API porteiro_config_kind porteiro_config_value_kind(const porteiro_config_value *v,
                                                             size_t *count);

/* The i-th item of a sequence, or the i-th value of a mapping in the file's
 * order with its key in *key (when key is not NULL; NULL for a sequence).
 * NULL past the last or for a scalar. */
PORTEIRO_API const porteiro_config_value *
porteiro_config_value_at(porteiro_config_reader *r, const porteiro_config_value *v, size_t i,
                         const porteiro_config_value **key);

/* The stock handlers: each stores at target + f->offset.
 * _set_int: an int64_t, a decimal integer from f->min to f->max.
 * _set_string: a char *, a copy (malloc: the caller frees it; a value given
 *   before is freed) of a non-empty string of at most f->max bytes.
 * _set_bool: a bool, true or false.
 * _set_duration: an int64_t, milliseconds, as porteiro_parse_duration reads
 *   them ("250ms", "10s", "1h"), from f->min to f->max unless both are 0. */
PORTEIRO_API porteiro_status porteiro_config_set_int(porteiro_config_reader *r,
                                                     const porteiro_config_value *v,
                                                     const char *path,
                                                     const porteiro_config_field *f, void *target);
PORTEIRO_API porteiro_status porteiro_config_set_string(porteiro_config_reader *r,
                                                        const porteiro_config_value *v,
                                                        const char *path,
                                                        const porteiro_config_field *f,
                                                        void *target);
PORTEIRO_API porteiro_status porteiro_config_set_bool(porteiro_config_reader *r,
                                                      const porteiro_config_value *v,
                                                      const char *path,
                                                      const porteiro_config_field *f, void *target);
PORTEIRO_API porteiro_status porteiro_config_set_duration(porteiro_config_reader *r,
                                                          const porteiro_config_value *v,
                                                          const char *path,
                                                          const porteiro_config_field *f,
                                                          void *target);

#ifdef __cplusplus
}
#endif
#endif /* PORTEIRO_CONFIG_H */
