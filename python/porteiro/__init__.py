"""porteiro: a distributed rate limiter (libporteiro) for Python.

    import porteiro
    limiter = porteiro.Limiter("redis://127.0.0.1:6379")   # None: in memory
    d = limiter.check("user:42", "gcra 10/1s burst 20")
    if not d:
        ...  # 429, with d.headers (RateLimit-Policy, RateLimit, Retry-After)

Every call goes to the C library (porteiro._porteiro); this module adds the
context managers (concurrency leases, reservations settled with their real
cost) and the exception a denied context manager raises. docs/python.md.
"""

import time as _time

from . import _porteiro
from ._porteiro import (  # noqa: F401  (the public names)
    Decision,
    InvalidLimit,
    Limits,
    PorteiroError,
    RedisError,
    parse_duration,
)

__all__ = [
    "Limiter",
    "Limits",
    "Decision",
    "PorteiroError",
    "InvalidLimit",
    "RedisError",
    "RateLimited",
    "Lease",
    "Reservation",
    "parse_duration",
]

__version__ = _porteiro.LIBRARY_VERSION


class RateLimited(PorteiroError):
    """A context manager's check was denied; .decision says why (its
    retry_after_ms and headers)."""

    def __init__(self, decision):
        super().__init__("rate limited: retry after %d ms" % decision.retry_after_ms)
        self.decision = decision
        self.status = "denied"


class Lease:
    """A concurrency lease held (Limiter.concurrency): released on exit."""

    __slots__ = ("limiter", "key", "id", "decision", "lease_ms")

    def __init__(self, limiter, key, lease_id, decision, lease_ms):
        self.limiter = limiter
        self.key = key
        self.id = lease_id
        self.decision = decision
        self.lease_ms = lease_ms

    def renew(self, lease_ms=None):
        """Extends the lease to lease_ms from now; False if it had expired."""
        return self.limiter.renew(self.key, self.id, lease_ms or self.lease_ms)

    def release(self):
        """Gives the lease back (also done on exit); False if it had expired."""
        if self.id is None:
            return False
        lease_id, self.id = self.id, None
        return self.limiter.release(self.key, lease_id)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.release()
        return False

    async def __aenter__(self):
        return self

    async def __aexit__(self, *exc):
        self.release()
        return False


class Reservation:
    """Units taken with an estimate (Limiter.reserve); settle(used) charges
    or gives back the difference once the real cost is known. Not settled
    at exit: the estimate stands (nothing leaks)."""

    __slots__ = ("limiter", "key", "limits", "estimate", "decision", "settled", "_t0", "tier")

    def __init__(self, limiter, key, limits, estimate, decision, tier=None):
        self.limiter = limiter
        self.key = key
        self.limits = limits
        self.estimate = estimate
        self.decision = decision
        self.settled = None
        self.tier = tier
        self._t0 = _time.monotonic()

    def _age_ms(self):
        return int((_time.monotonic() - self._t0) * 1000)

    def settle(self, used):
        """Settles with the units really used; returns the Decision after it
        (its debt and debt_added say what went past empty)."""
        if self.settled is not None:
            raise PorteiroError("this reservation is already settled")
        self.settled = self.limiter.settle(
            self.key, self.limits, self.estimate, used, age_ms=self._age_ms(), tier=self.tier
        )
        return self.settled

    async def asettle(self, used):
        """settle() on the running asyncio loop."""
        if self.settled is not None:
            raise PorteiroError("this reservation is already settled")
        self.settled = await self.limiter.asettle(
            self.key, self.limits, self.estimate, used, age_ms=self._age_ms(), tier=self.tier
        )
        return self.settled

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return False

    async def __aenter__(self):
        return self

    async def __aexit__(self, *exc):
        return False


class Limiter(_porteiro.Limiter):
    """Limiter(redis=None, *, on_error="open", prefix=None, config=None,
    config_text=None, connect_timeout_ms=0, command_timeout_ms=0,
    local_divisor=0, memory_max_keys=0, batch_max=0, deny_cache_keys=0,
    breaker_failures=0, quota_lease_ms=0, quota_lease_units=0, connections=8)

    redis: None (the memory backend, this process only) or a Redis URL
    (redis://, rediss://, unix://, redis+cluster://, redis+sentinel://).
    config: a porteiro YAML file (its redis/on_error/... options and its
    policies, see Limiter.policy); explicit arguments override the file.
    Safe to share between threads; checks on Redis release the GIL.
    """

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()
        return False

    def concurrency(self, key, limit, lease_ms=60000):
        """A concurrency lease as a context manager: at most `limit` held at
        once for key, each expiring after lease_ms if never released.
        Raises RateLimited when none is free."""
        decision, lease_id = self.acquire(key, limit, lease_ms)
        if not decision.allowed:
            raise RateLimited(decision)
        return Lease(self, key, lease_id, decision, lease_ms)

    def reserve(self, key, limits, estimate, *, max_wait_ms=0, tier=None):
        """Checks `estimate` units now; settle(used) later charges or gives
        back the difference (issue 38: tokens known after the response):

            with limiter.reserve(key, "token_bucket 10000/1m", 500) as r:
                used = call_model()
                r.settle(used)

        Raises RateLimited when denied."""
        d = self.check(key, limits, estimate, max_wait_ms=max_wait_ms, tier=tier)
        if not d.allowed:
            raise RateLimited(d)
        return Reservation(self, key, limits, estimate, d, tier)

    def areserve(self, key, limits, estimate, *, max_wait_ms=0, tier=None):
        """reserve() on the running asyncio loop:

            async with limiter.areserve(key, limits, 500) as r:
                await r.asettle(used)

        (or r = await limiter.areserve(...)). Raises RateLimited."""
        return _AsyncReserve(self, key, limits, estimate, max_wait_ms, tier)


class _AsyncReserve:
    """What areserve() gives: awaitable, or an async context manager."""

    __slots__ = ("args", "reservation")

    def __init__(self, *args):
        self.args = args
        self.reservation = None

    async def _take(self):
        limiter, key, limits, estimate, max_wait_ms, tier = self.args
        d = await limiter.acheck(key, limits, estimate, max_wait_ms=max_wait_ms, tier=tier)
        if not d.allowed:
            raise RateLimited(d)
        self.reservation = Reservation(limiter, key, limits, estimate, d, tier)
        return self.reservation

    def __await__(self):
        return self._take().__await__()

    async def __aenter__(self):
        return await self._take()

    async def __aexit__(self, *exc):
        return False
