"""References and memory: 10^6 memory-backend checks leave RSS flat."""

import asyncio
import os
import gc
import sys

import pytest

import porteiro


def rss_kb():
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    return 0


@pytest.mark.skipif(os.environ.get("PORTEIRO_SANITIZED") == "1",
                    reason="a sanitizer build (see python/CMakeLists.txt)")
def test_million_checks_rss_flat():
    lim = porteiro.Limiter(memory_max_keys=1000)
    keys = ["k%d" % i for i in range(1000)]
    L = porteiro.Limits("gcra 100/1s burst 50")
    text = "fixed_window 10/1m"
    check = lim.check

    def round_(n):
        for i in range(n):
            k = keys[i % 1000]
            d = check(k, L)
            d.headers
            check(k, text, 2, now_ms=i)
        lim.check_many([(keys[0], L), (keys[1], text, 3)])
        try:
            check("", L)
        except porteiro.InvalidLimit:
            pass

    round_(100000)  # warm: keys, caches, allocator
    gc.collect()
    objs = len(gc.get_objects())
    refs = sys.getrefcount(L)
    before = rss_kb()
    round_(400000)  # 8 x 10^5 checks more (10^6 in all)
    gc.collect()
    grew = rss_kb() - before
    assert grew < 2048, "RSS grew by %d kB over 8e5 checks" % grew
    assert len(gc.get_objects()) - objs < 100
    assert sys.getrefcount(L) == refs


@pytest.mark.skipif(os.environ.get("PORTEIRO_SANITIZED") == "1",
                    reason="a sanitizer build (see python/CMakeLists.txt)")
def test_async_checks_leak_nothing():
    lim = porteiro.Limiter()

    async def main():
        for _ in range(200):
            await asyncio.gather(*[lim.acheck("a%d" % i, "gcra 10/1s") for i in range(100)])

    asyncio.run(main())
    gc.collect()
    before = rss_kb()
    asyncio.run(main())
    gc.collect()
    assert rss_kb() - before < 1024
