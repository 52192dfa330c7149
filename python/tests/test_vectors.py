"""The binding decides as the C library does: the same checks (cost, time)
through the CLI (`porteiro check --now-ms`, as tests/test_cli.c) and through
Python, on Redis, and on the memory backend, give the same decisions."""

import json
import subprocess

import pytest

import porteiro

# (limits, [(cost, now_ms), ...]) for every algorithm with a check.
SEQUENCES = [
    ("fixed_window 3/1m", [(1, 60000), (1, 60500), (2, 61000), (1, 62000), (1, 119999), (1, 120000)]),
    ("token_bucket 10/1s burst 3", [(2, 0), (2, 0), (1, 100), (3, 400), (0, 500), (1, 450)]),
    ("gcra 10/1s burst 5", [(1, 0), (4, 0), (1, 0), (1, 150), (6, 200), (2, 400)]),
    ("gcra 1/1s burst 5", [(6, 0), (5, 0), (1, 999), (1, 1000)]),
    ("sliding_window 4/1s", [(2, 1000), (2, 1500), (1, 1900), (1, 2100), (1, 2600), (3, 3200)]),
    ("sliding_log 3/1s", [(1, 0), (1, 100), (1, 200), (1, 900), (1, 1050), (2, 1250)]),
    ("token_bucket 5/1s, fixed_window 4/1m", [(1, 60000), (2, 60100), (1, 60200), (1, 60300)]),
]

FIELDS = ("allowed", "limit", "remaining", "reset_ms", "retry_after_ms")


def cli_check(cli, url, limits, key, cost, now):
    args = [cli, "check", "--limits", limits, "--cost", str(cost), "--now-ms", str(now)]
    if url:
        args += ["--redis", url]
    out = subprocess.run(args + ["--", key], capture_output=True, text=True, timeout=30)
    assert out.returncode in (0, 1), out.stderr
    return json.loads(out.stdout)


def as_dict(d):
    return {f: getattr(d, f) for f in FIELDS}


@pytest.mark.parametrize("limits,steps", SEQUENCES, ids=[s[0] for s in SEQUENCES])
def test_redis_equals_cli_equals_memory(cli, redis_url, key, limits, steps):
    r = porteiro.Limiter(redis_url, command_timeout_ms=10000)
    m = porteiro.Limiter()
    for i, (cost, now) in enumerate(steps):
        want = cli_check(cli, redis_url, limits, key + ":cli", cost, now)
        want = {f: want[f] for f in FIELDS}
        got_redis = as_dict(r.check(key + ":py", limits, cost, now_ms=now))
        got_memory = as_dict(m.check(key, limits, cost, now_ms=now))
        assert got_redis == want, (i, cost, now)
        assert got_memory == want, (i, cost, now)


def test_memory_first_checks_equal_cli(cli):
    # The CLI's memory backend lives one process: each first check compared.
    m = porteiro.Limiter()
    n = 0
    for limits, steps in SEQUENCES:
        for cost, now in steps[:3]:
            n += 1
            want = cli_check(cli, None, limits, "k", cost, now)
            assert as_dict(m.check("first%d" % n, limits, cost, now_ms=now)) == \
                {f: want[f] for f in FIELDS}
