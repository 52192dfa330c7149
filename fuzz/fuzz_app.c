/* fuzz_app.c — porteirod's app for the fuzz targets (fuzz_app.h). */
#include "fuzz_app.h"

#include <stdio.h>
#include <stdlib.h>

pd_app *fuzz_app_new(const char *yaml, size_t len, porteiro_t **limiter) {
    char err[512];
    pd_settings *s = pd_settings_parse(yaml, len, "fuzz.yaml", err, sizeof(err));
    if (s == NULL) {
        fprintf(stderr, "fuzz: %s\n", err);
        abort();
    }
    porteiro_options o;
    porteiro_options_init(&o);
    o.memory_max_keys = 10000;
    porteiro_t *p = porteiro_new(&o, NULL, err, sizeof(err));
    pd_shared *shared = p != NULL ? pd_shared_new(s, false) : NULL;
    pd_app *app = shared != NULL ? pd_app_new(shared, p) : NULL;
    if (app == NULL) {
        fprintf(stderr, "fuzz: no app: %s\n", p == NULL ? err : "out of memory");
        abort();
    }
    if (limiter != NULL)
        *limiter = p;
    return app;
}
