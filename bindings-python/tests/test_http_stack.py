"""The HTTP middlewares with a ``Stack`` (issue 17): limiters on different
keys — per IP, per user, global — all or nothing, over real sockets
(uvicorn for ASGI and FastAPI, wsgiref for WSGI) and a real HTTP client.
Every response lists each member; a 429 names the member that denied."""

from __future__ import annotations

import json
from typing import Any

import pytest

import ratomic
import ratomic.asgi
import ratomic.wsgi
from ratomic._http import Policy
from test_http import check_denial, get, hello, hello_wsgi, rate_limit_fields, serve_asgi, serve_wsgi

pytest.importorskip("uvicorn")


def ip_and_global(clock: ratomic.ManualClock, per_ip: str = "3/min") -> ratomic.Stack:
    return ratomic.Stack(
        {"ip": ratomic.TokenBucket(per_ip, clock=clock), "global": ratomic.DirectTokenBucket("1000/min", clock=clock)}
    )


def test_asgi_stack_lists_every_member_and_names_the_denier():
    app = ratomic.asgi.RateLimitMiddleware(hello, ip_and_global(ratomic.ManualClock()))
    with serve_asgi(app) as port:
        # 3/min per IP: a token every 20 s; the global 1000/min, one every 60 ms.
        for n in (1, 2, 3):
            r = get(port)
            assert r.status == 200 and r.body == b"hello"
            assert rate_limit_fields(r) == {
                "ratelimit-policy": '"ip";q=3;w=60, "global";q=1000;w=60',
                "ratelimit": f'"ip";r={3 - n};t={20 * n}, "global";r={1000 - n};t=1',
            }
        r = get(port)
        check_denial(r, ["ip"])
        assert rate_limit_fields(r) == {
            "ratelimit-policy": '"ip";q=3;w=60, "global";q=1000;w=60',
            "ratelimit": '"ip";r=0;t=60, "global";r=997;t=1',  # the global was not charged
            "retry-after": "20",
        }
        assert json.loads(r.body)["detail"] == "Quota exceeded for ip; retry after 20 s."


def test_asgi_stack_global_member_binds_across_clients():
    clock = ratomic.ManualClock()
    stack = ratomic.Stack(
        {"ip": ratomic.TokenBucket("100/min", clock=clock), "global": ratomic.DirectTokenBucket("2/min", clock=clock)}
    )
    # One key for every member: the header names the client.
    app = ratomic.asgi.RateLimitMiddleware(hello, stack, key=lambda scope: dict(scope["headers"])[b"x-client"])
    with serve_asgi(app) as port:
        assert get(port, headers={"X-Client": "a"}).status == 200
        assert get(port, headers={"X-Client": "b"}).status == 200
        r = get(port, headers={"X-Client": "c"})
        check_denial(r, ["global"])
        assert r.headers["ratelimit"] == '"ip";r=100;t=0, "global";r=0;t=60'  # c's own bucket is full


def per_member(ip: str, user: str | None) -> list[str]:
    return [ip, user or "anonymous", ""]


def user_stack(clock: ratomic.ManualClock) -> ratomic.Stack:
    return ratomic.Stack(
        {
            "ip": ratomic.TokenBucket("3/min", clock=clock),
            "user": ratomic.TokenBucket("2/min", clock=clock),
            "global": ratomic.DirectTokenBucket("1000/min", clock=clock),
        }
    )


def check_users_are_independent_while_the_ip_binds(port: int) -> None:
    alice, bob, carol = ({"X-User": u} for u in ("alice", "bob", "carol"))
    assert get(port, headers=alice).status == 200
    r = get(port, headers=alice)
    assert r.status == 200
    assert r.headers["ratelimit"] == '"ip";r=1;t=40, "user";r=0;t=60, "global";r=998;t=1'
    check_denial(get(port, headers=alice), ["user"])
    r = get(port, headers=bob)  # another user from the same address: its own bucket
    assert r.status == 200 and r.headers["ratelimit"] == '"ip";r=0;t=60, "user";r=1;t=30, "global";r=997;t=1'
    check_denial(get(port, headers=bob), ["ip"])  # bob has a token left; the address has none
    r = get(port, headers=carol)
    check_denial(r, ["ip"])
    assert r.headers["ratelimit"] == '"ip";r=0;t=60, "user";r=2;t=0, "global";r=997;t=1'


def test_asgi_key_function_gives_each_member_its_key():
    def key(scope: Any) -> list[str]:
        user = dict(scope["headers"]).get(b"x-user")
        client = ratomic.asgi.client_key(scope)
        assert client == "127.0.0.1"
        return per_member(client, user.decode() if user else None)

    app = ratomic.asgi.RateLimitMiddleware(hello, user_stack(ratomic.ManualClock()), key=key)
    with serve_asgi(app) as port:
        check_users_are_independent_while_the_ip_binds(port)


def test_wsgi_key_function_gives_each_member_its_key():
    def key(environ: dict[str, Any]) -> tuple[str, ...]:
        return tuple(per_member(ratomic.wsgi.client_key(environ), environ.get("HTTP_X_USER")))

    app = ratomic.wsgi.RateLimitMiddleware(hello_wsgi, user_stack(ratomic.ManualClock()), key=key)
    with serve_wsgi(app) as port:
        check_users_are_independent_while_the_ip_binds(port)


def test_wsgi_stack_with_a_cost():
    stack = ip_and_global(ratomic.ManualClock(), per_ip="4/min")  # a token every 15 s
    app = ratomic.wsgi.RateLimitMiddleware(hello_wsgi, stack, cost=lambda environ: 2, legacy_headers=True)
    with serve_wsgi(app) as port:
        r = get(port)
        assert r.status == 200 and r.body == b"hello"
        assert rate_limit_fields(r) == {
            "ratelimit-policy": '"ip";q=4;w=60, "global";q=1000;w=60',
            "ratelimit": '"ip";r=2;t=30, "global";r=998;t=1',
            "x-ratelimit-limit": "4",
            "x-ratelimit-remaining": "2",
            "x-ratelimit-reset": "30",
        }
        assert get(port).headers["ratelimit"] == '"ip";r=0;t=60, "global";r=996;t=1'
        r = get(port)
        check_denial(r, ["ip"])
        assert r.headers["retry-after"] == "30"  # two tokens' time
        assert r.headers["ratelimit"] == '"ip";r=0;t=60, "global";r=996;t=1'


def test_fastapi_dependency_takes_a_stack():
    fastapi = pytest.importorskip("fastapi")
    from ratomic.fastapi import RateLimit, RateLimitExceeded, problem_response

    app = fastapi.FastAPI()
    app.add_exception_handler(RateLimitExceeded, problem_response)
    limited = RateLimit(ip_and_global(ratomic.ManualClock(), per_ip="2/min"))

    @app.get("/search", dependencies=[fastapi.Depends(limited)])
    async def search() -> dict:
        return {"ok": True}

    with serve_asgi(app) as port:
        r = get(port, "/search")
        assert r.status == 200 and json.loads(r.body) == {"ok": True}
        assert rate_limit_fields(r) == {
            "ratelimit-policy": '"ip";q=2;w=60, "global";q=1000;w=60',
            "ratelimit": '"ip";r=1;t=30, "global";r=999;t=1',
        }
        assert get(port, "/search").status == 200
        r = get(port, "/search")
        check_denial(r, ["ip"])
        assert r.headers["retry-after"] == "30"
        assert r.headers["ratelimit"] == '"ip";r=0;t=60, "global";r=998;t=1'


def test_fastapi_key_function_gives_each_member_its_key():
    fastapi = pytest.importorskip("fastapi")
    from ratomic.fastapi import RateLimit, RateLimitExceeded, client_key, problem_response

    app = fastapi.FastAPI()
    app.add_exception_handler(RateLimitExceeded, problem_response)

    def key(request: Any) -> list[str]:
        return per_member(client_key(request), request.headers.get("x-user"))

    @app.get("/", dependencies=[fastapi.Depends(RateLimit(user_stack(ratomic.ManualClock()), key=key))])
    async def root() -> dict:
        return {"ok": True}

    with serve_asgi(app) as port:
        check_users_are_independent_while_the_ip_binds(port)


def two_keys(request: Any) -> list[str]:
    return ["10.0.0.1", "alice"]  # a stack of three takes three


WRONG_COUNT = (
    "the key function returned 2 keys for a stack of 3 members (ip, user, global): a stack takes one key, or one "
    "key per member"
)


def check_unjudged(r: Any) -> None:
    """A 400 with the generic document: the reason is for the log."""
    assert r.status == 400 and "retry-after" not in r.headers
    assert r.headers["content-type"] == ratomic.PROBLEM_CONTENT_TYPE
    assert json.loads(r.body) == {
        "type": "about:blank",
        "title": "Bad Request",
        "status": 400,
        "detail": "This request cannot be rate limited.",
    }


def logged(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.name == "ratomic.http"]


def test_wrong_number_of_keys_is_a_request_not_judged(caplog: pytest.LogCaptureFixture) -> None:
    clock = ratomic.ManualClock()
    stack = user_stack(clock)
    # on_error="allow" fails open on a backend failure only: a request the
    # stack cannot judge is refused either way.
    for on_error in ("deny", "allow"):
        with serve_asgi(ratomic.asgi.RateLimitMiddleware(hello, stack, key=two_keys, on_error=on_error)) as port:
            check_unjudged(get(port))
        with serve_wsgi(ratomic.wsgi.RateLimitMiddleware(hello_wsgi, stack, key=two_keys, on_error=on_error)) as port:
            check_unjudged(get(port))
    assert stack.peek(["10.0.0.1", "alice", ""], 0).remaining == 2, "nothing was charged"
    assert len(logged(caplog)) == 4 and all(WRONG_COUNT in m for m in logged(caplog))


def test_fastapi_wrong_number_of_keys_is_a_request_not_judged(caplog: pytest.LogCaptureFixture) -> None:
    fastapi = pytest.importorskip("fastapi")
    from ratomic.fastapi import RateLimit, RateLimitExceeded, problem_response

    app = fastapi.FastAPI()
    app.add_exception_handler(RateLimitExceeded, problem_response)
    stack = user_stack(ratomic.ManualClock())

    @app.get("/closed", dependencies=[fastapi.Depends(RateLimit(stack, key=two_keys))])
    async def closed() -> dict:
        return {"ok": True}

    @app.get("/open", dependencies=[fastapi.Depends(RateLimit(stack, key=two_keys, on_error="allow"))])
    async def opened() -> dict:
        return {"ok": True}

    with serve_asgi(app) as port:
        check_unjudged(get(port, "/closed"))
        check_unjudged(get(port, "/open"))
    assert len(logged(caplog)) == 2 and all(WRONG_COUNT in m for m in logged(caplog))


def test_keys_a_stack_cannot_take_are_not_judged(caplog: pytest.LogCaptureFixture) -> None:
    stack = user_stack(ratomic.ManualClock())
    for bad, error in [
        ({"ip": "10.0.0.1"}, "a key function must return a key or a list of keys, not dict"),
        (["10.0.0.1", None, ""], "must be str or bytes"),
        (["10.0.0.1", "x" * 5000, ""], "key is 5000 bytes long"),
    ]:
        caplog.clear()
        policy = Policy(stack, server="sync", key=lambda request: bad)
        outcome = policy.decide(None, policy.key(None))  # type: ignore[misc]
        assert not outcome.allowed and outcome.status == 400 and outcome.headers == []
        assert error not in (outcome.problem or "")
        assert len(logged(caplog)) == 1 and error in logged(caplog)[0], logged(caplog)
    assert stack.peek(["10.0.0.1", "anonymous", ""], 0).remaining == 2, "nothing was charged"


def test_a_stack_with_a_limiter_member_is_refused_at_setup():
    fastapi = pytest.importorskip("fastapi")
    from ratomic.fastapi import RateLimit

    clock = ratomic.ManualClock()
    user = ratomic.Limiter({"burst": "2/s", "daily": ratomic.Rule.fixed_window("100/day")}, clock=clock)
    stack = ratomic.Stack({"ip": ratomic.TokenBucket("5/s", clock=clock), "user": user})
    for make in (
        lambda: ratomic.asgi.RateLimitMiddleware(hello, stack),
        lambda: ratomic.wsgi.RateLimitMiddleware(hello_wsgi, stack),
        lambda: RateLimit(stack),
    ):
        with pytest.raises(ratomic.InvalidArgumentError, match=r'stack member: "user" \(is a Limiter') as e:
            make()
        assert isinstance(e.value, ValueError)
    assert stack.allow(["10.0.0.1", "alice"]), "the stack itself still decides"
