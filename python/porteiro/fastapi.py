"""A FastAPI dependency: a route (or router, or app) limited per request.

    limit = RateLimit(limiter, "fixed_window 100/1m",
                      key=lambda request: request.headers.get("x-api-key", "anon"))

    @app.get("/items", dependencies=[Depends(limit)])
    async def items(): ...

Denied: HTTPException 429 with Retry-After, RateLimit and RateLimit-Policy
as porteirod sends them. Allowed: RateLimit and RateLimit-Policy are set
on the response. The check runs on the loop (Limiter.acheck).
"""

from fastapi import HTTPException, Request, Response

from . import InvalidLimit, RedisError
from ._http import BAD_REQUEST_STATUS, UNAVAILABLE_STATUS, resolve


def _client_address(request):
    return request.client.host if request.client else "unknown"


class RateLimit:
    """RateLimit(limiter, limits, *, key=lambda request: client address,
    cost=1, name=None): a dependency; it returns the Decision."""

    def __init__(self, limiter, limits, *, key=None, cost=1, name=None):
        self.limiter = limiter
        self.limits = resolve(limiter, limits, name)
        self.key = key or _client_address
        self.cost = cost

    async def __call__(self, request: Request, response: Response):
        key = self.key(request)
        if key is None:  # not limited
            return None
        try:
            d = await self.limiter.acheck(key, self.limits, self.cost)
        except RedisError as e:  # on_error "error": porteirod answers 503
            raise HTTPException(status_code=UNAVAILABLE_STATUS,
                                detail="rate limiter unavailable: %s" % e) from e
        except InvalidLimit as e:  # an empty key: porteirod answers 400
            raise HTTPException(status_code=BAD_REQUEST_STATUS, detail="missing key: %s" % e) from e
        if not d.allowed:
            raise HTTPException(
                status_code=429,
                detail={
                    "allowed": False,
                    "limit": d.limit,
                    "remaining": d.remaining,
                    "reset_ms": d.reset_ms,
                    "retry_after_ms": d.retry_after_ms,
                },
                headers=dict(d.headers),
            )
        for k, v in d.headers.items():
            response.headers[k] = v
        return d
