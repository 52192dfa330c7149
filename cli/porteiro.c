/* porteiro — the command-line tool (placeholder until the CLI lands). */
#include <stdio.h>

#include "porteiro.h"

int main(void) {
    fprintf(stderr, "porteiro %s: CLI not built yet\n", PORTEIRO_VERSION);
    return 2;
}
