"""ASGI middleware (Starlette, FastAPI, any ASGI app), on the running loop.

    app.add_middleware(RateLimitMiddleware, limiter=limiter,
                       limits="gcra 10/1s burst 20",
                       key=lambda scope: scope["client"][0])

key receives the ASGI scope (for a Starlette Request: Request(scope));
None leaves the request unlimited. on_error="error" with Redis failing:
503, as porteirod.
Checks are made with Limiter.acheck: no thread per request, checks in
flight batched. A denied request gets 429 with Retry-After, RateLimit and
RateLimit-Policy as porteirod sends them; an allowed one carries RateLimit
and RateLimit-Policy.
"""

from . import InvalidLimit, RedisError
from ._http import (BAD_REQUEST_STATUS, UNAVAILABLE_STATUS, bad_request_body, denial_body,
                    resolve, unavailable_body)


def client_address(scope):
    """The default key: the client's address (or "unknown")."""
    client = scope.get("client")
    return client[0] if client else "unknown"


def _header_list(decision):
    return [(k.lower().encode("latin-1"), v.encode("latin-1")) for k, v in decision.headers.items()]


async def _answer(send, status, body, headers):
    await send(
        {
            "type": "http.response.start",
            "status": status,
            "headers": [
                (b"content-type", b"application/json"),
                (b"content-length", str(len(body)).encode()),
            ]
            + headers,
        }
    )
    await send({"type": "http.response.body", "body": body})


class RateLimitMiddleware:
    """RateLimitMiddleware(app, limiter, limits, *, key=client_address,
    cost=1, name=None, exempt=lambda scope: False)"""

    def __init__(self, app, limiter, limits, *, key=client_address, cost=1, name=None,
                 exempt=None):
        self.app = app
        self.limiter = limiter
        self.limits = resolve(limiter, limits, name)
        self.key = key
        self.cost = cost
        self.exempt = exempt

    async def __call__(self, scope, receive, send):
        if scope["type"] != "http" or (self.exempt is not None and self.exempt(scope)):
            await self.app(scope, receive, send)
            return
        key = self.key(scope)
        if key is None:  # not limited
            await self.app(scope, receive, send)
            return
        try:
            d = await self.limiter.acheck(key, self.limits, self.cost)
        except RedisError as e:  # on_error "error": porteirod answers 503
            await _answer(send, UNAVAILABLE_STATUS, unavailable_body(e), [])
            return
        except InvalidLimit as e:  # an empty key: porteirod answers 400
            await _answer(send, BAD_REQUEST_STATUS, bad_request_body(e), [])
            return
        headers = _header_list(d)
        if not d.allowed:
            await _answer(send, 429, denial_body(d), headers)
            return

        async def send_with_headers(message):
            if message["type"] == "http.response.start":
                message = dict(message)
                message["headers"] = list(message.get("headers", [])) + headers
            await send(message)

        await self.app(scope, receive, send_with_headers)
