"""Per-route rate limits for Starlette and FastAPI, in slowapi's shape: a
:class:`Limiter` whose ``@limiter.limit("5/minute")`` limits a route, with
default and application-wide limits (applied by :class:`LimiterMiddleware`),
``@limiter.exempt``, ``@limiter.shared_limit`` and ``limiter.enabled``.
Importing this module imports Starlette only (``ratomic.fastapi``
re-exports all of it).

Coming from slowapi, change the imports::

    from ratomic.starlette import Limiter, RateLimitExceeded, _rate_limit_exceeded_handler, get_remote_address

>>> from starlette.applications import Starlette
>>> from starlette.responses import PlainTextResponse
>>> from ratomic.starlette import Limiter, RateLimitExceeded, _rate_limit_exceeded_handler, get_remote_address
>>> limiter = Limiter(key_func=get_remote_address)
>>> app = Starlette()
>>> app.state.limiter = limiter
>>> app.add_exception_handler(RateLimitExceeded, _rate_limit_exceeded_handler)
>>> @limiter.limit("5/minute")
... async def homepage(request): return PlainTextResponse("hello")
>>> app.add_route("/", homepage)
"""

from __future__ import annotations

import functools
import inspect
import json
import logging
import re
from collections.abc import Sequence
from typing import Any, Awaitable, Callable, Literal, TypeVar, Union

from starlette.concurrency import run_in_threadpool
from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Match

import ratomic
from ratomic import _http
from ratomic._http import AnyLimiter, LimitsLike, Outcome, Policy, QuotaLike, StandardHeaders
from ratomic._ratomic import PROBLEM_CONTENT_TYPE, ArgumentTypeError, InvalidArgumentError
from ratomic.asgi import ASGIApp, Message, Receive, Scope, Send, scope_key, set_state

__all__ = [
    "Limiter",
    "LimiterMiddleware",
    "RateLimitExceeded",
    "SlowAPIASGIMiddleware",
    "SlowAPIMiddleware",
    "_rate_limit_exceeded_handler",
    "get_remote_address",
    "problem_response",
]

_F = TypeVar("_F", bound=Callable[..., Any])

#: A limit: a rate string as slowapi writes it (``"5/minute"``, ``"5 per
#: minute"``, several in one: ``"10/second;1000/day"``), or any ratomic
#: limiter (a Redis one on an asyncio client, a ``Stack``, ...).
LimitValue = Union[str, AnyLimiter]

#: A limit chosen per request: a function returning a rate string, given
#: nothing, the key (a parameter named ``key``) or the request (``request``).
LimitProvider = Callable[..., str]

#: slowapi's strategies, and what decides each here. ``"moving-window"``
#: (a log of every hit in ``limits``) is approximated by ratomic's sliding
#: window counter, exact in integers, in one word per key.
_STRATEGIES = {
    "fixed-window": "fixed_window",
    "moving-window": "sliding_window",
    "sliding-window-counter": "sliding_window",
    "token-bucket": "token_bucket",
}

logger = logging.getLogger("ratomic.http")


class RateLimitExceeded(HTTPException):
    """Raised on a denial: a 429 whose ``detail`` is the problem document
    (a dict) and whose headers are the rate-limit fields; ``decision`` is
    the limiter's. Also raised, with a generic problem document, for a
    request the limiter could not decide: ``status_code`` 503 (its backend
    failed, under ``on_error="deny"``), 400 (a request it cannot judge, say
    a key too long) or 500 (no client address to key by); the reason is
    logged on the ``ratomic.http`` logger, never sent. Register
    :func:`problem_response` (or your own handler) for it."""

    def __init__(
        self, problem: dict[str, Any], headers: dict[str, str], status_code: int = 429, decision: Any = None
    ) -> None:
        super().__init__(status_code=status_code, detail=problem, headers=headers)  # type: ignore[arg-type]
        #: The limiter's decision (None when it could not decide).
        self.decision = decision


async def problem_response(request: Request, exc: Exception) -> Response:
    """An exception handler that answers :class:`RateLimitExceeded` with the
    problem document itself (``application/problem+json``), not FastAPI's
    ``{"detail": ...}`` wrapper."""
    assert isinstance(exc, RateLimitExceeded)
    return JSONResponse(exc.detail, status_code=exc.status_code, headers=exc.headers, media_type=PROBLEM_CONTENT_TYPE)


#: slowapi's name for :func:`problem_response` (its body here is the RFC
#: 9457 problem document, not slowapi's ``{"error": ...}``).
_rate_limit_exceeded_handler = problem_response


def get_remote_address(request: Request) -> str | None:
    """The client's address, as the default key makes it (IPv6 grouped by
    /64; ``X-Forwarded-For`` read only behind the ``trusted_proxies`` a
    :class:`Limiter` is given). As ``key_func``, the :class:`Limiter`'s
    default key, with its checks (a request with no address is a 500, and
    the set-up mistake is logged once, where slowapi keys it as
    ``127.0.0.1``, one bucket for all)."""
    client = request.scope.get("client")
    return _http.client_key(client[0] if client else None, None, 0, 64)


def get_ipaddr(request: Request) -> str | None:
    """Not a key function here: slowapi's reads ``X-Forwarded-For`` from
    anyone (any client can forge it). A :class:`Limiter` given it says so."""
    raise TypeError(
        "get_ipaddr trusts X-Forwarded-For from any client: pass key_func=get_remote_address and "
        "trusted_proxies=N (the proxies you run in front of the app) to Limiter"
    )


def _raise(problem: str | None, outcome: Outcome, error_message: Any = None, request: Any = None) -> None:
    body: dict[str, Any] = json.loads(problem or "{}")
    if error_message is not None and outcome.status == 429:
        body["detail"] = _call_optional(error_message, request) if callable(error_message) else error_message
    raise RateLimitExceeded(body, str_headers(outcome.headers), outcome.status, outcome.decision)


def str_headers(fields: list[tuple[bytes, bytes]]) -> dict[str, str]:
    """ASGI fields as the ``headers`` of an ``HTTPException``."""
    return {n.decode("latin-1"): v.decode("latin-1") for n, v in fields}


def _takes(fn: Callable[..., Any], name: str | None = None) -> bool:
    """Whether ``fn`` takes a parameter (named ``name``, when given)."""
    try:
        params = inspect.signature(fn).parameters
    except (TypeError, ValueError):
        return name is None
    return name in params if name is not None else len(params) > 0


def _call_optional(fn: Callable[..., Any], request: Any) -> Any:
    """slowapi's functions of the request may take it or not."""
    return fn(request) if _takes(fn) else fn()


def _rates(value: str) -> list[str]:
    """``"10/second;1000/day"`` as its rates (``;``, ``,`` or ``|`` between)."""
    if not isinstance(value, str):
        raise ArgumentTypeError(f"a limit must be a rate string or a ratomic limiter, not {type(value).__name__}: {value!r}")
    rates = [r.strip() for r in re.split(r"[;,|]", value) if r.strip()]
    if not rates:
        raise InvalidArgumentError(f'invalid limit: {value!r} (write a rate such as "5/minute" or "10/second;1000/day")')
    return rates


class _Group:
    """One limit of a route (or the app), slowapi's ``Limit``: its policy
    and when it applies."""

    def __init__(
        self,
        owner: Limiter,
        value: LimitValue | LimitProvider,
        *,
        key_func: Callable[..., Any] | None,
        scope: str | None,
        per_method: bool,
        methods: Sequence[str] | None,
        error_message: str | Callable[..., str] | None,
        exempt_when: Callable[..., bool] | None,
        cost: int | Callable[[Any], int],
        override_defaults: bool,
        extra: dict[str, Any],
        route_scoped: bool = False,
    ) -> None:
        if methods is not None and (isinstance(methods, str) or not all(isinstance(m, str) for m in methods)):
            raise ArgumentTypeError(f'methods must be a list of method names such as ["POST"], not {methods!r}')
        if scope is not None and not isinstance(scope, str):
            raise ArgumentTypeError(f"a shared limit's scope must be a string naming it, not {type(scope).__name__}")
        for param, fn in (("key_func", key_func), ("exempt_when", exempt_when)):
            _http._check_callable(param, fn)
        self.owner = owner
        self.value = value
        self.methods = frozenset(m.upper() for m in methods) if methods is not None else None
        self.per_method = per_method
        self.error_message = error_message
        self.exempt_when = exempt_when
        self.exempt_takes_request = exempt_when is not None and _takes(exempt_when)
        self.override_defaults = override_defaults
        self.key_func = key_func
        self.route_scoped = route_scoped
        self.cost = cost
        #: The policy options beyond slowapi's (refunds, quota, limits).
        self.extra = extra
        #: A dynamic limit's provider, and its policies by the string it gave.
        self.provider: LimitProvider | None = None
        self.by_string: dict[str, Policy] = {}
        if callable(value) and not _is_limiter(value):
            self.provider = value
            self.provider_arg = "request" if _takes(value, "request") else "key" if _takes(value, "key") else None
            self.policy: Policy | None = None
        else:
            self.policy = self._policy(value)  # type: ignore[arg-type]

    def _policy(self, value: LimitValue) -> Policy:
        o = self.owner
        if isinstance(value, str):
            rates = _rates(value)
            limiter: AnyLimiter = o._build(rates)
            name = rates[0]
        else:
            limiter, name = value, "default"
        p = Policy(
            limiter,
            server="async",
            face="ratomic.starlette",
            # For a request without a key: a 400 when a key function found
            # none, a 500 when the default key found no address.
            key=self.key_func or o._key_func,
            cost=self.cost,
            name=name,
            standard_headers=o._standard,
            legacy_headers=o._headers_enabled,
            trusted_proxies=o._trusted_proxies,
            ipv6_prefix=o._ipv6_prefix,
            on_error=o._on_error,
            **self.extra,
        )
        p.keep_charge = True  # a later limit's denial gives this one back
        return p

    def reset(self) -> None:
        """Forgets every key (a limit given as a string is built anew)."""
        if isinstance(self.value, str):
            self.policy = self._policy(self.value)
        self.by_string.clear()

    def policy_for(self, request: Request, key: Any) -> Policy:
        if self.policy is not None:
            return self.policy
        assert self.provider is not None
        arg = self.provider_arg
        value = self.provider(request) if arg == "request" else self.provider(key) if arg == "key" else self.provider()
        p = self.by_string.get(value)
        if p is None:
            p = self.by_string[value] = self._policy(value)
        return p

    def applies(self, request: Request) -> bool:
        if self.methods is not None and request.method not in self.methods:
            return False
        if self.exempt_when is not None:
            return not (self.exempt_when(request) if self.exempt_takes_request else self.exempt_when())
        return True

    def key_of(self, base: Any, request: Request) -> Any:
        """This limit's key: its own ``key_func``'s, or the limiter's; a
        default limit's is scoped by the route (slowapi's ``key_style``),
        a ``per_method`` one by the method."""
        key = base if self.key_func is None else _call_optional(self.key_func, request)
        if key is None or not isinstance(key, str):
            return key
        if self.owner._key_prefix:
            key = f"{self.owner._key_prefix}:{key}"
        if self.route_scoped:
            scope = request.scope
            where = scope["path"] if self.owner._key_style == "url" else _endpoint_name(scope.get("endpoint"))
            key = f"{where}\x00{key}"
        if self.per_method:
            key = f"{key}\x00{request.method}"
        return key


def _is_limiter(value: object) -> bool:
    return _http._remote_limiter(value) is not None or isinstance(
        value,
        (ratomic.Keyed, ratomic.Limiter, ratomic.DirectTokenBucket, ratomic.Stack, ratomic.Quotas),
    )


def _endpoint_name(endpoint: Any) -> str:
    return f"{endpoint.__module__}.{endpoint.__qualname__}" if endpoint is not None else ""


class Limiter:
    """slowapi's ``Limiter``, deciding with ratomic. Same arguments and
    meaning where they apply:

    - ``key_func(request)`` (or a function of nothing): a request's key;
      default :func:`get_remote_address`, the client's address;
    - ``default_limits``: limits for every route without its own (applied
      by :class:`LimiterMiddleware`), each route counted apart (by its path,
      or its function with ``key_style="endpoint"``);
    - ``application_limits``: limits shared by every route (applied by the
      middleware, to decorated routes too, which slowapi skips);
    - ``headers_enabled``: ``X-RateLimit-Limit``, ``-Remaining`` and
      ``-Reset`` on responses (``-Reset`` is seconds until the key is full,
      not a wall-clock time: ratomic reads a monotonic clock); a denial
      always carries ``Retry-After``;
    - ``strategy``: ``"fixed-window"`` (slowapi's default),
      ``"moving-window"`` and ``"sliding-window-counter"`` (ratomic's
      sliding window), or ``"token-bucket"``;
    - ``swallow_errors=True``: a failing backend lets requests through
      (``on_error="allow"``); the default refuses them with a 503;
    - ``key_prefix``, ``enabled`` (a pass-through when False; settable at
      run time, as in tests), ``key_style``;
    - ``storage_uri`` ``"memory://"`` (the default). State on Redis comes
      from ratomic's own limiters: pass one in place of a rate string,
      ``limiter.limit(ratomic.redis.RedisFixedWindow("5/minute",
      client=redis.asyncio.Redis(...)))``; another URI is an error saying so,
      as are ``in_memory_fallback`` (give the Redis limiter
      ``on_error=<an in-memory limiter>``), ``retry_after="http-date"``,
      ``auto_check=False`` and ``config_filename``.

    ratomic's own: ``standard_headers`` (the IETF ``RateLimit`` fields, in
    a draft's form; off by default, as slowapi writes none),
    ``trusted_proxies`` and ``ipv6_prefix`` (as the middlewares take them),
    ``clock`` (tests), ``max_keys``, and for default and application limits
    ``skip_successful_requests``, ``skip_failed_requests`` and
    ``request_was_successful`` (see :meth:`limit`).
    """

    def __init__(
        self,
        key_func: Callable[..., Any] | None = None,
        default_limits: Sequence[LimitValue | LimitProvider] = (),
        application_limits: Sequence[LimitValue | LimitProvider] = (),
        headers_enabled: bool = False,
        strategy: str | None = None,
        storage_uri: str | None = None,
        storage_options: dict[str, Any] | None = None,
        auto_check: bool = True,
        swallow_errors: bool = False,
        in_memory_fallback: Sequence[str] = (),
        in_memory_fallback_enabled: bool = False,
        retry_after: str | None = None,
        key_prefix: str = "",
        enabled: bool = True,
        config_filename: str | None = None,
        key_style: Literal["endpoint", "url"] = "url",
        *,
        standard_headers: StandardHeaders = False,
        trusted_proxies: int = 0,
        ipv6_prefix: int = 64,
        clock: Any = None,
        max_keys: int | None = None,
        skip_successful_requests: bool = False,
        skip_failed_requests: bool = False,
        request_was_successful: Callable[[int], bool] | None = None,
    ) -> None:
        if key_func is get_ipaddr:
            get_ipaddr(None)  # raises, naming the alternative
        _http._check_callable("key_func", key_func)
        if storage_uri is not None and not (isinstance(storage_uri, str) and storage_uri.startswith("memory://")):
            raise InvalidArgumentError(
                f"storage_uri={storage_uri!r} is not taken: ratomic keeps state in memory, in a shared file or on "
                "Redis through your own redis-py client. For Redis, pass a ratomic.redis limiter where a rate "
                "string goes: limiter.limit(ratomic.redis.RedisFixedWindow('5/minute', "
                "client=redis.asyncio.Redis.from_url(...)))"
            )
        if storage_options:
            raise InvalidArgumentError(
                "storage_options is not taken: configure your redis-py client, and pass ratomic.redis limiters on it"
            )
        if in_memory_fallback or in_memory_fallback_enabled:
            raise InvalidArgumentError(
                "in_memory_fallback is not taken: a ratomic.redis limiter has its own, "
                "RedisFixedWindow('5/minute', client=..., on_error=ratomic.FixedWindow('5/minute'))"
            )
        if retry_after is not None:
            raise InvalidArgumentError(
                f"retry_after={retry_after!r} is not taken: Retry-After is written in seconds (RFC 9110 allows "
                "both forms; ratomic reads a monotonic clock, not the wall clock)"
            )
        if auto_check is not True:
            raise InvalidArgumentError(
                "auto_check=False is not taken: every decorated route is checked; to leave a request "
                "unlimited, pass exempt_when= to its limit"
            )
        if config_filename is not None:
            raise InvalidArgumentError(
                "config_filename is not taken: ratomic reads no .env or config file; pass the settings as arguments"
            )
        if strategy is not None and strategy not in _STRATEGIES:
            raise InvalidArgumentError(
                f"invalid strategy: {strategy!r} (must be one of {', '.join(map(repr, _STRATEGIES))})"
            )
        if key_style not in ("url", "endpoint"):
            raise InvalidArgumentError(f'key_style must be "url" or "endpoint", not {key_style!r}')
        if not isinstance(key_prefix, str):
            raise ArgumentTypeError(f"key_prefix must be a string, not {type(key_prefix).__name__}")
        for param, value in (("headers_enabled", headers_enabled), ("swallow_errors", swallow_errors)):
            _http._check_bool(param, value)
        _http._check_bool("enabled", enabled)
        self._rule = _STRATEGIES[strategy or "fixed-window"]
        self._standard = standard_headers
        self._headers_enabled = headers_enabled
        self._trusted_proxies = trusted_proxies
        self._ipv6_prefix = ipv6_prefix
        self._on_error: Literal["deny", "allow"] = "allow" if swallow_errors else "deny"
        self._key_prefix = key_prefix
        self._key_style = key_style
        self._clock = clock
        self._max_keys = max_keys
        #: False: no limit is checked, no field written.
        self.enabled = enabled
        self._key_func = None if key_func is None or key_func is get_remote_address else key_func
        self._key_takes_request = self._key_func is not None and _takes(self._key_func)
        # The default key's policy (its set-up reports: no peer address ...),
        # which checks the options every limit shares, now.
        self._keyer = Policy(
            ratomic.DirectTokenBucket(1, 1.0),
            server="async",
            face="ratomic.starlette",
            trusted_proxies=trusted_proxies,
            ipv6_prefix=ipv6_prefix,
            standard_headers=standard_headers,
        )
        refunds = {
            "skip_successful_requests": skip_successful_requests,
            "skip_failed_requests": skip_failed_requests,
            "request_was_successful": request_was_successful,
        }
        group = functools.partial(
            _Group,
            self,
            key_func=None,
            scope=None,
            per_method=False,
            methods=None,
            error_message=None,
            exempt_when=None,
            cost=1,
            override_defaults=False,
            extra=refunds,
        )
        self._default = [group(v, route_scoped=True) for v in default_limits]
        self._application = [group(v) for v in application_limits]
        self._shared: dict[tuple[str, str], _Group] = {}
        self._exempt: set[Any] = set()
        self._groups: list[_Group] = [*self._default, *self._application]
        self._routes: dict[tuple[int, str, str], Any] = {}

    def _build(self, rates: list[str]) -> AnyLimiter:
        """The ratomic limiter for a limit's rates, by the strategy."""
        opts: dict[str, Any] = {"clock": self._clock, "max_keys": self._max_keys}
        if len(rates) == 1:
            cls = {"fixed_window": ratomic.FixedWindow, "sliding_window": ratomic.SlidingWindow}.get(self._rule)
            if cls is None:
                return ratomic.TokenBucket(rates[0], **opts)
            return cls(rates[0], **opts)
        rule = getattr(ratomic.Rule, self._rule)
        return ratomic.Limiter({r: rule(r) for r in rates}, **opts)

    # ---- decorators ------------------------------------------------------

    def limit(
        self,
        limit_value: LimitValue | LimitProvider,
        key_func: Callable[..., Any] | None = None,
        per_method: bool = False,
        methods: Sequence[str] | None = None,
        error_message: str | Callable[..., str] | None = None,
        exempt_when: Callable[..., bool] | None = None,
        cost: int | Callable[[Any], int] = 1,
        override_defaults: bool = True,
        *,
        skip_successful_requests: bool = False,
        skip_failed_requests: bool = False,
        request_was_successful: Callable[[int], bool] | None = None,
        quota: QuotaLike | Callable[[Request], QuotaLike] | None = None,
        limits: LimitsLike | Callable[[Request], LimitsLike] = None,
    ) -> Callable[[_F], _F]:
        """Limits the decorated route (under ``@app.get(...)``), as slowapi's:

        - ``limit_value``: a rate string (``"5/minute"``, several as
          ``"10/second;1000/day"``, all or nothing), a function returning one
          (given nothing, ``key`` or ``request``: a limit chosen per
          request; each distinct string it returns gets its limiter, kept),
          or any ratomic limiter (on Redis, a ``Stack``, a shared file ...);
        - ``key_func``: this limit's key function; ``per_method``: each
          method counted apart; ``methods``: only these are limited;
        - ``error_message``: the problem document's ``detail`` on a denial
          (a string, or a function of nothing or of the request);
        - ``exempt_when``: a function of nothing or of the request; true,
          and this limit does not apply;
        - ``cost``: a whole number, or a function of the request;
        - ``override_defaults=False``: the default limits apply as well.

        ratomic's own: ``skip_successful_requests`` and
        ``skip_failed_requests`` give a request's cost back (the limiter's
        ``refund``, exactly) when the route's answer is a success or a
        failure by ``request_was_successful(status)`` (default: below 400):
        the status of the ``Response`` it returns, of the ``HTTPException``
        it raises (any other exception failed), or the status it set on its
        ``response`` parameter, else the route's ``status_code``.
        ``quota`` (with a ``ratomic.Quotas`` as the limit) and ``limits``
        (with a ``ratomic.Limiter``) choose the limit per request, as the
        middlewares' do.

        The route's function needs no ``request`` parameter (one is added
        for FastAPI to fill when it has none); it may be sync (run in
        Starlette's thread pool, as before) or async. The decision is in
        ``request.state.rate_limit``; with ``headers_enabled`` (or
        ``standard_headers``), the response carries the fields."""
        return self._decorator(
            limit_value,
            key_func=key_func,
            scope=None,
            per_method=per_method,
            methods=methods,
            error_message=error_message,
            exempt_when=exempt_when,
            cost=cost,
            override_defaults=override_defaults,
            extra={
                "skip_successful_requests": skip_successful_requests,
                "skip_failed_requests": skip_failed_requests,
                "request_was_successful": request_was_successful,
                "quota": quota,
                "limits": limits,
            },
        )

    def shared_limit(
        self,
        limit_value: LimitValue | LimitProvider,
        scope: str,
        key_func: Callable[..., Any] | None = None,
        error_message: str | Callable[..., str] | None = None,
        exempt_when: Callable[..., bool] | None = None,
        cost: int | Callable[[Any], int] = 1,
        override_defaults: bool = True,
    ) -> Callable[[_F], _F]:
        """A limit shared by every route decorated with the same ``scope``
        (one count for all of them), as slowapi's; arguments as :meth:`limit`."""
        return self._decorator(
            limit_value,
            key_func=key_func,
            scope=scope,
            per_method=False,
            methods=None,
            error_message=error_message,
            exempt_when=exempt_when,
            cost=cost,
            override_defaults=override_defaults,
            extra={},
        )

    def exempt(self, obj: _F) -> _F:
        """Exempts the decorated route from the default and application
        limits (put it under ``@app.get(...)``)."""
        self._exempt.add(obj)
        return obj

    def reset(self) -> None:
        """Forgets every key of every limit given as a rate string (in
        tests); limits given as ratomic limiters keep theirs."""
        for g in self._groups:
            g.reset()

    def _decorator(self, limit_value: Any, *, scope: str | None, **options: Any) -> Callable[[_F], _F]:
        if scope is not None:
            if not isinstance(scope, str):
                raise ArgumentTypeError(f"a shared limit's scope must be a string naming it, not {type(scope).__name__}")
            shared_key = (scope, limit_value if isinstance(limit_value, str) else str(id(limit_value)))
            group = self._shared.get(shared_key)
            if group is None:
                group = self._shared[shared_key] = _Group(self, limit_value, scope=scope, **options)
                self._groups.append(group)
        else:
            group = _Group(self, limit_value, scope=None, **options)
            self._groups.append(group)

        def decorate(func: _F) -> _F:
            groups: list[_Group] | None = getattr(func, "_ratomic_groups", None)
            if groups is not None and getattr(func, "_ratomic_limiter", None) is self:
                groups.insert(0, group)  # stacked decorators: one check, all limits
                return func
            return self._wrap(func, [group])  # type: ignore[return-value]

        return decorate

    # ---- the check -------------------------------------------------------

    def _base_key(self, request: Request) -> Any:
        if self._key_func is None:
            return scope_key(self._keyer, request.scope, request)
        return self._key_func(request) if self._key_takes_request else self._key_func()

    async def _check(self, request: Request, groups: list[_Group], error_on_deny: bool = True) -> list[tuple[Policy, Outcome]]:
        """Decides ``request`` under every group that applies, all or
        nothing (a denial gives back what the ones before it took):
        the (policy, outcome) pairs; a refusal raises
        :class:`RateLimitExceeded`."""
        base = self._base_key(request)
        done: list[tuple[Policy, Outcome]] = []
        for g in groups:
            if not g.applies(request):
                continue
            key = g.key_of(base, request)
            p = g.policy_for(request, key)
            outcome = await p.decide_async(request, key) if p.awaits else p.decide(request, key)
            if not outcome.allowed:
                for q, o in done:
                    await q.give_back_async(o)
                set_state(request.scope, outcome.decision)
                _raise(outcome.problem, outcome, g.error_message, request)
            done.append((p, outcome))
        if done:
            set_state(request.scope, _pressing(done)[1].decision)
        return done

    def _wrap(self, func: Callable[..., Any], groups: list[_Group]) -> Callable[..., Any]:
        limiter = self
        sig = inspect.signature(func)
        params = list(sig.parameters.values())
        hints = _hints(func)
        request_name = _param_of(params, hints, Request, ("request", "websocket"))
        response_name = _param_of(params, hints, Response, ("response",))
        added: list[inspect.Parameter] = []
        if request_name is None:
            request_name = "_ratomic_request"
            added.append(inspect.Parameter(request_name, inspect.Parameter.KEYWORD_ONLY, annotation=Request))
        if response_name is None:
            response_name = "_ratomic_response"
            added.append(inspect.Parameter(response_name, inspect.Parameter.KEYWORD_ONLY, annotation=Response))
        is_async = inspect.iscoroutinefunction(func)
        positional = [p.name for p in params if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]
        request_index = positional.index(request_name) if request_name in positional else None
        drop = [p.name for p in added]

        @functools.wraps(func)
        async def limited(*args: Any, **kwargs: Any) -> Any:
            if request_index is not None and len(args) > request_index:
                request = args[request_index]
            else:
                request = kwargs.get(request_name)
            if not isinstance(request, Request):
                # Starlette passes the request first, whatever its name.
                request = next((a for a in args if isinstance(a, Request)), None)
                if request is None:
                    raise TypeError(
                        f"{func.__qualname__} was called without its request: ratomic's @limiter.limit decorates "
                        "a Starlette or FastAPI route, under its @app.get(...)"
                    )
            sub_response = kwargs.get(response_name)
            for name in drop:
                kwargs.pop(name, None)
            if not limiter.enabled:
                return await _call(func, is_async, args, kwargs)
            gs = groups
            if limiter._default and any(not g.override_defaults for g in groups):
                gs = [*groups, *limiter._default]
            done = await limiter._check(request, gs)
            refunding = [(p, o) for p, o in done if o.charge is not None and p.refunds]
            try:
                result = await _call(func, is_async, args, kwargs)
            except HTTPException as e:
                await _refund(refunding, e.status_code)
                raise
            except BaseException:
                await _failed(refunding)
                raise
            if refunding:
                if isinstance(result, Response):
                    status = result.status_code
                elif sub_response is not None and sub_response.status_code:
                    status = sub_response.status_code
                else:
                    status = getattr(request.scope.get("route"), "status_code", None) or 200
                await _refund(refunding, status)
            if done:
                fields = _pressing(done)[1].headers
                if fields:
                    target = result if isinstance(result, Response) else sub_response
                    if target is not None:
                        target.raw_headers.extend(fields)
            return result

        # The signature FastAPI reads: the function's, its annotations resolved
        # (FastAPI would resolve strings in this module), plus the request and
        # response parameters it lacks.
        limited.__signature__ = sig.replace(  # type: ignore[attr-defined]
            parameters=[*(p.replace(annotation=hints.get(p.name, p.annotation)) for p in params), *added],
            return_annotation=hints.get("return", sig.return_annotation),
        )
        limited._ratomic_groups = groups  # type: ignore[attr-defined]
        limited._ratomic_limiter = limiter  # type: ignore[attr-defined]
        return limited

    # ---- the middleware's part ---------------------------------------------

    def _endpoint(self, scope: Scope) -> Any:
        """The endpoint ``scope`` is routed to (None: no route), cached by
        method and path."""
        where = (id(scope["app"]), scope["method"], scope["path"])
        routes = self._routes
        try:
            return routes[where]
        except KeyError:
            pass
        endpoint = None
        for route in scope["app"].routes:
            match, child = route.matches(scope)
            if match == Match.FULL and hasattr(route, "endpoint"):
                endpoint = route.endpoint
                break
        if len(routes) >= 4096:
            routes.clear()  # many paths (path parameters): keep the cache bounded
        routes[where] = endpoint
        return endpoint


def _pressing(done: list[tuple[Policy, Outcome]]) -> tuple[Policy, Outcome]:
    """The limit whose fields a response carries: the one with least left."""
    if len(done) == 1:
        return done[0]
    return min(done, key=lambda po: po[1].decision.remaining if po[1].decision is not None else 1 << 64)


async def _refund(pairs: list[tuple[Policy, Outcome]], status: int) -> None:
    for p, o in pairs:
        if p.refund_for(status):
            await p.give_back_async(o)


async def _failed(pairs: list[tuple[Policy, Outcome]]) -> None:
    """A request whose answer never came (the endpoint raised, the client
    left) failed."""
    for p, o in pairs:
        if p.skip_failed:
            await p.give_back_async(o)


async def _call(func: Callable[..., Any], is_async: bool, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
    if is_async:
        return await func(*args, **kwargs)
    return await run_in_threadpool(func, *args, **kwargs)


def _hints(func: Callable[..., Any]) -> dict[str, Any]:
    """``func``'s annotations, resolved in its own module (FastAPI would
    resolve them in the wrapper's, where a user's names are unknown)."""
    import typing

    try:
        return typing.get_type_hints(func, include_extras=True)
    except Exception:  # noqa: BLE001 - unresolvable: FastAPI reports it as it would have
        return {}


def _param_of(params: list[inspect.Parameter], hints: dict[str, Any], cls: type, names: tuple[str, ...]) -> str | None:
    """The parameter that receives ``cls``: by its type, else by its name
    (when its annotation names no other class)."""
    for p in params:
        t = hints.get(p.name, p.annotation)
        if isinstance(t, type) and issubclass(t, cls):
            return p.name
    for p in params:
        t = hints.get(p.name, p.annotation)
        if p.name in names and not (isinstance(t, type) and t is not inspect.Parameter.empty):
            return p.name
    return None


class LimiterMiddleware:
    """Applies a :class:`Limiter`'s default limits (to each route without
    its own) and application limits (to every route) — slowapi's
    ``SlowAPIMiddleware`` and ``SlowAPIASGIMiddleware``. The limiter is
    ``app.state.limiter``, as in slowapi::

        app.state.limiter = limiter
        app.add_middleware(LimiterMiddleware)

    Exempt routes (:meth:`Limiter.exempt`) and paths no route serves pass
    unlimited. A denial is answered by the app's handler for
    :class:`RateLimitExceeded` (else :func:`problem_response`)."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        limiter: Limiter | None = getattr(getattr(scope.get("app"), "state", None), "limiter", None)
        if not isinstance(limiter, Limiter):
            raise RuntimeError(
                "ratomic.starlette.LimiterMiddleware finds its Limiter in app.state.limiter: set "
                "app.state.limiter = Limiter(...) (a ratomic.starlette or ratomic.fastapi Limiter)"
            )
        if not limiter.enabled or not (limiter._default or limiter._application):
            await self.app(scope, receive, send)
            return
        endpoint = limiter._endpoint(scope)
        if endpoint is None or endpoint in limiter._exempt:
            await self.app(scope, receive, send)
            return
        groups = limiter._application
        if limiter._default and getattr(endpoint, "_ratomic_limiter", None) is not limiter:
            groups = [*groups, *limiter._default] if groups else limiter._default
        if not groups:
            await self.app(scope, receive, send)
            return
        request = Request(scope, receive)
        if limiter._default and groups is not limiter._application:
            scope["endpoint"] = endpoint  # key_style="endpoint" scopes by it
        try:
            done = await limiter._check(request, groups)
        except RateLimitExceeded as e:
            handler = scope["app"].exception_handlers.get(RateLimitExceeded, problem_response)
            response = handler(request, e)
            if inspect.isawaitable(response):
                response = await response
            await response(scope, receive, send)
            return
        fields = _pressing(done)[1].headers if done else []
        refunding = [(p, o) for p, o in done if o.charge is not None and p.refunds]
        started = False

        async def send_with_fields(message: Message) -> None:
            nonlocal started
            if message["type"] == "http.response.start" and not started:
                started = True
                if refunding:
                    await _refund(refunding, message["status"])
                if fields:
                    message = dict(message)
                    message["headers"] = [*message.get("headers", ()), *fields]
            await send(message)

        try:
            await self.app(scope, receive, send_with_fields)
        finally:
            if not started:
                await _failed(refunding)


#: slowapi's names for :class:`LimiterMiddleware` (both are pure ASGI here).
SlowAPIMiddleware = LimiterMiddleware
SlowAPIASGIMiddleware = LimiterMiddleware
