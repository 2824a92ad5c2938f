"""``acquire``: wait out ``retry_after`` instead of being denied."""

from __future__ import annotations

import asyncio
import typing as _t

from ratomic._ratomic import ArgumentTypeError, InvalidArgumentError


def check_timeout(timeout: object) -> None:
    """A ``timeout=``: None, or a number of seconds >= 0 (a TypeError naming
    it for any other type, a ValueError for a negative or NaN number)."""
    if timeout is None:
        return
    if isinstance(timeout, bool) or not isinstance(timeout, (int, float)):
        raise ArgumentTypeError(f"timeout must be None or a number of seconds, not {type(timeout).__name__}: {timeout!r}")
    if not timeout >= 0:
        raise InvalidArgumentError(f"invalid timeout: {timeout!r} (must be None or a number of seconds >= 0)")


class _Answer(_t.Protocol):
    @property
    def retry_after(self) -> float: ...
    def __bool__(self) -> bool: ...


_D = _t.TypeVar("_D", bound=_Answer)
_D_co = _t.TypeVar("_D_co", bound=_Answer, covariant=True)


class _Limiter(_t.Protocol[_D_co]):
    def allow(self, key: _t.Any, cost: int = 1) -> _D_co: ...


async def acquire(limiter: _Limiter[_D], key: _t.Any, cost: int = 1, *, timeout: float | None = None) -> _D:
    """Take ``cost`` from ``key``, sleeping (``asyncio.sleep``) through each
    ``retry_after`` until the call is allowed.

    Returns the allowing decision. With ``timeout`` (seconds), gives up as
    soon as the next wait would take the total past it, and returns that
    denied (falsy) decision without sleeping: a denial is a value, as
    everywhere in ratomic. Works with every limiter (for a ``Stack``, ``key``
    is its list of keys). Errors from the limiter (a cost above the limit, a
    bad key) raise at once.

    The wait is the limiter's exact ``retry_after``, so with no competing
    callers one sleep suffices; under contention another caller may take
    the token first, and ``acquire`` waits again. ``timeout`` bounds the
    total time asked of ``asyncio.sleep``.
    """
    check_timeout(timeout)
    waited = 0.0
    while True:
        decision = limiter.allow(key, cost)
        if decision:
            return decision
        wait = decision.retry_after
        if timeout is not None and waited + wait > timeout:
            return decision
        # Looked up on each call so tests can replace it (and drive a ManualClock).
        await asyncio.sleep(wait)
        waited += wait
