"""The binding's surface: checks, peeks, refunds, resets, batches, policies
from YAML, concurrency and quota leases, reservations settled, errors."""

import os
import subprocess
import sys

import pytest

import porteiro

CONFIG = """
policies:
  api:
    limits:
      - token_bucket 3/1h
  two:
    limits:
      - token_bucket 5/1h burst 10
      - token_bucket 4/1h
  watch:
    limits:
      - token_bucket 1/1h
    shadow: true
  tiered:
    tier: header X-Plan
    default_tier: free
    tiers:
      free: [fixed_window 2/366d]
      pro: [fixed_window 5/366d]
"""


@pytest.fixture(params=["memory", "redis"])
def limiter(request):
    if request.param == "memory":
        lim = porteiro.Limiter()
    else:
        lim = porteiro.Limiter(request.getfixturevalue("redis_url"), command_timeout_ms=10000)
    yield lim
    lim.close()


def test_check_peek_refund_reset(limiter, key):
    L = "fixed_window 3/1h"
    assert [limiter.check(key, L, now_ms=7200000).remaining for _ in range(3)] == [2, 1, 0]
    d = limiter.check(key, L, now_ms=7200500)
    assert not d and not d.allowed
    assert d.retry_after_ms == 3599500 and d.reset_ms == 3599500 and d.limit == 3
    assert d.fallback is None and d.denied_by == 0
    p = limiter.peek(key, L, now_ms=7200600)
    assert p.allowed and p.remaining == 0
    r = limiter.refund(key, L, 2, now_ms=7200700)
    assert r.remaining == 2
    assert limiter.reset(key, L) is None
    assert limiter.check(key, L, now_ms=7200800).remaining == 2
    # bytes keys are the same key as their str
    assert limiter.check(key.encode(), L, now_ms=7200800).remaining == 1


def test_cost_and_never(limiter, key):
    d = limiter.check(key, "gcra 1/1s burst 5", 6, now_ms=0)
    assert not d.allowed and d.retry_after_ms == -1 and d.remaining == 5
    assert "Retry-After" not in d.headers


def test_headers_as_porteirod(limiter, key):
    # The figures of tests/daemon/test_daemon.c (porteirod, policy "api",
    # token_bucket 3/1h): RateLimit-Policy "api";q=3;w=3600, Retry-After 1200.
    api = porteiro.Limits("token_bucket 3/1h", "api")
    for i in range(3):
        d = limiter.check(key, api)
        assert d.headers["RateLimit-Policy"] == '"api";q=3;w=3600'
        assert d.headers["RateLimit"].startswith('"api";r=%d;t=' % (2 - i))
        assert "Retry-After" not in d.headers
    d = limiter.check(key, api)
    assert d.headers["Retry-After"] == "1200"
    two = porteiro.Limits("token_bucket 5/1h burst 10, token_bucket 4/1h", "two")
    for _ in range(4):
        assert limiter.check(key + "t", two)
    d = limiter.check(key + "t", two)
    assert not d and d.denied_by == 1
    assert d.headers["RateLimit-Policy"] == '"two.0";q=5;w=3600, "two.1";q=4;w=3600'
    assert d.headers["Retry-After"] == "900"
    assert [r["allowed"] for r in d.results] == [True, False]


def test_check_many(limiter, key):
    out = limiter.check_many([(key + "a", "fixed_window 1/1h"), (key + "b", "fixed_window 1/1h", 2),
                              (key + "a", "fixed_window 1/1h")], now_ms=3600000)
    assert [d.allowed for d in out] == [True, False, False]
    # A bad item is answered alone: its exception in its place, not raised.
    out = limiter.check_many([(key + "c", "fixed_window 1/1h"), ("", "fixed_window 1/1h"),
                              (b"", "fixed_window 1/1h", 2)], now_ms=3600000)
    assert out[0].allowed
    assert isinstance(out[1], porteiro.InvalidLimit) and out[1].status == "key"
    assert isinstance(out[2], porteiro.InvalidLimit)


def test_policies_from_yaml(tmp_path, key):
    path = tmp_path / "porteiro.yaml"
    path.write_text(CONFIG)
    for lim in (porteiro.Limiter(config=str(path)), porteiro.Limiter(config_text=CONFIG)):
        assert sorted(lim.policies()) == ["api", "tiered", "two", "watch"]
        api = lim.policy("api")
        assert api.is_policy and api.name == "api"
        assert [lim.check(key, api).allowed for _ in range(4)] == [True, True, True, False]
        w = lim.policy("watch")
        assert lim.check(key, w).allowed
        d = lim.check(key, w)
        assert d.allowed and d.shadow_denied
        t = lim.policy("tiered")
        assert sum(lim.check(key + "f", t).allowed for _ in range(6)) == 2
        assert sum(lim.check(key + "p", t, tier="pro").allowed for _ in range(6)) == 5
        with pytest.raises(KeyError):
            lim.policy("nope")
        key += "2"
    with pytest.raises(porteiro.PorteiroError) as e:
        porteiro.Limiter(config_text="policies: [")
    assert e.value.status == "config"


def test_invalid_inputs_raise_invalid_limit():
    lim = porteiro.Limiter()
    for bad in ["", "gcra", "gcra 0/1s", "bogus 1/1s", "gcra 1/1w", "gcra 10/1s burst -1",
                "sliding_log 5000/1s", "fixed_window 2000000000/1s"]:
        with pytest.raises(porteiro.InvalidLimit) as e:
            lim.check("k", bad)
        assert isinstance(e.value, ValueError) and str(e.value)
    with pytest.raises(porteiro.InvalidLimit) as e:
        lim.check("", "gcra 1/1s")
    assert e.value.status == "key"
    with pytest.raises(porteiro.InvalidLimit):
        lim.check("k", "gcra 1/1s", -1)
    with pytest.raises(porteiro.InvalidLimit):
        lim.check("k", "gcra 1/1s", 1 << 70)
    with pytest.raises(TypeError):
        lim.check(42, "gcra 1/1s")
    for url in ["http://x", "redis://:0", "redis+sentinel://h:1"]:
        with pytest.raises(porteiro.InvalidLimit):
            porteiro.Limiter(url)
    with pytest.raises(porteiro.InvalidLimit):
        porteiro.Limiter(on_error="maybe")
    # A long key (over 512 bytes) is limited all the same, never an error.
    long_key = "x" * 100000
    assert lim.check(long_key, "fixed_window 1/366d").allowed
    assert not lim.check(long_key, "fixed_window 1/366d").allowed
    # Many distinct limit texts: the parse cache stays bounded.
    for i in range(5000):
        lim.check("k", "fixed_window %d/1h" % (i + 1))


def test_concurrency_lease(limiter, key):
    with limiter.concurrency(key, 2, lease_ms=10000) as a:
        assert a.id and a.decision.remaining == 1
        with limiter.concurrency(key, 2, lease_ms=10000):
            with pytest.raises(porteiro.RateLimited) as e:
                with limiter.concurrency(key, 2, lease_ms=10000):
                    pass
            assert e.value.decision.retry_after_ms > 0
        assert a.renew()
    d, lease_id = limiter.acquire(key, 1, 10000)
    assert d.allowed and len(lease_id) == 32
    assert limiter.release(key, lease_id) is True
    assert limiter.release(key, lease_id) is False


def test_reserve_settle(limiter, key):
    L = "token_bucket 1000/1h"
    with limiter.reserve(key, L, 500) as r:
        assert r.decision.remaining == 500
        d = r.settle(200)  # 300 given back
    assert d.remaining == 800 and d.debt == 0
    with limiter.reserve(key, L, 100) as r:
        d = r.settle(1500)  # a charge past empty: debt
    assert d.debt > 0 and d.debt_added > 0
    with pytest.raises(porteiro.RateLimited):
        limiter.reserve(key, L, 1)
    with pytest.raises(porteiro.PorteiroError):
        r.settle(1)


def test_quota_lease_hot_key(redis_url, key):
    lim = porteiro.Limiter(redis_url, quota_lease_ms=1000, quota_lease_units=200, command_timeout_ms=10000)
    before = lim.stats()
    allowed = sum(lim.check(key, "fixed_window 100000/1h").allowed for _ in range(2000))
    s = lim.stats()
    assert allowed == 2000
    grants = s["quota_grants"] - before["quota_grants"]
    assert s["quota_local"] > 1900 and grants <= 20, s


def test_example_fixed_window(redis_url):
    from conftest import SOURCE_DIR, python_env
    ex = os.path.join(SOURCE_DIR, "examples", "python", "fixed_window.py")
    for url in ("", redis_url):
        out = subprocess.run([sys.executable, ex], env=python_env(REDIS_URL=url),
                             capture_output=True, text=True, timeout=60)
        assert out.returncode == 0, out.stderr
        assert out.stdout.split() == ["False", "False", "False", "True"]


def test_hostile_keys_never_error(limiter, key):
    # Lone surrogates (undecodable bytes in a str): limited under their
    # bytes, the same key every time, never an exception.
    odd = key + "\udcff\ud800"
    assert limiter.check(odd, "fixed_window 1/366d").allowed
    assert not limiter.check(odd, "fixed_window 1/366d").allowed
    assert not limiter.check(key=odd, limits="fixed_window 1/366d").allowed
    assert [d.allowed for d in limiter.check_many([(odd + "m", "fixed_window 1/366d")] * 2)] == [True, False]
    for k in ("\x00", "}", "{", "a}b{c", "\r\n", "x" * 600, "é" * 300):
        assert limiter.check(key + k, "fixed_window 1/366d").allowed
        assert not limiter.check(key + k, "fixed_window 1/366d").allowed


def test_policies_count_apart(redis_url, key):
    """Two policies with the same limits keep a counter each for a key; a
    refund or reset of one names it and leaves the other (and the plain
    limits' counter) as they were."""
    text = ("policies:\n  a:\n    limits: [fixed_window 2/366d]\n"
            "  b:\n    limits: [fixed_window 2/366d]\n")
    for lim in (porteiro.Limiter(config_text=text),
                porteiro.Limiter(redis_url, config_text=text, command_timeout_ms=10000)):
        a, b = lim.policy("a"), lim.policy("b")
        assert [lim.check(key, a).allowed for _ in range(3)] == [True, True, False]
        assert lim.check(key, b).remaining == 1
        assert lim.check(key, "fixed_window 2/366d").remaining == 1
        assert lim.refund(key, a, 1).remaining == 1
        assert lim.peek(key, b).remaining == 1
        assert lim.reset(key, b) is None
        assert lim.peek(key, b).remaining == 2
        assert lim.peek(key, a).remaining == 1
        lim.close()
