/* json.h — the JSON the tool prints on stdout (one object per command). */
#ifndef CLI_JSON_H
#define CLI_JSON_H

#include <stdbool.h>
#include <stdio.h>

#include "porteiro.h"

/* {"allowed":..,"limit":..,"remaining":..,"reset_ms":..,"retry_after_ms":..
 *  [,"limits":[{...},...],"denied_by":N] [,"fallback":"..","reason":".."]}
 * with_limits adds the per-limit array (policies). A shadow policy (whose
 * decisions are always allowed) adds "shadow":true and "would_deny". Ends
 * with a newline. */
void cli_json_decision(FILE *out, const porteiro_decision *d, bool with_limits, bool shadow,
                       bool with_wait);

/* An acquire: the decision's five fields, "lease": the id or null when
 * denied, and the fallback fields. Ends with a newline. */
void cli_json_lease(FILE *out, const porteiro_decision *d, const char *lease);

/* A JSON string literal, quotes included, for any bytes. */
void cli_json_string(FILE *out, const char *s);

#endif
