"""PostgreSQL-backed limiters through the psycopg connection or pool you
already have.

Every process and host that uses the same database and the same ``prefix``
shares every key's state::

    import psycopg
    from ratomic.postgres import PostgresTokenBucket

    # autocommit: each decision is its own transaction, so a key's row is
    # locked only while its statement runs. statement_timeout bounds a call.
    conn = psycopg.connect("postgresql://app@127.0.0.1/app", autocommit=True,
                           options="-c statement_timeout=100")
    limiter = PostgresTokenBucket("10/s", client=conn, prefix="api")
    d = limiter.allow("user:42")          # one statement (an upsert of the key's row)
    if not d:
        print(f"retry in {d.retry_after:.3f}s")

A ``psycopg_pool.ConnectionPool`` works the same way (each call takes a
connection, runs one statement and gives it back, committed), and is what to
use in production: it replaces a connection that dies (a server restart,
``pg_terminate_backend``), while a single connection does not reconnect —
every call on it answers by ``on_error`` from then on, and its
:class:`BackendError` (and a warning on the ``ratomic.postgres`` logger,
once per limiter) says so. While the server cannot be reached, a call on
a pool waits for a connection up to the pool's ``timeout`` (psycopg_pool's
default: 30 s) before ``on_error`` answers it: give the pool the
``timeout`` a decision may cost. With a
``psycopg.AsyncConnection`` or a ``psycopg_pool.AsyncConnectionPool`` the
methods are coroutines (``await limiter.allow(key)``). The classes answer
with the same :class:`~ratomic.Decision` / :class:`~ratomic.MultiDecision`
as the in-memory limiters, whose ``source`` says who answered:
``"postgres"``, ``"deny_cache"``, ``"policy"``, ``"fallback"`` or
``"lease"`` (with ``lease="auto"``: a hot key's slice of tokens taken in
the same statement, ``ratomic_v1_lease``, and granted here in memory,
exactly fleet-wide, as with ``ratomic.redis``; :meth:`give_back` returns
what is left).

Calls in flight at once share statements: while ``max_in_flight``
statements of decisions are out (by default half a pool's ``max_size``,
rounded up; 1 for a connection, which runs one statement at a time anyway),
an ``allow`` at the
server's time waits, and the next statement to end sends every call waiting
then (up to 256) as one ``ratomic_v1_many``, each decided as it would have
been alone at that statement's reading of the server's clock. A blocking
limiter's first waiting thread sends them; an asyncio limiter's, a task of
its own. A call that finds a statement free goes at once, alone, as it
would without this; peeks, the ``*_at`` forms, lease asks, refunds, resets
and :meth:`allow_many` never wait. When the statement fails or times out,
the failure policy answers each of its calls, and, if that opened the
circuit breaker, the calls still waiting (not sent); a cancelled task or an
interrupted thread leaves the others answered. A call cancelled after its
statement went out may still have taken its token (psycopg closes the
connection when the server does not heed its cancel in time, and the
statement then runs once the row is free): count it as granted. A
``max_in_flight`` above the
calls you make at once turns it off.

The table and functions are created by :func:`migrate` (run it once, or let
a DBA run the SQL :func:`schema` returns). This module only moves bytes:
the SQL, the parameters, the decoding of rows, the deny cache, the circuit
breaker and the failure policy are ratomic's Rust engine (the crate
``ratomic-postgres``), shared with the Rust and C faces. It needs the
``psycopg`` package (``pip install 'ratomic[postgres]'``).
"""

from __future__ import annotations

import asyncio
import collections
import logging
import threading
import typing as _t
import weakref
from collections.abc import Iterable, Mapping, Sequence

from ratomic._ratomic import (
    ArgumentTypeError,
    BackendError,
    Decision,
    InvalidArgumentError,
    Keyed,
    Limiter,
    MultiDecision,
    Rule,
    _PostgresBatch,
    _PostgresCall,
    _PostgresDriver,
)

try:
    import psycopg as _pg
except ImportError as _e:  # pragma: no cover - exercised by hand
    raise ImportError(
        "ratomic.postgres needs the psycopg package: pip install 'ratomic[postgres]' (or pip install psycopg)"
    ) from _e

try:
    import psycopg_pool as _pool
except ImportError:  # the pool is optional
    _pool = None  # type: ignore[assignment]

__all__ = [
    "BackendError",
    "PostgresFixedWindow",
    "PostgresLimiter",
    "PostgresSlidingWindow",
    "PostgresTokenBucket",
    "migrate",
    "schema",
]

_Key = _t.Union[str, bytes]
_Request = _t.Union[_Key, tuple[_Key, int]]
#: What a failure answers: a policy, or an in-memory limiter to decide instead.
_OnError = _t.Union[_t.Literal["raise", "allow", "deny", "fallback"], Keyed, Limiter]

if _t.TYPE_CHECKING:
    from ratomic._ratomic import _Draft

logger = logging.getLogger("ratomic.postgres")

#: The advisory lock the migration holds (the Rust client's too).
_MIGRATION_LOCK = 0x7261746F6D696331


def schema(unlogged: bool = False) -> str:
    """The SQL that creates ratomic's table (``UNLOGGED`` if asked: faster
    writes, emptied by a server crash and absent on replicas) and its
    functions. Safe to run again."""
    return _PostgresDriver.schema(unlogged)


def migrate(client: _t.Any, *, unlogged: bool = False) -> _t.Any:
    """Runs :func:`schema` through ``client`` (a connection or a pool, sync
    or async) in one transaction, under the advisory lock the other faces
    take too. A coroutine for an async client."""
    sql = schema(unlogged)
    if _is_async(client):

        async def run() -> None:
            async with _aconnection(client) as conn:
                async with conn.transaction():
                    await conn.execute("SELECT pg_advisory_xact_lock(%s)", (_MIGRATION_LOCK,))
                    await conn.execute(sql)

        return run()
    with _connection(client) as conn:
        with conn.transaction():
            conn.execute("SELECT pg_advisory_xact_lock(%s)", (_MIGRATION_LOCK,))
            conn.execute(sql)
    return None


def _is_async(client: object) -> bool:
    if isinstance(client, _pg.AsyncConnection) or (_pool is not None and isinstance(client, _pool.AsyncConnectionPool)):
        return True
    if isinstance(client, _pg.Connection) or (_pool is not None and isinstance(client, _pool.ConnectionPool)):
        return False
    what = f"the class {client.__name__}" if isinstance(client, type) else type(client).__name__
    raise ArgumentTypeError(
        "client must be a psycopg.Connection or psycopg_pool.ConnectionPool (blocking) or a "
        f"psycopg.AsyncConnection or psycopg_pool.AsyncConnectionPool (asyncio), not {what}"
    )


class _Borrowed:
    """A bare connection used as it is (the ``with`` of a pool's
    ``connection()`` for a connection the caller owns)."""

    def __init__(self, conn: _t.Any) -> None:
        self.conn = conn

    def __enter__(self) -> _t.Any:
        return self.conn

    def __exit__(self, *exc: object) -> None:
        return None

    async def __aenter__(self) -> _t.Any:
        return self.conn

    async def __aexit__(self, *exc: object) -> None:
        return None


def _connection(client: _t.Any) -> _t.Any:
    return client.connection() if _pool is not None and isinstance(client, _pool.ConnectionPool) else _Borrowed(client)


def _aconnection(client: _t.Any) -> _t.Any:
    if _pool is not None and isinstance(client, _pool.AsyncConnectionPool):
        return client.connection()
    return _Borrowed(client)


def _kind(e: BaseException) -> str | None:
    """How a client call failed, in the driver's terms; None: not a backend failure."""
    if isinstance(e, _pg.errors.QueryCanceled) or isinstance(e, (TimeoutError, asyncio.TimeoutError)):
        return "timeout"
    if _pool is not None and isinstance(e, _pool.PoolTimeout):
        return "timeout"
    if isinstance(e, (_pg.OperationalError, _pg.InterfaceError, OSError)):
        return "connection"
    if isinstance(e, _pg.DatabaseError):
        return "server"
    if isinstance(e, _pg.Error):
        return "reply"
    return None


def _check_autocommit(client: _t.Any) -> None:
    """A bare connection must be in autocommit mode: otherwise the first
    statement opens a transaction that keeps the key's row locked (every
    other process's calls on it wait) until the caller commits."""
    if isinstance(client, (_pg.Connection, _pg.AsyncConnection)) and not client.autocommit:
        raise InvalidArgumentError(
            "the psycopg connection must be in autocommit mode (psycopg.connect(..., autocommit=True)): in a "
            "transaction a decision's row lock would last until you commit; or pass a psycopg_pool pool"
        )


#: The most waiting calls one statement carries (as ``ratomic.redis``'s round trips).
MAX_BATCH = 256


class _Waiting:
    """An allow at the server's time waiting for one of the statements out
    to end, then sent with the others waiting in one statement. ``done``
    is a ``threading.Event`` (blocking) or an ``asyncio.Future``."""

    __slots__ = ("call", "done", "error", "lead", "result")

    def __init__(self, call: _PostgresCall, done: _t.Any) -> None:
        self.call, self.done = call, done
        self.result: object = None
        self.error: BaseException | None = None
        self.lead = False  # blocking: woken to send the waiting calls itself

    def settle(self, answer: object) -> None:
        """Its answer from ``finish_coalesced``: a decision, or an exception to raise."""
        if isinstance(answer, BaseException):
            self.error = answer
        else:
            self.result = answer

    def outcome(self) -> _t.Any:
        if self.error is not None:
            raise self.error
        return self.result

    def resolve(self, answer: object) -> None:
        """asyncio: hands ``answer`` to the waiting task, if it still waits."""
        if not self.done.done():
            if isinstance(answer, BaseException):
                self.done.set_exception(answer)
            else:
                self.done.set_result(answer)


def _interruption(e: BaseException) -> ConnectionError:
    """What a batch's other callers are told when the statement carrying
    them was interrupted (the failure policy answers them)."""
    return ConnectionError(f"the statement carrying this call was interrupted ({type(e).__name__}) before its reply")


def _max_in_flight(client: _t.Any, value: object) -> int:
    if value is None:
        if _pool is not None and isinstance(client, (_pool.ConnectionPool, _pool.AsyncConnectionPool)):
            # Half the pool, rounded up: at 64 in flight on a pool of 4, 2 out
            # ran 1.03-1.22x 4 out (BENCHMARKS.md), as from Rust and Node.
            return max(1, (int(client.max_size) + 1) // 2)
        return 1  # a connection runs one statement at a time
    if isinstance(value, bool) or not isinstance(value, int):
        raise ArgumentTypeError(
            f"max_in_flight must be None (half the pool's max_size; 1 for a connection) or a whole number of "
            f"statements >= 1, not {type(value).__name__}: {value!r}"
        )
    if value < 1:
        raise InvalidArgumentError(
            f"invalid max_in_flight: {value!r} (must be a whole number of statements >= 1; a number above the "
            "calls you make at once turns coalescing off)"
        )
    return value


class _PostgresBase:
    """What the four classes share: the driver and the client."""

    _driver: _PostgresDriver

    def __init__(
        self,
        limits: object,
        *,
        multi: bool,
        client: _t.Any,
        prefix: str = "ratomic",
        on_error: _OnError = "raise",
        deny_retry_after: float = 1.0,
        deny_cache: int = 10_000,
        breaker_threshold: int = 5,
        breaker_cooldown: float = 1.0,
        breaker_failure_time: float = 1.0,
        max_key_len: int = 1024,
        lease: _t.Union[str, int] = "off",
        lease_keys: int = 10_000,
        max_in_flight: int | None = None,
    ) -> None:
        self._async = _is_async(client)
        _check_autocommit(client)
        self._client = client
        self._warned_closed = False  # see _closed
        # Allows at the server's time in flight at once share statements
        # (see _decide): at most _max_in_flight statements of decisions are
        # out, and the calls that come meanwhile wait in _queue.
        self._max_in_flight = _max_in_flight(client, max_in_flight)
        self._in_flight = 0
        self._queue: collections.deque[_Waiting] = collections.deque()
        self._lock = threading.Lock()  # blocking: guards the three above
        self._drainers: set[asyncio.Task[None]] = set()  # asyncio: the tasks sending waiting calls
        #: The in-memory limiter a failure falls back to (as ratomic.redis's on_error), else None.
        self._local: Keyed | Limiter | None = None
        policy = "raise"
        if isinstance(on_error, str):
            policy = on_error
        elif isinstance(on_error, Limiter if multi else Keyed):
            self._local = on_error
        else:
            want = "a ratomic.Limiter" if multi else "an in-memory ratomic limiter (TokenBucket, FixedWindow, ...)"
            raise ArgumentTypeError(
                f'on_error must be "raise", "allow", "deny", "fallback" or {want} to fall back to, '
                f"not {type(on_error).__name__}"
            )
        self._driver = _PostgresDriver(
            limits,
            multi=multi,
            prefix=prefix,
            on_error=policy,
            deny_retry_after=deny_retry_after,
            deny_cache=deny_cache,
            breaker_threshold=breaker_threshold,
            breaker_cooldown=breaker_cooldown,
            breaker_failure_time=breaker_failure_time,
            max_key_len=max_key_len,
            lease=lease,
            lease_keys=lease_keys,
        )
        if not self._async and self._driver.lease_max is not None:
            # When the limiter is collected (or at exit) the leases still
            # held go back, quietly: a closed client leaves them to come back
            # when their time passes.
            weakref.finalize(self, _give_back_quietly, client, self._driver)

    # ---- I/O: one statement, its one value ---------------------------------

    def _run(self, sql: str, params: _t.Any) -> _t.Any:
        with _connection(self._client) as conn:
            row = conn.execute(sql, params).fetchone()
        return None if row is None else row[0]

    async def _arun(self, sql: str, params: _t.Any) -> _t.Any:
        async with _aconnection(self._client) as conn:
            cur = await conn.execute(sql, params)
            row = await cur.fetchone()
        return None if row is None else row[0]

    def _outcome(self, sql: str, params: _t.Any) -> tuple[_t.Any, str | None]:
        """Runs the statement: ``(its value, None)``, or ``(the client's
        exception, how it failed)``; raises what is no backend failure."""
        try:
            return self._run(sql, params), None
        except Exception as e:
            kind = _kind(e)
            if kind is None:
                raise
            return self._closed(e, kind), kind

    async def _aoutcome(self, sql: str, params: _t.Any) -> tuple[_t.Any, str | None]:
        """:meth:`_outcome` through an asyncio client."""
        try:
            return await self._arun(sql, params), None
        except Exception as e:
            kind = _kind(e)
            if kind is None:
                raise
            return self._closed(e, kind), kind

    def _closed(self, e: Exception, kind: str) -> Exception:
        """The failure as the driver gets it. A single connection whose
        server connection failed (a restart, ``pg_terminate_backend``) is
        closed for good: psycopg does not reconnect it, so every call
        answers by ``on_error`` from then on. Its failure then says so and
        names the fix (a pool, which replaces broken connections), logged
        once per limiter as well for the policies that raise nothing; the
        client's exception is its ``__cause__``."""
        if kind != "connection" or not isinstance(self._client, (_pg.Connection, _pg.AsyncConnection)):
            return e
        if not self._client.closed:
            return e
        pool = "psycopg_pool.AsyncConnectionPool" if self._async else "psycopg_pool.ConnectionPool"
        message = (
            f"{e}; the psycopg connection is closed and does not reconnect: this limiter answers every call "
            f"by on_error until it is built on a new connection. Give it a {pool}, which replaces broken connections"
        )
        if not self._warned_closed:
            self._warned_closed = True
            logger.warning("%s", message)
        closed = _pg.OperationalError(message)
        closed.__cause__ = e
        return closed

    def _call_outcome(self, call: _PostgresCall) -> tuple[_t.Any, str | None]:
        """:meth:`_outcome` of one call. The common call (an allow on one
        token bucket) is an upsert that returns no row when it does not
        grant (a denial: nothing written); then ``ratomic_v1_call`` decides
        and answers every field."""
        value, kind = self._outcome(call.statement, call.params)
        if kind is None and value is None and call.upsert:
            general = self._driver.general(call)
            value, kind = self._outcome(general.statement, general.params)
        return value, kind

    async def _acall_outcome(self, call: _PostgresCall) -> tuple[_t.Any, str | None]:
        """:meth:`_call_outcome` through an asyncio client."""
        value, kind = await self._aoutcome(call.statement, call.params)
        if kind is None and value is None and call.upsert:
            general = self._driver.general(call)
            value, kind = await self._aoutcome(general.statement, general.params)
        return value, kind

    def _round_trip(self, sql: str, params: _t.Any, finish: _t.Callable[..., _t.Any]) -> _t.Any:
        """Runs the statement and hands its value, or how it failed, to
        ``finish(value, kind)``; a coroutine for an async client."""
        if self._async:

            async def go() -> _t.Any:
                return finish(*await self._aoutcome(sql, params))

            return go()
        return finish(*self._outcome(sql, params))

    def _answer_now(self, value: _t.Any) -> _t.Any:
        if not self._async:
            return value

        async def done() -> _t.Any:
            return value

        return done()

    # ---- the operations ------------------------------------------------------

    # Decisions in flight at once share statements: while _max_in_flight
    # statements of decisions are out, an allow at the server's time
    # (call.coalescible) waits in _queue, and the next statement to end
    # sends every call waiting then (up to MAX_BATCH) as one
    # ratomic_v1_many, each answered as it would have been alone
    # (driver.finish_coalesced). A call that finds a statement free goes
    # at once, by itself, as it always did.

    def _decide(self, op: str, key: _Key, cost: int, now: float | None) -> _t.Any:
        step = self._driver.begin(op, key, cost, now)
        if not isinstance(step, _PostgresCall):
            return self._answer_now(step)
        if self._async:
            return self._decide_async(step)
        me: _Waiting | None = None
        held = False
        try:
            with self._lock:
                if step.coalescible and self._in_flight >= self._max_in_flight:
                    me = _Waiting(step, threading.Event())
                    self._queue.append(me)
                else:
                    self._in_flight += 1
                    held = True
            if me is not None:
                me.done.wait()
        except BaseException:
            # Interrupted (KeyboardInterrupt) before its statement: the
            # slot it took, or its place in the queue, goes to the others.
            if me is not None:
                self._leave(me)
            elif held:
                self._release()
            raise
        if me is None:
            try:
                value, kind = self._call_outcome(step)
                # Finished before its slot goes on: a failure has opened the
                # breaker by the time the calls waiting are looked at.
                return self._driver.finish(step, value, kind)
            finally:
                self._release()
        if me.lead:
            with self._lock:
                batch = [me, *(self._queue.popleft() for _ in range(min(len(self._queue), MAX_BATCH - 1)))]
            try:
                self._send_waiting(batch, me)
            finally:
                self._release()
        return me.outcome()

    def _release(self) -> None:
        """Blocking: a statement ended. Its slot goes to the first waiting
        call, woken to send the calls waiting then (each thread sends at
        most one statement for others: none serves them for ever), or is
        free."""
        with self._lock:
            if self._queue:
                nxt = self._queue.popleft()
                nxt.lead = True
                nxt.done.set()
            else:
                self._in_flight -= 1

    def _leave(self, me: _Waiting) -> None:
        """Blocking: ``me`` stops waiting (its thread was interrupted): out
        of the queue, or, had it just been woken to send the next
        statement, that slot goes on to the next waiting call."""
        with self._lock:
            if me in self._queue:
                self._queue.remove(me)
                return
        if me.lead:
            self._release()

    def _send_waiting(self, batch: list[_Waiting], me: _Waiting) -> None:
        """Blocking: sends ``batch`` (led by ``me``, this thread's call) as
        one statement and answers every call in it, whatever happens."""
        answers: Sequence[object] = []
        try:
            b = self._driver.coalesce([w.call for w in batch])
            if isinstance(b, list):
                # The breaker opened while they waited (a statement out
                # failed): the policy's answers, not another wait on a dead
                # server.
                answers = b
                return
            try:
                value, kind = self._outcome(self._driver.many_statement, b.params)
            except Exception:
                raise  # not a backend failure: every caller's (below)
            except BaseException as e:
                # Interrupted in this thread: the statement's fate is
                # unknown; the others are answered as by a failed one.
                answers = self._driver.finish_coalesced(b, _interruption(e), "connection")
                raise
            answers = self._driver.finish_coalesced(b, value, kind)
        except Exception as e:
            answers = [e] * len(batch)
        finally:
            for w, answer in zip(batch, answers or [BackendError("the statement was interrupted")] * len(batch)):
                w.settle(answer)
                if w is not me:
                    w.done.set()

    async def _decide_async(self, call: _PostgresCall) -> _t.Any:
        if call.coalescible and self._in_flight >= self._max_in_flight:
            w = _Waiting(call, asyncio.get_running_loop().create_future())
            self._queue.append(w)
            return await w.done
        self._in_flight += 1
        try:
            value, kind = await self._acall_outcome(call)
        finally:
            self._in_flight -= 1
            self._drain_soon()
        return self._driver.finish(call, value, kind)

    def _drain_soon(self) -> None:
        """asyncio: if calls wait and a statement may go out, a task sends
        them (no caller carries the others', nor can its cancellation
        strand them)."""
        if self._queue and self._in_flight < self._max_in_flight:
            self._in_flight += 1
            task = asyncio.ensure_future(self._drain())
            self._drainers.add(task)
            task.add_done_callback(self._drainers.discard)

    async def _drain(self) -> None:
        """asyncio: sends the waiting calls, one batch statement at a time,
        while some wait; holds one slot (taken by :meth:`_drain_soon`)."""
        batch: list[_Waiting] = []
        try:
            while self._queue:
                taken = [self._queue.popleft() for _ in range(min(len(self._queue), MAX_BATCH))]
                batch = [w for w in taken if not w.done.done()]  # a cancelled caller needs no decision
                if not batch:
                    continue
                b = self._driver.coalesce([w.call for w in batch])
                if isinstance(b, list):  # the breaker opened: see _send_waiting
                    answers: Sequence[object] = b
                else:
                    try:
                        value, kind = await self._aoutcome(self._driver.many_statement, b.params)
                    except Exception as e:  # not a backend failure: every caller's
                        answers = [e] * len(batch)
                    else:
                        answers = self._driver.finish_coalesced(b, value, kind)
                for w, answer in zip(batch, answers):
                    w.resolve(answer)
                batch = []
        except BaseException as e:
            # Cancelled (the loop is closing): nobody waits for ever; those
            # of this statement and those waiting get the policy's answer.
            rest = [w for w in [*batch, *self._queue] if not w.done.done()]
            self._queue.clear()
            if rest:
                b = self._driver.coalesce([w.call for w in rest])
                if not isinstance(b, list):  # a list: the breaker is open, the policy answered
                    b = self._driver.finish_coalesced(b, _interruption(e), "connection")
                for w, answer in zip(rest, b):
                    w.resolve(answer)
            raise
        finally:
            self._in_flight -= 1

    def allow(self, key: _Key, cost: int = 1) -> _t.Any:
        """Consumes ``cost`` if every limit allows it, at the server's clock."""
        return self._guarded("allow", key, cost, None)

    def allow_at(self, key: _Key, now: float, cost: int = 1) -> _t.Any:
        """As :meth:`allow` at ``now`` (seconds on your clock)."""
        return self._guarded("allow", key, cost, now)

    def peek(self, key: _Key, cost: int = 1) -> _t.Any:
        """What :meth:`allow` would answer, changing nothing."""
        return self._guarded("peek", key, cost, None)

    def peek_at(self, key: _Key, now: float, cost: int = 1) -> _t.Any:
        """As :meth:`peek` at ``now``."""
        return self._guarded("peek", key, cost, now)

    def refund(self, key: _Key, tokens: int) -> _t.Any:
        """Gives ``tokens`` back to every limit on ``key`` (never above full);
        into this process's own lease of ``key`` first, if it can take them."""
        if self._driver.refund_lease(key, tokens):
            return self._answer_now(None)
        call = self._driver.begin_refund(key, tokens)
        return self._round_trip(self._driver.statement, call.params, self._driver.finish_refund)

    def refund_at(self, key: _Key, now: float, tokens: int) -> _t.Any:
        """As :meth:`refund` at ``now``."""
        call = self._driver.begin_refund(key, tokens, now)
        return self._round_trip(self._driver.statement, call.params, self._driver.finish_refund)

    def reset(self, key: _Key) -> _t.Any:
        """Forgets ``key``: every limit is full again."""
        call = self._driver.begin_reset(key)
        return self._round_trip(self._driver.statement, call.params, self._driver.finish_reset)

    def _many(self, requests: Iterable[_Request], now: float | None) -> _t.Any:
        step = self._driver.begin_many(requests, now)
        if not isinstance(step, _PostgresBatch):
            return self._answer_now(step)
        return self._round_trip(
            self._driver.many_statement, step.params, lambda v, kind: self._driver.finish_many(step, v, kind)
        )

    def allow_many(self, requests: Iterable[_Request]) -> _t.Any:
        """Decides every request (a key, or ``(key, cost)``) in one statement,
        in order, at one reading of the server's clock. Every request is
        checked first; an invalid one fails the whole batch with its index."""
        return self._guarded_many(requests, None)

    def allow_many_at(self, requests: Iterable[_Request], now: float) -> _t.Any:
        """As :meth:`allow_many`, every request at ``now``."""
        return self._guarded_many(requests, now)

    # ---- the in-memory fallback (on_error=<a limiter>) -------------------------

    def _fallback(self, op: str, key: _Key, cost: int) -> _t.Any:
        local = _t.cast(_t.Any, self._local)
        d = local.peek(key, cost) if op == "peek" else local.allow(key, cost)
        return self._driver.fallback(d)

    def _or_local(self, start: _t.Callable[[], _t.Any], fall_back: _t.Callable[[], _t.Any]) -> _t.Any:
        """``start()`` (a value, or a coroutine for an async client), or,
        when PostgreSQL fails (``BackendError``), ``fall_back()``'s answer
        from the in-memory limiter ``on_error`` named."""
        try:
            pending = start()
        except BackendError:
            return self._answer_now(fall_back())
        if not self._async:
            return pending

        async def settle() -> _t.Any:
            try:
                return await pending
            except BackendError:
                return fall_back()

        return settle()

    def _guarded(self, op: str, key: _Key, cost: int, now: float | None) -> _t.Any:
        """:meth:`_decide`, or, when PostgreSQL fails and ``on_error`` is an
        in-memory limiter, that limiter's answer."""
        if self._local is None:
            return self._decide(op, key, cost, now)
        return self._or_local(lambda: self._decide(op, key, cost, now), lambda: self._fallback(op, key, cost))

    def _guarded_many(self, requests: Iterable[_Request], now: float | None) -> _t.Any:
        if self._local is None:
            return self._many(requests, now)
        requests = list(requests)  # read once: the fallback may need them again
        local = _t.cast(_t.Any, self._local)
        return self._or_local(
            lambda: self._many(requests, now), lambda: [self._driver.fallback(d) for d in local.allow_many(requests)]
        )

    def gc(self) -> _t.Any:
        """Removes this prefix's rows that are full again at the server's
        time (a removed row answers as a full one); how many it removed.
        Nothing calls it unless you do."""
        return self._gc(None)

    def gc_at(self, now: float) -> _t.Any:
        """As :meth:`gc`, for the rows full at ``now`` (your clock)."""
        return self._gc(now)

    def _gc(self, now: float | None) -> _t.Any:
        params = (self._driver.prefix, self._driver.at_us(now), 10_000)

        def finish(value: _t.Any, kind: str | None) -> int:
            if kind is not None:
                raise self._driver.backend_error(kind, value)
            return int(value)

        return self._round_trip(self._driver.gc_statement, params, finish)

    def acquire(self, key: _Key, cost: int = 1, *, timeout: float | None = None) -> _t.Any:
        """Waits until ``key`` grants ``cost``, at most ``timeout`` seconds
        (None: as long as it takes); a wait that would pass it answers the
        denial at once, consuming nothing."""
        if timeout is not None and not timeout >= 0:
            raise InvalidArgumentError(f"invalid timeout: {timeout!r} (must be a number of seconds >= 0 or None)")
        if self._async:
            return self._acquire_async(key, cost, timeout)
        import time

        end = None if timeout is None else time.monotonic() + timeout
        while True:
            d = self._guarded("allow", key, cost, None)
            if d.allowed:
                return d
            wake = time.monotonic() + d.retry_after
            if end is not None and wake > end:
                return d
            time.sleep(d.retry_after)

    async def _acquire_async(self, key: _Key, cost: int, timeout: float | None) -> _t.Any:
        loop = asyncio.get_running_loop()
        end = None if timeout is None else loop.time() + timeout
        while True:
            d = await self._guarded("allow", key, cost, None)
            if d.allowed:
                return d
            if end is not None and loop.time() + d.retry_after > end:
                return d
            await asyncio.sleep(d.retry_after)

    # ---- what it is -----------------------------------------------------------

    @property
    def client(self) -> _t.Any:
        """The psycopg connection or pool the calls go through."""
        return self._client

    @property
    def max_in_flight(self) -> int:
        """The most statements of decisions out at once; past it an allow
        at the server's time waits and goes with the others waiting in the
        next statement."""
        return self._max_in_flight

    @property
    def prefix(self) -> str:
        """The row prefix."""
        return str(self._driver.prefix)

    @property
    def limit(self) -> int:
        """The largest cost a call may ask (the smallest limit)."""
        return int(self._driver.limit)

    @property
    def breaker_open(self) -> bool:
        """Whether the circuit breaker is open: calls are answered by the
        failure policy without reaching the server."""
        return bool(self._driver.breaker_open)

    # ---- leases --------------------------------------------------------------

    @property
    def leases_held(self) -> int:
        """Keys holding a lease now."""
        return int(self._driver.leases_held)

    def give_back(self) -> _t.Any:
        """Gives back the unused tokens of every lease this limiter holds, so
        that other processes can have them now rather than when their time
        passes: how many limits took tokens back (a lease after which the
        server granted anything on its key cannot be). Calls made afterwards
        take new leases. A coroutine for an async client; a blocking limiter
        also does it when it is collected or at exit."""
        if self._async:
            return self._agive_back()
        return _give_back(self._client, self._driver)

    async def _agive_back(self) -> int:
        back = 0
        for params in self._driver.begin_give_backs():
            try:
                value = await self._arun(self._driver.give_back_statement, params)
            except Exception as e:
                kind = _kind(e)
                if kind is None:
                    raise
                self._driver.finish_give_back(e, kind)  # raises BackendError
                continue
            back += self._driver.finish_give_back(value)
        return back

    def __repr__(self) -> str:
        """``PostgresTokenBucket(token bucket 10 per 1s, prefix='api', client=blocking)``:
        the rules with their units, as the in-memory limiters print them."""
        mode = "asyncio" if self._async else "blocking"
        rules = self._driver.rules
        if isinstance(self, PostgresLimiter):
            shown = "{" + ", ".join(f'"{n}": {r}' for n, r in zip(self._driver.names, rules)) + "}"
        else:
            shown = str(rules[0])
        return f"{type(self).__name__}({shown}, prefix={self.prefix!r}, client={mode})"


def _give_back(client: _t.Any, driver: _PostgresDriver) -> int:
    """Runs every lease's give-back: how many limits took tokens back."""
    back = 0
    for params in driver.begin_give_backs():
        try:
            with _connection(client) as conn:
                row = conn.execute(driver.give_back_statement, params).fetchone()
        except Exception as e:
            kind = _kind(e)
            if kind is None:
                raise
            driver.finish_give_back(e, kind)  # raises BackendError
            continue
        back += driver.finish_give_back(None if row is None else row[0])
    return back


def _give_back_quietly(client: _t.Any, driver: _PostgresDriver) -> None:
    """The give-back when a limiter is collected or at exit: never raises
    (the leases then come back when their time passes)."""
    try:
        _give_back(client, driver)
    except Exception as e:  # noqa: BLE001 - nothing can act on it here
        logger.debug("ratomic.postgres: leases not given back: %s", e)


class _SingleRule(_PostgresBase):
    """A limiter of one rule: its header fields name the limit."""

    def headers(
        self, decision: Decision, *, name: str = "default", legacy: bool = False, draft: _Draft = "draft-11"
    ) -> list[tuple[str, str]]:
        """HTTP fields for ``decision`` (one this limiter answered), as
        :meth:`ratomic.TokenBucket.headers` gives them: ``RateLimit-Policy``
        and ``RateLimit`` (the limit named ``name``), ``Retry-After`` on a
        denial, and ``X-RateLimit-*`` with ``legacy``; the standard fields
        as ``draft`` writes them (``"draft-11"``, ``"draft-8"``,
        ``"draft-7"`` or ``"draft-6"``)."""
        return self._driver.headers(decision, name, legacy, draft=draft)

    def problem(self, decision: Decision, *, name: str = "default") -> str | None:
        """The RFC 9457 problem document (JSON) for a 429 answering
        ``decision``; None when it was allowed."""
        return self._driver.problem(decision, name)


_OPTIONS_DOC = """

``client``: a ``psycopg.Connection`` in autocommit mode or a
``psycopg_pool.ConnectionPool`` (blocking), or their asyncio twins. Options:
``prefix`` (default ``"ratomic"``), ``on_error`` (``"raise"``, ``"allow"``,
``"deny"`` with ``deny_retry_after`` seconds, ``"fallback"``: a local
in-memory limiter of the same rules, or an in-memory limiter of yours to
decide instead, as ``ratomic.redis``'s), ``deny_cache``, ``breaker_threshold``,
``breaker_cooldown``, ``breaker_failure_time``, ``max_key_len``, ``lease``
(``"off"``, ``"auto"`` or the most tokens a lease takes; token buckets
only), ``lease_keys`` and ``max_in_flight`` (the most statements of
decisions out at once before allows wait to share the next: default half
the pool's ``max_size``, rounded up, 1 for a connection). Bound each call with the
connection's ``statement_timeout``.
"""


class PostgresTokenBucket(_SingleRule):
    """A token bucket (GCRA) per key, in PostgreSQL: ``capacity`` tokens,
    ``refill_per_sec`` a second, or a rate string such as ``"10/s"``. Same
    arguments and answers as :class:`ratomic.TokenBucket`."""

    __doc__ = (__doc__ or "") + _OPTIONS_DOC

    def __init__(
        self, capacity: int | str, refill_per_sec: float | str | None = None, *, client: _t.Any, **options: _t.Any
    ) -> None:
        super().__init__(Rule.token_bucket(capacity, refill_per_sec), multi=False, client=client, **options)


class PostgresFixedWindow(_SingleRule):
    """A fixed window per key, in PostgreSQL: as :class:`ratomic.FixedWindow`."""

    __doc__ = (__doc__ or "") + _OPTIONS_DOC

    def __init__(
        self, limit: int | str, window_secs: float | None = None, *, client: _t.Any, **options: _t.Any
    ) -> None:
        super().__init__(Rule.fixed_window(limit, window_secs), multi=False, client=client, **options)


class PostgresSlidingWindow(_SingleRule):
    """A sliding window per key, in PostgreSQL: as :class:`ratomic.SlidingWindow`."""

    __doc__ = (__doc__ or "") + _OPTIONS_DOC

    def __init__(
        self, limit: int | str, window_secs: float | None = None, *, client: _t.Any, **options: _t.Any
    ) -> None:
        super().__init__(Rule.sliding_window(limit, window_secs), multi=False, client=client, **options)


class PostgresLimiter(_PostgresBase):
    """Several named limits on each key, all or nothing, in PostgreSQL (one
    row per key, locked by the call): ``{name: rule}`` or ``(name, rule)``
    pairs, as :class:`ratomic.Limiter`. Answers :class:`ratomic.MultiDecision`."""

    __doc__ = (__doc__ or "") + _OPTIONS_DOC

    def __init__(
        self,
        limits: str | Mapping[str, str | Rule] | Iterable[tuple[str, str | Rule]],
        *,
        client: _t.Any,
        **options: _t.Any,
    ) -> None:
        super().__init__(limits, multi=True, client=client, **options)

    @property
    def names(self) -> tuple[str, ...]:
        """The limits' names, in order."""
        return tuple(self._driver.names)

    def headers(
        self, decision: MultiDecision, *, legacy: bool = False, draft: _Draft = "draft-11"
    ) -> list[tuple[str, str]]:
        """HTTP fields for ``decision``, as :meth:`ratomic.Limiter.headers`:
        one ``RateLimit-Policy``/``RateLimit`` item per limit the call was
        subject to (in ``draft``'s form)."""
        return self._driver.headers(decision, "default", legacy, draft=draft)

    def problem(self, decision: MultiDecision) -> str | None:
        """The RFC 9457 problem document naming the limits that denied;
        None when it was allowed."""
        return self._driver.problem(decision, "default")
