"""A Django middleware, configured in settings:

    MIDDLEWARE = [..., "porteiro.django.RateLimitMiddleware"]
    PORTEIRO = {
        "redis": "redis://127.0.0.1:6379",     # None / absent: in memory
        "limits": "gcra 10/1s burst 20",         # or "policy:NAME" with "config"
        "key": "myapp.limits.client_key",        # a function of the request
                                                 # (dotted path or callable)
        "on_error": "open",                      # and any Limiter argument
    }

A denied request gets 429 with Retry-After, RateLimit and RateLimit-Policy
as porteirod sends them; an allowed one carries RateLimit and
RateLimit-Policy too. "limiter": an existing porteiro.Limiter instead.
"""

from django.conf import settings
from django.http import HttpResponse
from django.utils.module_loading import import_string

from . import InvalidLimit, Limiter, RedisError
from ._http import (BAD_REQUEST_STATUS, UNAVAILABLE_STATUS, bad_request_body, denial_body,
                    resolve, unavailable_body)

_OWN = ("limits", "key", "cost", "name", "limiter", "exempt")


def client_address(request):
    """The default key: REMOTE_ADDR."""
    return request.META.get("REMOTE_ADDR") or "unknown"


class RateLimitMiddleware:
    def __init__(self, get_response):
        self.get_response = get_response
        conf = dict(getattr(settings, "PORTEIRO", {}))
        limiter = conf.get("limiter")
        if limiter is None:
            limiter = Limiter(**{k: v for k, v in conf.items() if k not in _OWN})
        self.limiter = limiter
        self.limits = resolve(limiter, conf["limits"], conf.get("name"))
        key = conf.get("key", client_address)
        self.key = import_string(key) if isinstance(key, str) else key
        self.cost = conf.get("cost", 1)
        self.exempt = tuple(conf.get("exempt", ()))

    def __call__(self, request):
        if self.exempt and request.path.startswith(self.exempt):
            return self.get_response(request)
        key = self.key(request)
        if key is None:  # not limited
            return self.get_response(request)
        try:
            d = self.limiter.check(key, self.limits, self.cost)
        except RedisError as e:  # on_error "error": porteirod answers 503
            return HttpResponse(unavailable_body(e), status=UNAVAILABLE_STATUS,
                                content_type="application/json")
        except InvalidLimit as e:  # an empty key: porteirod answers 400
            return HttpResponse(bad_request_body(e), status=BAD_REQUEST_STATUS,
                                content_type="application/json")
        if not d.allowed:
            resp = HttpResponse(denial_body(d), status=429, content_type="application/json")
        else:
            resp = self.get_response(request)
        for k, v in d.headers.items():
            resp[k] = v
        return resp
