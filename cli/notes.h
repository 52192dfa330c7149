/* notes.h — plain-words lines on stderr about decisions Redis did not make. */
#ifndef CLI_NOTES_H
#define CLI_NOTES_H

#include <stdio.h>

#include "options.h"
#include "porteiro.h"
#include "target.h"

/* One line when d is a fallback: which Redis failed, which on_error mode
 * decided and what that means for the limits (with `local`: each limit's
 * share, and whether this cost can ever pass locally). Nothing otherwise. */
void cli_fallback_note(FILE *out, const cli_command *cmd, const cli_target *t,
                       const porteiro_decision *d, int64_t cost);

/* After a failure st that means "Redis did not answer": one line saying
 * where it was looked for (msg: the library's message) and what to do
 * instead; returns true. False, and nothing printed, for other failures. */
bool cli_unreachable_line(FILE *out, const cli_command *cmd, porteiro_t *p, porteiro_status st,
                          const char *msg);

#endif
