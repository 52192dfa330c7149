"""porteiro: a distributed rate limiter (libporteiro) for Python. docs/python.md."""

import asyncio
import os
from typing import Any, Iterable, Literal, Mapping, Optional, Sequence, Tuple, Union

__version__: str
__all__: list[str]

Key = Union[str, bytes]
OnError = Literal["open", "closed", "local", "error"]

class PorteiroError(Exception):
    """A porteiro call failed. .status names porteiro's status ("invalid",
    "key", "timeout", "connect", "redis", "config", "unsupported", ...)."""

    status: str

class InvalidLimit(PorteiroError, ValueError):
    """A bad limit text, key, Redis URL or option, with porteiro's own message."""

class RedisError(PorteiroError):
    """Redis failed and on_error is "error" (or a call that never falls
    back: reset, concurrency leases with on_error "error")."""

class RateLimited(PorteiroError):
    """A context manager's check was denied (Limiter.concurrency, reserve)."""

    decision: Decision
    def __init__(self, decision: Decision) -> None: ...

class Limits:
    """One or several limits in porteiro's compact form, parsed once:
    "gcra 10/1s burst 20", "token_bucket 5/1s, fixed_window 1000/1h".
    name: the policy name the RateLimit headers carry. Raises InvalidLimit."""

    name: str
    text: Optional[str]
    def __init__(self, text: str, name: str = "default") -> None: ...
    @property
    def limits(self) -> Tuple[dict, ...]:
        """Each limit: {"algorithm", "limit", "period_ms", "burst"}."""
    @property
    def is_policy(self) -> bool:
        """True for a policy of the limiter's config (Limiter.policy)."""

LimitsArg = Union[str, Limits]

class Decision:
    """The answer of one check; true when allowed."""

    name: str
    @property
    def allowed(self) -> bool:
        """Every limit allowed (or a fallback allowed)."""
    @property
    def limit(self) -> int:
        """L of the limit with the least remaining (B where the capacity is B)."""
    @property
    def remaining(self) -> int:
        """Units that would still pass now."""
    @property
    def reset_ms(self) -> int:
        """ms until the limits are fully restored."""
    @property
    def retry_after_ms(self) -> int:
        """0 when allowed; else ms until the same check can pass; -1: never."""
    @property
    def wait_ms(self) -> int:
        """A reservation (max_wait_ms): ms to wait before proceeding."""
    @property
    def denied_by(self) -> int:
        """Index of the first denying limit, or -1."""
    @property
    def debt(self) -> int:
        """After a settle: the largest debt of its limits (units past empty)."""
    @property
    def debt_added(self) -> int:
        """After a settle: units of its charge that went past empty."""
    @property
    def shadow_denied(self) -> bool:
        """A shadow policy would have denied (allowed anyway)."""
    @property
    def fallback(self) -> Optional[Literal["open", "closed", "local"]]:
        """None for Redis's decision; else what on_error decided."""
    @property
    def fallback_reason(self) -> Optional[str]:
        """The failure behind a fallback."""
    @property
    def results(self) -> Tuple[dict, ...]:
        """Each limit's answer: allowed, limit, remaining, reset_ms,
        retry_after_ms, wait_ms."""
    @property
    def headers(self) -> Mapping[str, str]:
        """The header fields porteirod sends: RateLimit-Policy, RateLimit,
        and Retry-After when denied (draft-ietf-httpapi-ratelimit-headers)."""
    def __bool__(self) -> bool: ...

class Lease:
    """A concurrency lease; released when the with block ends."""

    key: Key
    id: Optional[str]
    decision: Decision
    lease_ms: int
    def renew(self, lease_ms: Optional[int] = None) -> bool: ...
    def release(self) -> bool: ...
    def __enter__(self) -> Lease: ...
    def __exit__(self, *exc: Any) -> bool: ...
    async def __aenter__(self) -> Lease: ...
    async def __aexit__(self, *exc: Any) -> bool: ...

class Reservation:
    """Units taken with an estimate; settle(used) once the real cost is known."""

    key: Key
    estimate: int
    decision: Decision
    settled: Optional[Decision]
    def settle(self, used: int) -> Decision:
        """Gives back (used < estimate) or charges (used > estimate, possibly
        as debt) the difference, in one call. Returns the state after it."""
    async def asettle(self, used: int) -> Decision: ...
    def __enter__(self) -> Reservation: ...
    def __exit__(self, *exc: Any) -> bool: ...
    async def __aenter__(self) -> Reservation: ...
    async def __aexit__(self, *exc: Any) -> bool: ...

class AsyncReserve:
    """What Limiter.areserve gives: awaitable, or an async context manager."""

    def __await__(self) -> Any: ...
    async def __aenter__(self) -> Reservation: ...
    async def __aexit__(self, *exc: Any) -> bool: ...

class Limiter:
    """A rate limiter: Redis (redis=URL) or the memory backend (None).

    Thread-safe; blocking checks on Redis release the GIL. acheck() and the
    other a* methods run on the running asyncio loop (uvloop too)."""

    def __init__(
        self,
        redis: Optional[str] = None,
        *,
        on_error: OnError = "open",
        prefix: Optional[str] = None,
        config: Union[None, str, os.PathLike] = None,
        config_text: Optional[str] = None,
        connect_timeout_ms: int = 0,
        command_timeout_ms: int = 0,
        local_divisor: int = 0,
        memory_max_keys: int = 0,
        batch_max: int = 0,
        deny_cache_keys: int = 0,
        breaker_failures: int = 0,
        quota_lease_ms: int = 0,
        quota_lease_units: int = 0,
        connections: int = 8,
    ) -> None: ...
    @property
    def memory(self) -> bool:
        """True on the memory backend."""
    def check(self, key: Key, limits: LimitsArg, cost: int = 1, *, now_ms: Optional[int] = None,
              max_wait_ms: int = 0, tier: Optional[str] = None) -> Decision:
        """Decides one check of `cost` units, all-or-nothing over the limits."""
    def peek(self, key: Key, limits: LimitsArg, *, now_ms: Optional[int] = None,
             tier: Optional[str] = None) -> Decision:
        """The state as it is (a check of cost 0): nothing written."""
    def check_many(self, items: Sequence[Union[Tuple[Key, LimitsArg], Tuple[Key, LimitsArg, int]]],
                   *, now_ms: Optional[int] = None) -> list[Union[Decision, PorteiroError]]:
        """Many checks in one round trip (batched); each decided alone."""
    def refund(self, key: Key, limits: LimitsArg, cost: int = 1, *,
               now_ms: Optional[int] = None) -> Decision:
        """Gives back up to `cost` units taken by earlier checks."""
    def reset(self, key: Key, limits: LimitsArg) -> None:
        """Forgets the state of these limits for key."""
    def settle(self, key: Key, limits: LimitsArg, estimate: int, used: int, *, age_ms: int = -1,
               now_ms: Optional[int] = None, tier: Optional[str] = None) -> Decision:
        """Settles a check of `estimate` units with the units really used."""
    def acquire(self, key: Key, limit: int, lease_ms: int, *,
                now_ms: Optional[int] = None) -> Tuple[Decision, Optional[str]]:
        """Takes one of at most `limit` concurrent leases on key."""
    def release(self, key: Key, lease_id: str, *, now_ms: Optional[int] = None) -> bool: ...
    def renew(self, key: Key, lease_id: str, lease_ms: int, *,
              now_ms: Optional[int] = None) -> bool: ...
    def concurrency(self, key: Key, limit: int, lease_ms: int = 60000) -> Lease:
        """A concurrency lease as a context manager (raises RateLimited)."""
    def reserve(self, key: Key, limits: LimitsArg, estimate: int, *, max_wait_ms: int = 0,
                tier: Optional[str] = None) -> Reservation:
        """Checks `estimate` units; settle the real cost later (raises RateLimited)."""
    def areserve(self, key: Key, limits: LimitsArg, estimate: int, *, max_wait_ms: int = 0,
                 tier: Optional[str] = None) -> AsyncReserve:
        """reserve() on the running loop: `async with limiter.areserve(...) as r`,
        or `r = await limiter.areserve(...)`."""
    def acheck(self, key: Key, limits: LimitsArg, cost: int = 1, *, now_ms: Optional[int] = None,
               max_wait_ms: int = 0, tier: Optional[str] = None) -> asyncio.Future[Decision]:
        """check() on the running loop: no thread, checks in flight batched."""
    def arefund(self, key: Key, limits: LimitsArg, cost: int = 1, *,
                now_ms: Optional[int] = None) -> asyncio.Future[Decision]: ...
    def asettle(self, key: Key, limits: LimitsArg, estimate: int, used: int, *, age_ms: int = -1,
                now_ms: Optional[int] = None, tier: Optional[str] = None) -> asyncio.Future[Decision]: ...
    def policy(self, name: str) -> Limits:
        """A policy of the config file (its shadow mode, on_error, tiers)."""
    def policies(self) -> list[str]: ...
    def stats(self) -> dict[str, int]:
        """Counters summed over the limiter's C handles."""
    def close(self) -> None:
        """Frees the C handles (also done when the limiter goes)."""
    def __enter__(self) -> Limiter: ...
    def __exit__(self, *exc: Any) -> bool: ...

def parse_duration(text: str) -> int:
    """"250ms", "1s", "1m", "1h", "1d" -> milliseconds (InvalidLimit otherwise)."""
