"""What every ratomic HTTP middleware shares: choosing the client's key,
deciding, and the header fields and problem body of the answer (formatted
by ratomic's Rust core through each limiter's ``headers()``/``problem()``).

Frameworks are not imported here: ``ratomic.asgi``, ``ratomic.wsgi`` and
``ratomic.fastapi`` adapt this to their protocols.
"""

from __future__ import annotations

import ipaddress
import json
from dataclasses import dataclass
from typing import Any, Callable, Literal, Union

from ratomic._ratomic import (
    PROBLEM_CONTENT_TYPE,
    DirectTokenBucket,
    Keyed,
    Limiter,
    RatomicError,
)

#: Any limiter a middleware can use.
AnyLimiter = Union[Keyed, Limiter, DirectTokenBucket]

#: What a key function returns: the key (``None``: the request has none).
KeyFunc = Callable[[Any], Union[str, bytes, None]]


@dataclass(frozen=True)
class Outcome:
    """A request's answer: allowed or not, the header fields every response
    carries, and on a denial the problem body (JSON) for the 429."""

    allowed: bool
    headers: list[tuple[str, str]]
    problem: str | None

    @property
    def problem_headers(self) -> list[tuple[str, str]]:
        """The 429's fields: the rate-limit ones plus the body's content type."""
        return [*self.headers, ("Content-Type", PROBLEM_CONTENT_TYPE)]


def client_key(peer: str | None, forwarded_for: str | None, trusted_proxies: int, ipv6_prefix: int) -> str | None:
    """The client's key: its IP address (an IPv6 address grouped by
    ``ipv6_prefix`` bits, as one client commonly holds a /64).

    ``X-Forwarded-For`` is read only when ``trusted_proxies`` > 0: each proxy
    appends the address it saw, so with ``n`` trusted proxies in front the
    client is the ``n``-th address from the right. Anything left of it was
    written by the client and is ignored (it is spoofable).
    """
    host = peer
    if trusted_proxies > 0 and forwarded_for:
        hops = [h.strip() for h in forwarded_for.split(",") if h.strip()]
        if len(hops) >= trusted_proxies:
            host = hops[-trusted_proxies]
    if host is None:
        return None
    try:
        ip = ipaddress.ip_address(host)
    except ValueError:
        return host  # a Unix socket path or a test client's name: use as is
    if isinstance(ip, ipaddress.IPv6Address):
        if ip.ipv4_mapped is not None:
            return str(ip.ipv4_mapped)
        net = ipaddress.ip_network(f"{ip}/{ipv6_prefix}", strict=False)
        return f"{net.network_address}/{ipv6_prefix}"
    return str(ip)


class Policy:
    """A limiter and how a middleware applies it to requests."""

    def __init__(
        self,
        limiter: AnyLimiter,
        *,
        key: KeyFunc | None = None,
        cost: int | Callable[[Any], int] = 1,
        name: str = "default",
        legacy_headers: bool = False,
        trusted_proxies: int = 0,
        ipv6_prefix: int = 64,
        on_error: Literal["deny", "allow"] = "deny",
    ) -> None:
        if not isinstance(limiter, (Keyed, Limiter, DirectTokenBucket)):
            raise TypeError(
                f"limiter must be a ratomic TokenBucket, FixedWindow, SlidingWindow, Limiter or "
                f"DirectTokenBucket, not {type(limiter).__name__}"
            )
        if not isinstance(trusted_proxies, int) or trusted_proxies < 0:
            raise ValueError(f"trusted_proxies must be a whole number >= 0, not {trusted_proxies!r}")
        if not isinstance(ipv6_prefix, int) or not 0 <= ipv6_prefix <= 128:
            raise ValueError(f"ipv6_prefix must be between 0 and 128, not {ipv6_prefix!r}")
        if on_error not in ("deny", "allow"):
            raise ValueError(f'on_error must be "deny" or "allow", not {on_error!r}')
        # Check the name once, at set-up, not on the first request.
        if not isinstance(limiter, Limiter):
            limiter.headers(limiter.peek() if isinstance(limiter, DirectTokenBucket) else limiter.peek(b"", 0), name=name)
        self.limiter = limiter
        self.key = key
        self.cost = cost
        self.name = name
        self.legacy = legacy_headers
        self.trusted_proxies = trusted_proxies
        self.ipv6_prefix = ipv6_prefix
        self.on_error = on_error

    def default_key(self, peer: str | None, forwarded_for: str | None) -> str | None:
        return client_key(peer, forwarded_for, self.trusted_proxies, self.ipv6_prefix)

    def decide(self, request: Any, key: str | bytes | None) -> Outcome:
        """Decides a request whose key is ``key`` (``request`` is what the
        cost function is given)."""
        limiter = self.limiter
        try:
            cost = self.cost(request) if callable(self.cost) else self.cost
            if isinstance(limiter, DirectTokenBucket):
                d: Any = limiter.allow(cost)
            else:
                if key is None:
                    raise ValueError("the request has no client key (no peer address and no key function)")
                d = limiter.allow(key, cost)
            if isinstance(limiter, Limiter):
                return Outcome(bool(d), limiter.headers(d, legacy=self.legacy), limiter.problem(d))
            return Outcome(
                bool(d), limiter.headers(d, name=self.name, legacy=self.legacy), limiter.problem(d, name=self.name)
            )
        except (RatomicError, ValueError, TypeError) as e:
            if self.on_error == "allow":
                return Outcome(True, [], None)
            # Fail closed: never grant what could not be checked.
            body = {"type": "about:blank", "title": "Too Many Requests", "status": 429,
                    "detail": f"the rate limit could not be applied: {e}"}
            return Outcome(False, [("Retry-After", "1")], json.dumps(body, separators=(",", ":")))
