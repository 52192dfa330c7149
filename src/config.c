/* config.c — the YAML configuration file (issue 3). */
#include <stdio.h>

#include "porteiro.h"

porteiro_config *porteiro_config_parse(const char *text, size_t len, const char *name,
                                       char *errbuf, size_t errlen) {
    (void)text;
    (void)len;
    snprintf(errbuf, errlen, "%s: configuration files are not supported yet", name ? name : "-");
    return NULL;
}

porteiro_config *porteiro_config_load(const char *path, char *errbuf, size_t errlen) {
    return porteiro_config_parse(NULL, 0, path, errbuf, errlen);
}

void porteiro_config_free(porteiro_config *cfg) { (void)cfg; }
const porteiro_options *porteiro_config_options(const porteiro_config *cfg) { (void)cfg; return NULL; }
const porteiro_policy *porteiro_config_policy(const porteiro_config *cfg, const char *name) { (void)cfg; (void)name; return NULL; }
size_t porteiro_config_policy_count(const porteiro_config *cfg) { (void)cfg; return 0; }
const porteiro_policy *porteiro_config_policy_at(const porteiro_config *cfg, size_t i) { (void)cfg; (void)i; return NULL; }
