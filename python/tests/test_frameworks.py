"""Each framework through its own test client: 429 with Retry-After,
RateLimit and RateLimit-Policy exactly as porteirod answers them (the
figures of tests/daemon/test_daemon.c: token_bucket 3/1h named "api"), the key from
a function of the request."""

import pytest

import porteiro
from conftest import need

CONFIG = "policies:\n  api:\n    limits: [token_bucket 3/1h]\n"
POLICY = '"api";q=3;w=3600'


def expect_sequence(responses):
    """Three allowed then one denied, as porteirod's /v1/check."""
    codes = [r[0] for r in responses]
    assert codes == [200, 200, 200, 429], codes
    for i, (_, h) in enumerate(responses[:3]):
        assert h["ratelimit-policy"] == POLICY
        assert h["ratelimit"].startswith('"api";r=%d;t=' % (2 - i))
        assert "retry-after" not in h
    h = responses[3][1]
    assert h["retry-after"] == "1200"
    assert h["ratelimit-policy"] == POLICY
    assert h["ratelimit"].startswith('"api";r=0;t=')


def lower(headers):
    return {k.lower(): v for k, v in headers.items()}


@pytest.fixture(params=["memory", "redis"])
def limiter(request):
    if request.param == "memory":
        return porteiro.Limiter(config_text=CONFIG)
    return porteiro.Limiter(request.getfixturevalue("redis_url"), config_text=CONFIG, command_timeout_ms=10000)


def test_flask_extension_and_decorator(limiter, key):
    flask = need("flask")
    from porteiro.flask import Porteiro, limit

    app = flask.Flask(__name__)
    ext = Porteiro(app, limiter, "policy:api",
                   key=lambda request: key + request.headers.get("X-Api-Key", ""),
                   exempt={"free"})

    @app.route("/")
    def index():
        return "ok"

    @app.route("/free")
    def free():
        return "free"

    @app.route("/decorated")
    @ext.limit(porteiro.Limits("token_bucket 3/1h", "api"),
               key=lambda request: key + "d" + request.args.get("u", ""))
    def decorated():
        return "ok"

    plain = flask.Flask("plain")

    @plain.route("/")
    @limit(limiter, "policy:api", key=lambda request: key + "p")
    def p():
        return "ok"

    c = app.test_client()
    expect_sequence([(r.status_code, lower(r.headers))
                     for r in (c.get("/", headers={"X-Api-Key": "a"}) for _ in range(4))])
    assert c.get("/", headers={"X-Api-Key": "b"}).status_code == 200  # another key
    assert all(c.get("/free").status_code == 200 for _ in range(5))
    r = c.get("/", headers={"X-Api-Key": "a"})
    assert r.status_code == 429 and r.json["retry_after_ms"] > 0
    # The decorated view: the app-wide limit (key "") and its own.
    c2 = plain.test_client()
    expect_sequence([(r.status_code, lower(r.headers)) for r in (c2.get("/") for _ in range(4))])


def test_asgi_middleware_and_fastapi_dependency(limiter, key):
    fastapi = need("fastapi")
    from fastapi.testclient import TestClient

    from porteiro.asgi import RateLimitMiddleware
    from porteiro.fastapi import RateLimit

    app = fastapi.FastAPI()
    app.add_middleware(RateLimitMiddleware, limiter=limiter, limits="policy:api",
                       key=lambda scope: key + dict(scope["headers"]).get(b"x-api-key", b"").decode())

    @app.get("/")
    async def index():
        return {"ok": True}

    with TestClient(app) as c:
        expect_sequence([(r.status_code, lower(r.headers))
                         for r in (c.get("/", headers={"X-Api-Key": "a"}) for _ in range(4))])
        assert c.get("/", headers={"X-Api-Key": "b"}).status_code == 200

    app2 = fastapi.FastAPI()
    dep = RateLimit(limiter, "policy:api", key=lambda request: key + "f" + request.headers.get("x-api-key", ""))

    @app2.get("/items", dependencies=[fastapi.Depends(dep)])
    async def items():
        return {"items": []}

    @app2.get("/open")
    async def open_():
        return {}

    with TestClient(app2) as c:
        expect_sequence([(r.status_code, lower(r.headers))
                         for r in (c.get("/items", headers={"X-Api-Key": "a"}) for _ in range(4))])
        assert c.get("/items", headers={"X-Api-Key": "b"}).status_code == 200
        assert all(c.get("/open").status_code == 200 for _ in range(5))


def test_django_middleware(limiter, key):
    need("django")
    import django
    from django.conf import settings

    if not settings.configured:
        settings.configure(
            DEBUG=False, ALLOWED_HOSTS=["*"], ROOT_URLCONF=__name__, SECRET_KEY="x" * 50,
            MIDDLEWARE=["porteiro.django.RateLimitMiddleware"], PORTEIRO={},
        )
        django.setup()
    from django.test import Client
    from django.test.utils import override_settings

    conf = {"limiter": limiter, "limits": "policy:api",
            "key": lambda request: key + request.headers.get("X-Api-Key", ""),
            "exempt": ["/free"]}
    with override_settings(PORTEIRO=conf):
        c = Client()
        expect_sequence([(r.status_code, lower(r.headers))
                         for r in (c.get("/", HTTP_X_API_KEY="a") for _ in range(4))])
        assert c.get("/", HTTP_X_API_KEY="b").status_code == 200
        assert all(c.get("/free").status_code == 200 for _ in range(5))
    # From settings alone: its own limiter (memory), a dotted-path key.
    with override_settings(PORTEIRO={"limits": "fixed_window 1/366d",
                                     "key": "porteiro.django.client_address"}):
        c = Client()
        assert [c.get("/").status_code for _ in range(2)] == [200, 429]
    with override_settings(PORTEIRO={"limiter": limiter, "limits": "policy:api",
                                     "key": lambda request: request.headers.get("X-Api-Key", "")}):
        assert Client().get("/").status_code == 400  # a missing key, as porteirod


def _view(request):
    from django.http import HttpResponse
    return HttpResponse("ok")


def _urls():
    from django.urls import path
    return [path("", _view), path("free", _view)]


def __getattr__(name):  # ROOT_URLCONF's urlpatterns, made when Django asks
    if name == "urlpatterns":
        return _urls()
    raise AttributeError(name)


def test_redis_down_with_on_error_error_is_503_and_none_key_unlimited(own_redis, key):
    """on_error "error" and Redis gone: 503, as porteirod; a key function
    answering None leaves the request unlimited."""
    flask = need("flask")
    fastapi = need("fastapi")
    from fastapi.testclient import TestClient

    from porteiro.asgi import RateLimitMiddleware
    from porteiro.fastapi import RateLimit
    from porteiro.flask import Porteiro

    lim = porteiro.Limiter(own_redis.url, on_error="error", command_timeout_ms=200,
                           breaker_failures=-1)
    L = "fixed_window 1/366d"
    app = flask.Flask("down")
    Porteiro(app, lim, L, key=lambda request: None if request.path == "/free" else key)
    app.add_url_rule("/", "i", lambda: "ok")
    app.add_url_rule("/free", "f", lambda: "ok")
    a = fastapi.FastAPI()
    a.add_middleware(RateLimitMiddleware, limiter=lim, limits=L,
                     key=lambda scope: None if scope["path"] == "/free" else key + "a")
    a.get("/")(lambda: {})
    a.get("/free")(lambda: {})
    b = fastapi.FastAPI()
    b.get("/", dependencies=[fastapi.Depends(RateLimit(lim, L, key=lambda r: key + "b"))])(lambda: {})
    fc, ac, bc = app.test_client(), TestClient(a), TestClient(b)
    assert [fc.get("/").status_code for _ in range(2)] == [200, 429]
    assert [ac.get("/").status_code for _ in range(2)] == [200, 429]
    assert [bc.get("/").status_code for _ in range(2)] == [200, 429]
    own_redis.kill()
    assert fc.get("/").status_code == 503
    assert ac.get("/").status_code == 503
    assert bc.get("/").status_code == 503
    assert all(fc.get("/free").status_code == 200 for _ in range(3))
    assert all(ac.get("/free").status_code == 200 for _ in range(3))


def test_empty_key_is_400(key):
    """A key function answering "" (a missing header): 400, as porteirod's
    "missing key", never a 500."""
    flask = need("flask")
    fastapi = need("fastapi")
    from fastapi.testclient import TestClient

    from porteiro.asgi import RateLimitMiddleware
    from porteiro.fastapi import RateLimit
    from porteiro.flask import Porteiro, limit

    lim = porteiro.Limiter()
    L = "fixed_window 5/366d"
    app = flask.Flask("empty")
    Porteiro(app, lim, L, key=lambda request: request.headers.get("X-Key", ""))
    app.add_url_rule("/", "i", lambda: "ok")
    app.add_url_rule("/d", "d", limit(lim, L, key=lambda request: "")(lambda: "ok"))
    a = fastapi.FastAPI()
    a.add_middleware(RateLimitMiddleware, limiter=lim, limits=L,
                     key=lambda scope: dict(scope["headers"]).get(b"x-key", b"").decode())
    a.get("/")(lambda: {})
    b = fastapi.FastAPI()
    b.get("/", dependencies=[fastapi.Depends(RateLimit(lim, L, key=lambda r: ""))])(lambda: {})
    fc = app.test_client()
    assert fc.get("/").status_code == 400
    assert fc.get("/", headers={"X-Key": key}).status_code == 200
    assert TestClient(a).get("/").status_code == 400
    assert TestClient(a).get("/", headers={"X-Key": key}).status_code == 200
    assert TestClient(b).get("/").status_code == 400
