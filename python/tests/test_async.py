"""asyncio: checks on the running loop through porteiro_attach_loop, 1000
in flight, batched as in C (fewer script calls than checks), asyncio's own
loop and uvloop."""

import asyncio
import socket

import pytest

import porteiro
from conftest import need

LOOPS = ["asyncio", "uvloop"]


def run(loop_kind, coro):
    if loop_kind == "uvloop":
        uvloop = need("uvloop")
        loop = uvloop.new_event_loop()
    else:
        loop = asyncio.new_event_loop()
    try:
        return loop.run_until_complete(coro)
    finally:
        loop.close()


def script_calls(port):
    """EVALSHA/EVAL/FCALL calls Redis counted (INFO commandstats)."""
    with socket.create_connection(("127.0.0.1", port)) as s:
        s.sendall(b"INFO commandstats\r\n")
        data = b""
        while not data.endswith(b"\r\n") or data.count(b"\r\n") < 2:
            data += s.recv(65536)
        size = int(data[1:data.index(b"\r\n")])
        while len(data) < data.index(b"\r\n") + 2 + size + 2:
            data += s.recv(65536)
    total = 0
    for line in data.decode().splitlines():
        if line.startswith(("cmdstat_evalsha:", "cmdstat_eval:")):
            total += int(line.split("calls=")[1].split(",")[0])
    return total


@pytest.mark.parametrize("loop_kind", LOOPS)
def test_thousand_in_flight(redis_server, key, loop_kind):
    lim = porteiro.Limiter(redis_server.url, command_timeout_ms=10000, on_error="closed")

    async def main():
        # One key: exact (checks of one key are not batched together).
        ds = await asyncio.gather(*[lim.acheck(key, "fixed_window 500/366d")
                                    for _ in range(1000)])
        assert sum(d.allowed for d in ds) == 500
        assert all(d.fallback is None for d in ds)
        # 1000 keys: the checks made in one pass leave as batches of up to
        # batch_max (64) checks, one script call each.
        before = script_calls(redis_server.port)
        ds = await asyncio.gather(*[lim.acheck("%s:%d" % (key, i), "fixed_window 1/366d")
                                    for i in range(1000)])
        calls = script_calls(redis_server.port) - before
        assert all(d.allowed and d.fallback is None for d in ds)
        assert calls <= 1000 // 64 + 4, calls

    run(loop_kind, main())


@pytest.mark.parametrize("loop_kind", LOOPS)
def test_async_memory_refund_settle_policy(loop_kind, key):
    lim = porteiro.Limiter(config_text="policies:\n  api:\n    limits: [token_bucket 3/1h]\n")

    async def main():
        api = lim.policy("api")
        ds = [await lim.acheck(key, api) for _ in range(4)]
        r = await lim.arefund(key, api, 1)  # the policy's own counter
        async with lim.areserve(key + "r", "token_bucket 100/1h", 50) as res:
            s = await res.asettle(10)
        res2 = await lim.areserve(key + "r", "token_bucket 100/1h", 90)
        with pytest.raises(porteiro.RateLimited):
            async with lim.areserve(key + "r", "token_bucket 100/1h", 1):
                pass
        assert (await res2.asettle(90)).remaining == 0
        return ds, r, s

    ds, r, s = run(loop_kind, main())
    assert [d.allowed for d in ds] == [True, True, True, False]
    assert ds[3].headers["RateLimit-Policy"] == '"api";q=3;w=3600'
    assert r.remaining == 1
    assert s.remaining == 90


@pytest.mark.parametrize("loop_kind", LOOPS)
def test_async_redis_errors_and_loops(redis_server, key, loop_kind):
    lim = porteiro.Limiter(redis_server.url, command_timeout_ms=10000, on_error="closed")

    async def main():
        with pytest.raises(porteiro.InvalidLimit):
            await lim.acheck(key, "gcra 0/1s")
        with pytest.raises(porteiro.InvalidLimit):
            lim.acheck("", "gcra 1/1s")
        d = await lim.acheck(key, "gcra 1/1h")
        s = await lim.asettle(key, "gcra 1/1h", 1, 1)
        return d, s
    # One limiter, several loops one after another: a handle per loop.
    for _ in range(3):
        d, s = run(loop_kind, main())
        assert d.allowed or d.retry_after_ms > 0
        assert s.allowed
    with pytest.raises(RuntimeError):
        lim.acheck(key, "gcra 1/1s")  # no running loop


def test_cancelled_future(redis_server, key, monkeypatch):
    import sys
    lim = porteiro.Limiter(redis_server.url, command_timeout_ms=10000, on_error="closed")
    unraisable = []
    monkeypatch.setattr(sys, "unraisablehook", unraisable.append)

    async def main():
        fs = [lim.acheck(key, "gcra 10/1h") for _ in range(5)]
        for f in fs:
            f.cancel()
        await asyncio.sleep(0.05)
        return await lim.acheck(key, "gcra 10/1h")
    # The cancelled checks were made all the same (5 of the burst of 10 taken).
    assert run("asyncio", main()).remaining == 4
    assert unraisable == []


def test_loops_in_threads_share_a_limiter(redis_server, key):
    """Each thread's running loop gets its own handle, also while the other
    thread's loop runs (the running-loop cache never answers another's)."""
    import threading

    lim = porteiro.Limiter(redis_server.url, command_timeout_ms=10000, on_error="closed")
    allowed = []

    def run(t):
        async def main():
            n = 0
            for i in range(20):
                ds = await asyncio.gather(*[lim.acheck(key, "fixed_window 300/366d")
                                            for _ in range(10)])
                assert all(d.fallback is None for d in ds)
                n += sum(d.allowed for d in ds)
                await asyncio.sleep(0)
            return n
        allowed.append(run_loop(main()))

    def run_loop(coro):
        return asyncio.new_event_loop().run_until_complete(coro)

    threads = [threading.Thread(target=run, args=(t,)) for t in range(3)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert sum(allowed) == 300 and len(allowed) == 3
    assert lim.stats()["loops"] >= 3


@pytest.mark.parametrize("loop_kind", LOOPS)
def test_memory_sync_and_async_share_one_state(loop_kind, key):
    lim = porteiro.Limiter()
    assert lim.check(key, "fixed_window 3/366d").remaining == 2

    async def main():
        return [(await lim.acheck(key, "fixed_window 3/366d")).allowed for _ in range(3)]

    assert run(loop_kind, main()) == [True, True, False]
    assert not lim.check(key, "fixed_window 3/366d").allowed
    assert lim.stats()["handles"] == 1
