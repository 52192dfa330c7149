/* spare.c — a free list of same-size blocks (spare.h). */
#include "spare.h"

#include <string.h>

void *pd_spare_take(pd_spare *s) {
    void *block = s->head;
    if (block != NULL) {
        memcpy(&s->head, block, sizeof(void *)); /* the link, without aliasing */
        s->n--;
    }
    return block;
}

bool pd_spare_keep(pd_spare *s, void *block) {
    if (s->n >= s->max)
        return false;
    memcpy(block, &s->head, sizeof(void *));
    s->head = block;
    s->n++;
    return true;
}

void pd_spare_free(pd_spare *s) {
    void *block;
    while ((block = pd_spare_take(s)) != NULL)
        s->release(block);
}
