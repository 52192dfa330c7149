"""The tutorial's fixed window (INCR + EXPIRE, then a Lua script) with
porteiro: one limiter for the process, one call per request. REDIS_URL
unset or empty: the memory backend (this process only)."""
import os

import porteiro

limiter = porteiro.Limiter(os.environ.get("REDIS_URL") or None)


def is_rate_limited(user_id, limit, window_seconds):
    return not limiter.check(f"user:{user_id}", f"fixed_window {limit}/{window_seconds}s")


if __name__ == "__main__":
    user = "demo-%d" % os.getpid()
    print(*(is_rate_limited(user, 3, 60) for _ in range(4)))
