"""Redis killed mid-run (fallback, then recovery), Redis frozen (the GIL is
released while a check waits), 8 processes x 4 threads on one key (exact)."""

import asyncio
import multiprocessing
import threading
import time

import pytest

import porteiro


def test_killed_mid_run_fallback_then_recovery(own_redis, key):
    L = "fixed_window 1000/366d"
    opened = porteiro.Limiter(own_redis.url, on_error="open", command_timeout_ms=200)
    closed = porteiro.Limiter(own_redis.url, on_error="closed", command_timeout_ms=200)
    local = porteiro.Limiter(own_redis.url, on_error="local", command_timeout_ms=200)
    error = porteiro.Limiter(own_redis.url, on_error="error", command_timeout_ms=200)
    for lim in (opened, closed, local, error):
        assert lim.check(key, L).fallback is None
    port = own_redis.port
    own_redis.kill()
    d = opened.check(key, L)
    assert d.allowed and d.fallback == "open" and d.fallback_reason
    d = closed.check(key, L)
    assert not d.allowed and d.fallback == "closed"
    d = local.check(key, L)
    assert d.allowed and d.fallback == "local"
    with pytest.raises(porteiro.RedisError):
        error.check(key, L)

    async def one():
        return await opened.acheck(key, L)
    d = asyncio.run(one())
    assert d.allowed and d.fallback == "open"
    assert opened.stats()["fallback_open"] >= 2

    own_redis.start(port)  # back, empty, on the same port
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        d = opened.check(key, L)
        if d.fallback is None:
            break
        time.sleep(0.05)
    assert d.fallback is None, "no recovery within 10 s"
    assert d.remaining == 999  # a fresh Redis: this is its first check
    while time.monotonic() < deadline and closed.check(key, L).fallback is not None:
        time.sleep(0.05)
    assert closed.check(key, L).allowed


def test_gil_released_while_redis_is_frozen(own_redis, key):
    lim = porteiro.Limiter(own_redis.url, command_timeout_ms=1500, on_error="open")
    assert lim.check(key, "gcra 10/1s").fallback is None
    own_redis.freeze()
    try:
        result = {}

        def blocked():
            t = time.monotonic()
            result["d"] = lim.check(key, "gcra 10/1s")
            result["s"] = time.monotonic() - t

        th = threading.Thread(target=blocked)
        th.start()
        time.sleep(0.05)
        # This thread runs Python while the other waits on Redis.
        n = 0
        t = time.monotonic()
        while th.is_alive() and time.monotonic() - t < 5:
            n += 1
        th.join()
    finally:
        own_redis.thaw()
    assert result["s"] >= 1.0  # it did wait for the budget
    assert result["d"].fallback == "open"
    assert n > 100000, n  # ~1 s of pure Python progressed meanwhile


def _worker(url, key, n, q):
    # A budget no loaded machine runs out of: a timed-out check would be
    # on_error's (closed: denied), never a real decision.
    lim = porteiro.Limiter(url, command_timeout_ms=10000, on_error="closed")
    counts = []

    def run():
        ds = [lim.check(key, "fixed_window 1000/1h", now_ms=3600000) for _ in range(n)]
        assert all(d.fallback is None for d in ds)
        counts.append(sum(d.allowed for d in ds))

    threads = [threading.Thread(target=run) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    q.put(sum(counts))


def test_exact_8_processes_x_4_threads(redis_url, key):
    ctx = multiprocessing.get_context("fork")
    q = ctx.Queue()
    procs = [ctx.Process(target=_worker, args=(redis_url, key, 50, q)) for _ in range(8)]
    for p in procs:
        p.start()
    total = sum(q.get(timeout=60) for _ in procs)
    for p in procs:
        p.join(timeout=10)
        assert p.exitcode == 0
    assert total == 1000  # 1600 asked, exactly the limit allowed
    lim = porteiro.Limiter(redis_url)
    assert lim.peek(key, "fixed_window 1000/1h", now_ms=3600000).remaining == 0


def test_threads_share_a_limiter(redis_url, key):
    lim = porteiro.Limiter(redis_url, connections=4, command_timeout_ms=10000, on_error="closed")
    counts = []

    def run():
        counts.append(sum(lim.check(key, "fixed_window 300/366d").allowed for _ in range(100)))

    threads = [threading.Thread(target=run) for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert sum(counts) == 300
    assert lim.stats()["handles"] <= 4


def _after_fork(lim, key, q):
    ds = [lim.check(key, "fixed_window 400/366d") for _ in range(150)]
    q.put((sum(d.allowed for d in ds), sum(d.fallback is not None for d in ds)))
    lim.close()


def test_limiter_made_before_fork(redis_url, key):
    """gunicorn --preload, multiprocessing: a Limiter made in the parent is
    used by forked children; each opens its own connections (sharing the
    parent's socket would mix their replies)."""
    lim = porteiro.Limiter(redis_url, command_timeout_ms=10000, on_error="closed")
    assert lim.check(key, "fixed_window 400/366d").allowed  # the parent's handle is in use
    ctx = multiprocessing.get_context("fork")
    q = ctx.Queue()
    procs = [ctx.Process(target=_after_fork, args=(lim, key, q)) for _ in range(3)]
    for p in procs:
        p.start()
    mine = sum(lim.check(key, "fixed_window 400/366d").allowed for _ in range(150))
    got = [q.get(timeout=60) for _ in procs]
    for p in procs:
        p.join(timeout=10)
        assert p.exitcode == 0
    assert all(f == 0 for _, f in got)
    assert 1 + mine + sum(a for a, _ in got) == 400  # 601 asked: exact
    assert lim.check(key, "fixed_window 400/366d").fallback is None  # the parent's still fine
