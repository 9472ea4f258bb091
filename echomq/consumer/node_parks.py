"""A park over queues that lie in several slots of a Valkey Cluster, for the blocking shell.

A cluster refuses a ``BLPOP`` whose keys hash to several slots (``CROSSSLOT``), even when one
node serves them all, so the park keys of a consumer of several queues are grouped by slot
(``park_groups``), each group with the node the client's slot map names for it. With one group
the consumer parks as on one server. With several, ``NodeParks`` sends one ``BLPOP`` per group at
once, each from a thread of its own on a connection of its own to the group's node (so it can be
``CLIENT UNBLOCK``-ed by id there), all with the same timeout. The first to return ends the park:
the others are unblocked (a wake token on the group's first wake key where ``CLIENT UNBLOCK`` is
denied) and awaited, and a token any of them popped meanwhile counts in the park's answer (a wake
over a watch). A call that has not returned within ``UNBLOCK_PATIENCE_S`` is left to end by
itself: a token it pops after its park has ended is pushed back to the key it came from, as a
stopping consumer hands its token on. A redirect (``MOVED``, ``ASK``, ``TRYAGAIN``,
``CLUSTERDOWN``) from a call ends the park as a wake (the next read and claims follow it and the
next park groups again by the slot map); a connection error ends it by raising, so the run loop's
back-off applies, as on one server.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Sequence
from contextlib import suppress
from dataclasses import dataclass, field
from queue import Empty, SimpleQueue
from typing import Any

import redis
import redis.exceptions

from echomq.engine.calls import text
from echomq.engine.clients import is_cluster, private_twin, twins
from echomq.queue.parking import is_watch

UNBLOCK_PATIENCE_S = 0.5
# The calls of a park share its timeout; sent a moment apart, they reach it within this.
TIMEOUT_GRACE_S = 0.05
WAKE_CAP = 64  # the most tokens a wake key keeps
# What a call of the park may answer, weakest first: nothing, a watch token, a wake token.
RANK = {None: 0, "watch": 1, "wake": 2}
CONNECTION_ERRORS = (redis.ConnectionError, redis.TimeoutError)
REDIRECTS = (redis.exceptions.AskError, redis.exceptions.TryAgainError,
             redis.exceptions.ClusterDownError)

Push = Callable[[str, str], None]  # hands a popped token back: (its kind, the key it came from)


@dataclass(frozen=True)
class ParkGroup:
    """Park keys of one slot, and the node the client's slot map names for it (None: not a
    cluster client)."""

    slot: int
    node: Any
    keys: list[str]

    @property
    def wake_key(self) -> str:
        """The group's first wake key (its highest-priority queue's): where a token goes to end
        its call when ``CLIENT UNBLOCK`` cannot."""
        return next((key for key in self.keys if not is_watch(key)), self.keys[0])


def park_groups(conn: Any, keys: Sequence[str]) -> list[ParkGroup]:
    """``keys`` grouped by slot, in the order of each group's first key and with the keys'
    order kept inside a group; a client of one server: one group."""
    if not is_cluster(conn):
        return [ParkGroup(0, None, list(keys))]
    groups: dict[int, ParkGroup] = {}
    for key in keys:
        slot = int(conn.keyslot(key))
        if slot not in groups:
            groups[slot] = ParkGroup(slot, conn.get_node_from_key(key), [])
        groups[slot].keys.append(key)
    return list(groups.values())


def node_client(conn: Any, node: Any) -> Any:
    """The blocking cluster client ``conn``'s client of ``node`` (redis-py or valkey-py)."""
    getter = getattr(conn, "get_redis_connection", None) or conn.get_valkey_connection
    return getter(node)


def line_key(group: ParkGroup) -> tuple[str, int]:
    """What a group's parking connection is kept by: its node's name and its slot."""
    return (str(group.node.name), group.slot)


def answer_of(popped: Any) -> tuple[str, str] | None:
    """What a ``BLPOP`` reply means: (``"wake"`` or ``"watch"``, the key), or None."""
    if popped is None:
        return None
    key = text(popped[0])
    return ("watch" if is_watch(key) else "wake", key)


Answer = tuple[str, str] | None | BaseException


def verdict(answers: Sequence[Answer]) -> str | None:
    """The park's answer from its calls': a popped wake token, else a connection error
    (raised), else a redirect (a wake), else a watch token, else None (the timeout)."""
    tokens = [answer[0] for answer in answers if isinstance(answer, tuple)]
    best = max(tokens, key=RANK.__getitem__, default=None)
    if best == "wake":
        return best
    for answer in answers:
        if isinstance(answer, twins(*CONNECTION_ERRORS)):
            raise answer
    if any(isinstance(answer, twins(*REDIRECTS)) for answer in answers):
        return "wake"
    failed = next((answer for answer in answers if isinstance(answer, BaseException)), None)
    if failed is not None:
        raise failed
    return best


@dataclass(eq=False)
class Line:
    """One group's parking connection: a client of one connection to its node, and its id."""

    client: Any
    client_id: int
    blocked: bool = False  # set by the call's thread from before it reads the stop flag

    def close(self) -> None:
        with suppress(Exception):
            self.client.close()
            self.client.connection_pool.disconnect()


@dataclass(eq=False)
class Round:
    """One park's calls: their lines and groups, and the answers they give (each one answer)."""

    lines: list[Line]
    groups: list[ParkGroup]
    answers: SimpleQueue[tuple[int, Answer]] = field(default_factory=SimpleQueue)
    ended: threading.Event = field(default_factory=threading.Event)
    _lock: threading.Lock = field(default_factory=threading.Lock)
    _closed: bool = False

    def answer(self, index: int, answer: Answer) -> bool:
        """Give call ``index``'s answer; False once the park has ended without it."""
        with self._lock:
            if self._closed:
                return False
            self.answers.put((index, answer))
            return True

    def close(self) -> None:
        """No answer is taken after this."""
        with self._lock:
            self._closed = True


def take(round_: Round, answers: list[tuple[int, Answer]], within_s: float) -> None:
    """Add to ``answers`` those of ``round_``'s calls that come ``within_s``, until every
    call has answered."""
    deadline = time.monotonic() + within_s
    while len(answers) < len(round_.lines):
        try:
            answers.append(round_.answers.get(timeout=max(0.0, deadline - time.monotonic())))
        except Empty:
            return


class NodeParks:
    """The parks of a blocking consumer over several slots of the cluster client ``conn``;
    ``socket_timeout_s``: its parking connections' read timeout; ``wake(key)`` leaves a wake
    token on ``key``, ``push(kind, key)`` hands a popped token back."""

    def __init__(self, conn: Any, socket_timeout_s: float | None, wake: Callable[[str], None],
                 push: Push) -> None:
        self._conn = conn
        self._socket_timeout_s = socket_timeout_s
        self._wake, self._push = wake, push
        self._lines: dict[tuple[str, int], Line] = {}
        self._round: Round | None = None

    def park(self, groups: Sequence[ParkGroup], timeout_s: float,
             stopping: threading.Event) -> str | None:
        """One ``BLPOP`` per group at once, until the first returns (then the others are ended)
        or a stop: "wake", "watch" or None, as one server's park."""
        self._keep_only(groups)
        round_ = Round([self._line(group) for group in groups], list(groups))
        self._round = round_
        try:
            if stopping.is_set():
                return None
            for index in range(len(groups)):
                threading.Thread(target=self._call, args=(round_, index, timeout_s, stopping),
                                 name="echomq-park", daemon=True).start()
            first = round_.answers.get()
            round_.ended.set()
            answers = self._end(round_, first)
        finally:
            self._round = None
        if stopping.is_set():
            self._hand_back(answers)
        self._drop_failed(round_, answers)
        return verdict([answer for _, answer in answers])

    def interrupt(self) -> None:
        """Make every call of a park in progress return now (after the stop flag is set)."""
        round_ = self._round
        if round_ is not None:
            self._unblock_all(round_)

    def close(self) -> None:
        lines, self._lines = self._lines, {}
        for line in lines.values():
            line.close()

    # one park's calls -------------------------------------------------------------------------

    def _keep_only(self, groups: Sequence[ParkGroup]) -> None:
        """Close the lines of groups no longer parked on (a slot moved, a node went)."""
        wanted = {line_key(group) for group in groups}
        for key in [key for key in self._lines if key not in wanted]:
            self._lines.pop(key).close()

    def _line(self, group: ParkGroup) -> Line:
        """The parking connection of ``group`` (made on first use)."""
        key = line_key(group)
        line = self._lines.get(key)
        if line is None:
            line = Line(private_twin(node_client(self._conn, group.node),
                                     self._socket_timeout_s), 0)
            try:
                line.client_id = int(line.client.client_id())
            except BaseException:
                line.close()
                raise
            self._lines[key] = line
        return line

    def _call(self, round_: Round, index: int, timeout_s: float,
              stopping: threading.Event) -> None:
        """Call ``index``'s ``BLPOP``, from a thread of its own."""
        line, group = round_.lines[index], round_.groups[index]
        answer: Answer = None
        line.blocked = True
        try:
            if not (round_.ended.is_set() or stopping.is_set()):
                answer = answer_of(line.client.blpop(group.keys, timeout=timeout_s))
        except BaseException as exc:
            answer = exc
        finally:
            line.blocked = False
        if not round_.answer(index, answer):  # the park ended without this call
            line.close()
            self._hand_back([(index, answer)])

    def _end(self, round_: Round, first: tuple[int, Answer]) -> list[tuple[int, Answer]]:
        """After the ``first`` answer: unblock the other calls and take their answers (all of
        them, with the first), waiting at most ``UNBLOCK_PATIENCE_S`` (a call left then ends by
        itself, its line given up). A first answer that is the timeout's lets the others reach
        theirs (``TIMEOUT_GRACE_S``) before any is unblocked: an idle park sends only BLPOPs."""
        answers = [first]
        if first[1] is None:
            take(round_, answers, TIMEOUT_GRACE_S)
        if len(answers) < len(round_.lines):
            self._unblock_all(round_)
            take(round_, answers, UNBLOCK_PATIENCE_S)
        round_.close()
        with suppress(Empty):
            while True:
                answers.append(round_.answers.get_nowait())
        self._forget_unanswered(round_, answers)
        return answers

    def _unblock_all(self, round_: Round) -> None:
        """CLIENT UNBLOCK every call still blocked, on its node; where that is denied, or the
        call does not reach its server within the patience, a wake token on its group."""
        deadline = time.monotonic() + UNBLOCK_PATIENCE_S
        waiting = list(zip(round_.lines, round_.groups, strict=True))
        while waiting:
            still = []
            for line, group in waiting:
                if not line.blocked:
                    continue
                unblocked = self._unblock(line, group)
                if unblocked is None or (not unblocked and time.monotonic() > deadline):
                    self._wake(group.wake_key)
                elif not unblocked:
                    still.append((line, group))
            waiting = still
            if waiting:
                time.sleep(0.002)  # the BLPOP is on its way to the server

    def _unblock(self, line: Line, group: ParkGroup) -> bool | None:
        """CLIENT UNBLOCK ``line`` on its node: whether it was blocked; None if denied."""
        try:
            return bool(node_client(self._conn, group.node).client_unblock(line.client_id))
        except twins(redis.ResponseError):
            return None
        except twins(redis.RedisError):
            return False

    def _forget_unanswered(self, round_: Round, answers: list[tuple[int, Answer]]) -> None:
        """A call that gave no answer keeps its line until it ends: the next park opens
        another."""
        answered = {index for index, _ in answers}
        for index, line in enumerate(round_.lines):
            if index not in answered:
                self._discard(line)

    def _drop_failed(self, round_: Round, answers: list[tuple[int, Answer]]) -> None:
        """The line of a call that failed is closed (its node may have gone or moved)."""
        for index, answer in answers:
            if isinstance(answer, BaseException):
                self._discard(round_.lines[index])
                round_.lines[index].close()

    def _discard(self, line: Line) -> None:
        for key, kept in list(self._lines.items()):
            if kept is line:
                del self._lines[key]

    def _hand_back(self, answers: Sequence[tuple[int, Answer]]) -> None:
        """Push the tokens popped back where they came from (a stopping consumer, or a call
        that returned after its park)."""
        for _, answer in answers:
            if isinstance(answer, tuple):
                with suppress(Exception):
                    self._push(*answer)
