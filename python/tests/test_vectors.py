"""The binding decides as the C library does: the same checks (cost, time)
through the CLI (`porteiro check --now-ms`, as tests/cli/test_cli.c) and through
Python, on Redis, and on the memory backend, give the same decisions."""

import json
import subprocess

import pytest

import porteiro

# (limits, [(cost, now_ms), ...]) for every algorithm with a check. Periods
# of hours and days: Redis expires keys on its own clock, whatever now_ms
# says, so a state must outlive a slow run's real seconds (a gcra 10/1s key
# lives about a second).
H = 3600000
SEQUENCES = [
    ("fixed_window 3/1d", [(1, 24 * H), (1, 25 * H), (2, 26 * H), (1, 30 * H), (1, 48 * H - 1), (1, 48 * H)]),
    ("token_bucket 10/10h burst 3", [(2, 0), (2, 0), (1, H), (3, 4 * H), (0, 5 * H), (1, 4 * H + 1800000)]),
    ("gcra 10/10h burst 5", [(1, 0), (4, 0), (1, 0), (1, 1500000), (6, 2 * H), (2, 4 * H)]),
    ("gcra 1/10h burst 5", [(6, 0), (5, 0), (1, 10 * H - 1), (1, 10 * H)]),
    ("sliding_window 4/10h", [(2, 10 * H), (2, 15 * H), (1, 19 * H), (1, 21 * H), (1, 26 * H), (3, 32 * H)]),
    ("sliding_log 3/10h", [(1, 0), (1, H), (1, 2 * H), (1, 9 * H), (1, 10 * H + 1800000), (2, 12 * H + 1800000)]),
    ("token_bucket 5/10h, fixed_window 4/1d", [(1, 24 * H), (2, 25 * H), (1, 26 * H), (1, 27 * H)]),
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
