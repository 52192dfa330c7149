"""Flask: an extension limiting every request, and a decorator per view.

    from porteiro.flask import Porteiro
    limiter = porteiro.Limiter("redis://127.0.0.1:6379")
    rl = Porteiro(app, limiter, "gcra 10/1s burst 20",
                  key=lambda request: request.remote_addr)

    @app.get("/search")
    @rl.limit("fixed_window 100/1m", key=lambda request: request.headers["X-Api-Key"])
    def search(): ...

key(request) returning None leaves the request unlimited. A denied request gets 429 with Retry-After, RateLimit and RateLimit-Policy
as porteirod sends them; an allowed one carries RateLimit and
RateLimit-Policy too. With on_error="error" and Redis failing: 503, as
porteirod.
"""

import functools

from flask import Response, g, make_response, request

from . import InvalidLimit, RedisError
from ._http import (BAD_REQUEST_STATUS, UNAVAILABLE_STATUS, bad_request_body, denial_body,
                    resolve, unavailable_body)


def _remote_addr(req):
    return req.remote_addr or "unknown"


def _unavailable(exc):
    return Response(unavailable_body(exc), status=UNAVAILABLE_STATUS, mimetype="application/json")


def _bad_request(exc):
    return Response(bad_request_body(exc), status=BAD_REQUEST_STATUS, mimetype="application/json")


def _too_many(decision):
    resp = Response(denial_body(decision), status=429, mimetype="application/json")
    for k, v in decision.headers.items():
        resp.headers[k] = v
    return resp


class Porteiro:
    """The Flask extension. limits None: no app-wide limit (only the
    decorated views). key: a function of the request giving the client's
    key (default: its remote address). exempt: view names not limited."""

    def __init__(self, app=None, limiter=None, limits=None, *, key=None, cost=1, name=None,
                 exempt=()):
        self.limiter = limiter
        self.limits = limits
        self.key = key or _remote_addr
        self.cost = cost
        self.name = name
        self.exempt = set(exempt)
        self._limits = None
        if app is not None:
            self.init_app(app)

    def init_app(self, app):
        if self.limiter is None:
            raise ValueError("porteiro.flask.Porteiro needs a porteiro.Limiter")
        app.extensions["porteiro"] = self
        if self.limits is not None:
            self._limits = resolve(self.limiter, self.limits, self.name)
            app.before_request(self._before)
        app.after_request(self._after)

    def _before(self):
        if request.endpoint in self.exempt:
            return None
        key = self.key(request)
        if key is None:  # not limited
            return None
        try:
            d = self.limiter.check(key, self._limits, self.cost)
        except RedisError as e:  # on_error "error": porteirod answers 503
            return _unavailable(e)
        except InvalidLimit as e:  # an empty key: porteirod answers 400
            return _bad_request(e)
        g.porteiro_decision = d
        if not d.allowed:
            return _too_many(d)
        return None

    def _after(self, response):
        d = g.pop("porteiro_decision", None)
        if d is not None and response.status_code != 429:
            for k, v in d.headers.items():
                response.headers.setdefault(k, v)
        return response

    def limit(self, limits, *, key=None, cost=1, name=None):
        """A decorator: this view is limited by `limits` (text, Limits or
        "policy:NAME"), the key from key(request)."""
        return limit(self.limiter, limits, key=key or self.key, cost=cost, name=name)


def limit(limiter, limits, *, key=None, cost=1, name=None):
    """A decorator limiting one Flask view (no extension needed)."""
    key = key or _remote_addr
    lim = resolve(limiter, limits, name)

    def deco(view):
        @functools.wraps(view)
        def wrapper(*args, **kwargs):
            k = key(request)
            if k is None:  # not limited
                return view(*args, **kwargs)
            try:
                d = limiter.check(k, lim, cost)
            except RedisError as e:
                return _unavailable(e)
            except InvalidLimit as e:
                return _bad_request(e)
            if not d.allowed:
                return _too_many(d)
            resp = make_response(view(*args, **kwargs))
            for k, v in d.headers.items():
                resp.headers[k] = v
            return resp

        return wrapper

    return deco
