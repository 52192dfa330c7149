/* test_siphash.c — src/core/siphash.c: SipHash-2-4 against the 64 published
 * vectors of its authors' reference (key 00 01 .. 0f, message 00 01 ..
 * n-1 for n = 0..63: vectors_sip64 of github.com/veorq/SipHash), and the
 * process key: drawn once, the same for every caller and thread, and not a
 * constant (two processes draw two keys). The public porteiro_keyed_hash
 * (porteirod's envoy counters use it) is that SipHash under that key. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <pthread.h>
#include <string.h>
#include <stdio.h>
#include <unistd.h>

#include "core/siphash.h"
#include "porteiro.h"

static const uint64_t vectors[64] = {
    0x726fdb47dd0e0e31ULL, 0x74f839c593dc67fdULL, 0x0d6c8009d9a94f5aULL, 0x85676696d7fb7e2dULL,
    0xcf2794e0277187b7ULL, 0x18765564cd99a68dULL, 0xcbc9466e58fee3ceULL, 0xab0200f58b01d137ULL,
    0x93f5f5799a932462ULL, 0x9e0082df0ba9e4b0ULL, 0x7a5dbbc594ddb9f3ULL, 0xf4b32f46226bada7ULL,
    0x751e8fbc860ee5fbULL, 0x14ea5627c0843d90ULL, 0xf723ca908e7af2eeULL, 0xa129ca6149be45e5ULL,
    0x3f2acc7f57c29bdbULL, 0x699ae9f52cbe4794ULL, 0x4bc1b3f0968dd39cULL, 0xbb6dc91da77961bdULL,
    0xbed65cf21aa2ee98ULL, 0xd0f2cbb02e3b67c7ULL, 0x93536795e3a33e88ULL, 0xa80c038ccd5ccec8ULL,
    0xb8ad50c6f649af94ULL, 0xbce192de8a85b8eaULL, 0x17d835b85bbb15f3ULL, 0x2f2e6163076bcfadULL,
    0xde4daaaca71dc9a5ULL, 0xa6a2506687956571ULL, 0xad87a3535c49ef28ULL, 0x32d892fad841c342ULL,
    0x7127512f72f27cceULL, 0xa7f32346f95978e3ULL, 0x12e0b01abb051238ULL, 0x15e034d40fa197aeULL,
    0x314dffbe0815a3b4ULL, 0x027990f029623981ULL, 0xcadcd4e59ef40c4dULL, 0x9abfd8766a33735cULL,
    0x0e3ea96b5304a7d0ULL, 0xad0c42d6fc585992ULL, 0x187306c89bc215a9ULL, 0xd4a60abcf3792b95ULL,
    0xf935451de4f21df2ULL, 0xa9538f0419755787ULL, 0xdb9acddff56ca510ULL, 0xd06c98cd5c0975ebULL,
    0xe612a3cb9ecba951ULL, 0xc766e62cfcadaf96ULL, 0xee64435a9752fe72ULL, 0xa192d576b245165aULL,
    0x0a8787bf8ecb74b2ULL, 0x81b3e73d20b49b6fULL, 0x7fa8220ba3b2eceaULL, 0x245731c13ca42499ULL,
    0xb78dbfaf3a8d83bdULL, 0xea1ad565322a1a0bULL, 0x60e61c23a3795013ULL, 0x6606d7e446282b93ULL,
    0x6ca4ecb15c5f91e1ULL, 0x9f626da15c9625f3ULL, 0xe51b38608ef25f57ULL, 0x958a324ceb064572ULL,
};

static void published_vectors(void **state) {
    (void)state;
    uint8_t key[16], msg[64];
    for (int i = 0; i < 16; i++)
        key[i] = (uint8_t)i;
    for (int i = 0; i < 64; i++)
        msg[i] = (uint8_t)i;
    for (size_t n = 0; n < 64; n++) {
        uint64_t h = pt_siphash(key, msg, n);
        if (h != vectors[n])
            fail_msg("length %zu: 0x%016llx, expected 0x%016llx", n, (unsigned long long)h,
                     (unsigned long long)vectors[n]);
    }
    /* Unaligned input gives the same (the words are read byte by byte). */
    uint8_t shifted[65];
    memcpy(shifted + 1, msg, 64);
    for (size_t n = 0; n < 64; n++)
        assert_true(pt_siphash(key, shifted + 1, n) == vectors[n]);
}

/* porteiro_keyed_hash is the SipHash above under the process's key, for
 * every length of the published messages, aligned or not; an empty
 * message may come as NULL. */
static void public_hash(void **state) {
    (void)state;
    const uint8_t *k = pt_keyed_hash_key();
    uint8_t msg[65];
    for (int i = 0; i < 65; i++)
        msg[i] = (uint8_t)i;
    for (size_t n = 0; n < 64; n++) {
        assert_true(porteiro_keyed_hash(msg, n) == pt_siphash(k, msg, n));
        assert_true(porteiro_keyed_hash(msg + 1, n) == pt_siphash(k, msg + 1, n));
        assert_true(porteiro_keyed_hash(msg, n) == pt_keyed_hash(msg, n));
    }
    assert_true(porteiro_keyed_hash(NULL, 0) == pt_siphash(k, "", 0));
    assert_true(porteiro_keyed_hash("a", 1) != porteiro_keyed_hash("b", 1));
}

static void *hash_in_thread(void *arg) {
    uint64_t *out = arg;
    *out = pt_keyed_hash("porteiro", 8);
    return NULL;
}

/* The process key: every thread sees the one key; it is not zero, and the
 * hash under it is not the hash under the published test key. */
static void process_key(void **state) {
    (void)state;
    uint64_t in_threads[4];
    pthread_t t[4];
    for (int i = 0; i < 4; i++)
        assert_int_equal(pthread_create(&t[i], NULL, hash_in_thread, &in_threads[i]), 0);
    for (int i = 0; i < 4; i++)
        assert_int_equal(pthread_join(t[i], NULL), 0);
    uint64_t here = pt_keyed_hash("porteiro", 8);
    for (int i = 0; i < 4; i++)
        assert_true(in_threads[i] == here);
    assert_true(porteiro_keyed_hash("porteiro", 8) == here); /* the public one: the same key */
    const uint8_t *k = pt_keyed_hash_key();
    static const uint8_t zero[16];
    assert_memory_not_equal(k, zero, 16);
    assert_true(pt_siphash(k, "porteiro", 8) == here);
}

/* Two processes draw two keys: a client who learns one process's hashes
 * (a long key's suffix in /v1/top) learns nothing of the next one's. This
 * binary run again with "--hash" prints its own hash of "victim". */
static unsigned long long hash_of_a_new_process(void) {
    char self[4096], cmd[4200];
    ssize_t n = readlink("/proc/self/exe", self, sizeof(self) - 1);
    assert_true(n > 0);
    self[n] = '\0';
    snprintf(cmd, sizeof(cmd), "'%s' --hash", self);
    FILE *f = popen(cmd, "r");
    assert_non_null(f);
    unsigned long long h = 0;
    assert_int_equal(fscanf(f, "%llx", &h), 1);
    assert_int_equal(pclose(f), 0);
    return h;
}

static void key_per_process(void **state) {
    (void)state;
    unsigned long long a = hash_of_a_new_process(), b = hash_of_a_new_process();
    assert_true(a != b);
    assert_true(a != (unsigned long long)porteiro_keyed_hash("victim", 6));
}

int main(int argc, char **argv) {
    if (argc == 2 && strcmp(argv[1], "--hash") == 0) {
        printf("%016llx\n", (unsigned long long)porteiro_keyed_hash("victim", 6));
        return 0;
    }
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(published_vectors),
        cmocka_unit_test(public_hash),
        cmocka_unit_test(process_key),
        cmocka_unit_test(key_per_process),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
