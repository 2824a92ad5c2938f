"""ratomic: a lock-free rate limiter written in Rust.

>>> import ratomic
>>> clock = ratomic.ManualClock()
>>> limiter = ratomic.TokenBucket("2/s", clock=clock)
>>> bool(limiter.allow("user:1")), bool(limiter.allow("user:1")), bool(limiter.allow("user:1"))
(True, True, False)
>>> clock.advance(0.5)
>>> limiter.allow("user:1")
Decision(allowed=True, remaining=0, limit=2, retry_after=0.0, reset_after=1.0)

Every limiter answers with a :class:`Decision` (a :class:`MultiDecision`
for :class:`Limiter` and :class:`Stack`): a denial is a falsy value, never
an exception. Exceptions (all :class:`RatomicError`) are for misuse.
"""

from ratomic._acquire import acquire
from ratomic._ratomic import (
    ArgumentTypeError,
    BackendError,
    CostExceedsLimitError,
    Decision,
    DirectTokenBucket,
    FixedWindow,
    InvalidArgumentError,
    InvalidRateError,
    KeyEncodingError,
    Keyed,
    KeyTooLongError,
    KeyTypeError,
    CoarseClock,
    Limiter,
    LimitSet,
    ManualClock,
    MultiDecision,
    PROBLEM_CONTENT_TYPE,
    Quotas,
    RatomicError,
    Rule,
    SlidingWindow,
    Stack,
    TokenBucket,
    __version__,
)

__all__ = [
    "ArgumentTypeError",
    "BackendError",
    "CoarseClock",
    "CostExceedsLimitError",
    "Decision",
    "DirectTokenBucket",
    "FixedWindow",
    "InvalidArgumentError",
    "InvalidRateError",
    "KeyEncodingError",
    "KeyTooLongError",
    "KeyTypeError",
    "Keyed",
    "LimitSet",
    "Limiter",
    "ManualClock",
    "MultiDecision",
    "PROBLEM_CONTENT_TYPE",
    "Quotas",
    "RatomicError",
    "Rule",
    "SlidingWindow",
    "Stack",
    "TokenBucket",
    "__version__",
    "acquire",
]
