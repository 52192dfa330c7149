/* test_wire.c — the bytes of the event-loop transport (src/redis/wire.c):
 * commands in RESP exactly as hiredis formats them, numbers written by hand
 * as printf would, and replies read from an arena whatever the cuts: a
 * reply fed one byte at a time, or cut at every byte, reads the same as fed
 * whole; a count or length past the bounds is a protocol error, not an
 * allocation; garbage is a protocol error; a huge bulk waits. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <hiredis/hiredis.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "redis/command.h"
#include "redis/wire.h"

static void commands_as_hiredis_formats_them(void **state) {
    (void)state;
    const char *argv[] = {"EVALSHA", "abc", "", "k\r\ney", "12345678901"};
    size_t argvlen[] = {7, 3, 0, 5, 11};
    pt_buf b = {0};
    for (int round = 0; round < 300; round++) /* grows past its first room */
        assert_int_equal(pt_buf_command(&b, 5, argv, argvlen), 0);
    char *want = NULL;
    int len = redisFormatCommandArgv(&want, 5, argv, argvlen);
    assert_true(len > 0);
    assert_int_equal(b.len, (size_t)len * 300);
    for (int round = 0; round < 300; round++)
        assert_memory_equal(b.data + (size_t)round * (size_t)len, want, (size_t)len);
    free(want);
    pt_buf_consume(&b, b.len - 3);
    assert_int_equal(b.len - b.off, 3);
    pt_buf_consume(&b, 3);
    assert_int_equal(b.len, 0); /* all written: back to the front */
    pt_buf_free(&b);
}

static void numbers_as_printf_writes_them(void **state) {
    (void)state;
    const long long v[] = {0,          1,         -1,       9, 10, 99, 100, 1234567890123LL,
                           -987654321, LLONG_MAX, LLONG_MIN};
    pt_command cmd = {0};
    pt_args a = {&cmd.argc, cmd.argv, cmd.argvlen, cmd.numbers};
    for (size_t i = 0; i < sizeof(v) / sizeof(v[0]); i++) {
        char want[32];
        snprintf(want, sizeof(want), "%lld", v[i]);
        pt_args_int(a, v[i]);
        assert_int_equal(cmd.argvlen[i], strlen(want));
        assert_string_equal(cmd.argv[i], want);
    }
}

/* The replies of s, fed in pieces of `step` bytes (0: all at once), as
 * one line each: type and value, nested arrays in brackets. */
static void describe(const redisReply *r, char *out, size_t outlen) {
    size_t n = strlen(out);
    switch (r->type) {
        case REDIS_REPLY_INTEGER: snprintf(out + n, outlen - n, "i%lld ", r->integer); break;
        case REDIS_REPLY_NIL: snprintf(out + n, outlen - n, "nil "); break;
        case REDIS_REPLY_ARRAY:
            snprintf(out + n, outlen - n, "[ ");
            for (size_t i = 0; i < r->elements; i++)
                describe(r->element[i], out, outlen);
            n = strlen(out);
            snprintf(out + n, outlen - n, "] ");
            break;
        default:
            assert_int_equal(strlen(r->str), r->len);
            snprintf(out + n, outlen - n, "%d'%s' ", r->type, r->str);
    }
}

static int read_all(const char *s, size_t len, size_t step, char *out, size_t outlen) {
    pt_wire_reader *w = pt_wire_reader_new();
    assert_non_null(w);
    out[0] = '\0';
    char err[128];
    int rc = 0;
    for (size_t off = 0; off < len && rc >= 0;) {
        size_t n = step == 0 || len - off < step ? len - off : step;
        assert_int_equal(pt_wire_reader_feed(w, s + off, n), 0);
        off += n;
        redisReply *r;
        while ((rc = pt_wire_reader_next(w, &r, err, sizeof(err))) == 1)
            describe(r, out, outlen);
    }
    pt_wire_reader_free(w);
    return rc;
}

static const char replies[] = "*3\r\n:1\r\n:-5\r\n$3\r\nabc\r\n"
                              "+OK\r\n-NOSCRIPT No matching script\r\n$-1\r\n"
                              "*2\r\n*2\r\n:7\r\n$0\r\n\r\n*0\r\n"
                              "*-1\r\n:9223372036854775807\r\n";

static void replies_read_the_same_whatever_the_cuts(void **state) {
    (void)state;
    char whole[1024], piece[1024];
    size_t len = sizeof(replies) - 1;
    assert_int_equal(read_all(replies, len, 0, whole, sizeof(whole)), 0);
    assert_string_equal(whole, "[ i1 i-5 1'abc' ] 5'OK' 6'NOSCRIPT No matching script' nil "
                               "[ [ i7 1'' ] [ ] ] nil i9223372036854775807 ");
    for (size_t step = 1; step < len; step++) {
        assert_int_equal(read_all(replies, len, step, piece, sizeof(piece)), 0);
        assert_string_equal(piece, whole);
    }
    /* Cut once at every byte: two feeds. */
    for (size_t cut = 1; cut < len; cut++) {
        pt_wire_reader *w = pt_wire_reader_new();
        char err[128];
        redisReply *r;
        piece[0] = '\0';
        assert_int_equal(pt_wire_reader_feed(w, replies, cut), 0);
        while (pt_wire_reader_next(w, &r, err, sizeof(err)) == 1)
            describe(r, piece, sizeof(piece));
        assert_int_equal(pt_wire_reader_feed(w, replies + cut, len - cut), 0);
        while (pt_wire_reader_next(w, &r, err, sizeof(err)) == 1)
            describe(r, piece, sizeof(piece));
        assert_string_equal(piece, whole);
        pt_wire_reader_free(w);
    }
}

static void bad_replies_are_protocol_errors(void **state) {
    (void)state;
    char out[256];
    const char *bad[] = {"?what\r\n", "*99999999\r\n", "*-7\r\n", ":12x\r\n",
                         "*1\r\n*1\r\n*1\r\n*1\r\n*1\r\n*1\r\n*1\r\n*1\r\n*1\r\n*1\r\n:1\r\n"};
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        int rc = read_all(bad[i], strlen(bad[i]), 0, out, sizeof(out));
        assert_int_equal(rc, -1);
    }
    /* A huge bulk length is waited for (the check's deadline answers it);
     * the bytes held waiting are bounded (PT_MAX_REPLY_BYTES). */
    assert_int_equal(read_all("$99999999999\r\nabc", 17, 0, out, sizeof(out)), 0);
    /* A large but allowed reply: many elements, from more than one block. */
    size_t n = 5000;
    char *big = malloc(16 + n * 8);
    size_t len = (size_t)sprintf(big, "*%zu\r\n", n);
    for (size_t i = 0; i < n; i++)
        len += (size_t)sprintf(big + len, ":%zu\r\n", i % 10);
    pt_wire_reader *w = pt_wire_reader_new();
    redisReply *r;
    char err[128];
    assert_int_equal(pt_wire_reader_feed(w, big, len), 0);
    assert_int_equal(pt_wire_reader_next(w, &r, err, sizeof(err)), 1);
    assert_int_equal(r->elements, n);
    assert_int_equal(r->element[n - 1]->integer, (long long)((n - 1) % 10));
    assert_int_equal(pt_wire_reader_next(w, &r, err, sizeof(err)), 0);
    pt_wire_reader_free(w);
    free(big);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(commands_as_hiredis_formats_them),
        cmocka_unit_test(numbers_as_printf_writes_them),
        cmocka_unit_test(replies_read_the_same_whatever_the_cuts),
        cmocka_unit_test(bad_replies_are_protocol_errors),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
