/* limit.c — the public face of a limit: its algorithm's name, and the
 * validation callers (the config reader, the CLI) run before a check. */
#include <stdio.h>
#include <string.h>

#include "core/algorithms.h"

porteiro_status porteiro_limit_validate(const porteiro_limit *limit, char *errbuf, size_t errlen) {
    porteiro_limit out;
    if (limit == NULL) {
        if (errbuf != NULL && errlen > 0)
            snprintf(errbuf, errlen, "no limit given");
        return PORTEIRO_ERR_INVALID;
    }
    return pt_limit_normalize(limit, &out, errbuf, errlen);
}

static const char *const algorithm_names[] = {
    NULL, "fixed_window", "token_bucket", "gcra", "sliding_window", "sliding_log", "concurrency",
};

const char *porteiro_algorithm_name(porteiro_algorithm a) {
    if ((unsigned)a >= sizeof(algorithm_names) / sizeof(algorithm_names[0]))
        return NULL;
    return algorithm_names[a];
}

porteiro_algorithm porteiro_algorithm_parse(const char *name) {
    for (size_t i = 1; name != NULL && i < sizeof(algorithm_names) / sizeof(algorithm_names[0]);
         i++)
        if (strcmp(name, algorithm_names[i]) == 0)
            return (porteiro_algorithm)i;
    return (porteiro_algorithm)0;
}
