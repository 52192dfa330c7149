/* fuzz_app.h — fuzz support: porteirod's app on the memory backend, made
 * from a config text, as the targets that drive requests need it. */
#ifndef FUZZ_APP_H
#define FUZZ_APP_H

#include <stddef.h>

#include "app/app.h"
#include "porteiro.h"

/* The app for the config yaml (len bytes), on a memory limiter bounded to
 * 10 000 keys (a full store must be handled too), whose handle is put in
 * *limiter when limiter is not NULL. Aborts on any failure: a target with no
 * app fuzzes nothing. */
pd_app *fuzz_app_new(const char *yaml, size_t len, porteiro_t **limiter);

#endif
