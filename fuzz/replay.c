/* replay.c — runs a fuzz target's LLVMFuzzerTestOneInput over files or
 * folders given as arguments, without libFuzzer: the seed corpora and every
 * input that once crashed (kept in fuzz/corpus/) become regression tests,
 * in every build and under the sanitizers (ctest: fuzz_replay_*). */
#include <dirent.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static int replay_file(const char *path) {
    FILE *f = fopen(path, "rb");
    if (f == NULL) {
        perror(path);
        return -1;
    }
    size_t cap = 1 << 16, len = 0;
    uint8_t *buf = malloc(cap);
    size_t n;
    while (buf != NULL && (n = fread(buf + len, 1, cap - len, f)) > 0) {
        len += n;
        if (len == cap) {
            uint8_t *bigger = realloc(buf, cap * 2);
            if (bigger == NULL) {
                free(buf);
                buf = NULL;
                break;
            }
            buf = bigger;
            cap *= 2;
        }
    }
    fclose(f);
    if (buf == NULL)
        return -1;
    LLVMFuzzerTestOneInput(buf, len);
    free(buf);
    return 0;
}

static int replay(const char *path, size_t *count) {
    struct stat st;
    if (stat(path, &st) != 0) {
        perror(path);
        return -1;
    }
    if (!S_ISDIR(st.st_mode)) {
        (*count)++;
        return replay_file(path);
    }
    DIR *d = opendir(path);
    if (d == NULL) {
        perror(path);
        return -1;
    }
    int rc = 0;
    struct dirent *e;
    while (rc == 0 && (e = readdir(d)) != NULL) {
        if (e->d_name[0] == '.')
            continue;
        char sub[4096];
        snprintf(sub, sizeof(sub), "%s/%s", path, e->d_name);
        rc = replay(sub, count);
    }
    closedir(d);
    return rc;
}

int main(int argc, char **argv) {
    size_t count = 0;
    for (int i = 1; i < argc; i++)
        if (replay(argv[i], &count) != 0)
            return 1;
    if (count == 0) {
        fprintf(stderr, "replay: no input\n");
        return 1;
    }
    printf("replay: %zu inputs, no crash\n", count);
    return 0;
}
