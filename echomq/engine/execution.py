"""Running a transition, written once for both clients: the programs (``echomq.engine.program``)
of ``Executor.call`` and ``call_many`` — a refused transition raised before anything is sent,
a script reloaded on ``NOSCRIPT`` and sent again, the batch in one flush, server errors mapped
to echomq's — and the two wires, scripts (``Wire.SCRIPTS``, 5) and native (``Wire.NATIVE``, 6).
``echomq.engine.executors`` and ``echomq.engine.async_executors`` are their blocking and asyncio
shells, which only send.
"""

from __future__ import annotations

import logging
import threading
from abc import ABC, abstractmethod
from collections.abc import Callable, Mapping, Sequence
from typing import Any, TypeVar

from redis.exceptions import ExecAbortError, NoScriptError, ResponseError

from echomq.engine.calls import Arg, Call
from echomq.engine.clients import is_cluster, twins
from echomq.engine.cluster_once import script_nodes
from echomq.engine.errors import EchoMQError, Wire6Unsupported, mapped_error, native_refusal
from echomq.engine.once import lost_reply
from echomq.engine.program import Atomic, Flush, Invoke, Program, Send, Step, method, op
from echomq.engine.scripts import script_for
from echomq.engine.transitions import Transition
from echomq.engine.wire import Wire, wire_of

E = TypeVar("E")
log = logging.getLogger("echomq")


def raise_mapped(exc: BaseException) -> None:
    """Re-raise a server error as the echomq error its code names, if it is one of ours; an
    ``EMQ.*`` command the server does not know means trafikey is missing there."""
    mapped = mapped_error(exc)
    if mapped is not None:
        raise mapped from exc
    raise exc


def of_wire(executors: Mapping[int, E], wire: int | str, auto: Callable[[], E]) -> E:
    """The executor of ``wire`` (5: scripts, 6: native, among ``executors``; ``auto``: a new
    one of its own, made by ``auto``); ValueError for another wire."""
    chosen = wire_of(wire)
    return auto() if chosen is Wire.AUTO else executors[chosen]


class ExecutorMethods(ABC):
    """Runs transitions on a client of either library (``Redis``, ``RedisCluster``, their
    asyncio twins) or its pipeline; a wire says how (``ScriptWire``, ``NativeWire``)."""

    wire: Wire

    @property
    def wire_in_use(self) -> Wire:
        """The wire its transitions go on: its own (``AutoWire``: the one it chose)."""
        return self.wire

    @abstractmethod
    def command(self, transition: Transition, keys: Sequence[str],
                args: Sequence[Arg]) -> tuple[Any, ...]:
        """The command that runs ``transition`` on this wire."""

    @abstractmethod
    def refuse(self, transition: Transition) -> None:
        """Raises if this wire cannot run ``transition``, before anything is sent."""

    @abstractmethod
    def reload(self, client: Any, transition: Transition) -> Program[None] | None:
        """The program that makes ``transition`` runnable again on a server that refused it
        with NOSCRIPT; None when nothing can (the refusal then stands)."""

    @abstractmethod
    def ran(self, transition: Transition, reply: Any) -> bool:
        """Whether ``reply`` (a reply, or the error in its place) is the server's answer to
        ``transition``; False when this wire's command could not run there at all (NOSCRIPT;
        on auto, an ``EMQ.*`` command unknown to the server or denied by its ACL), so nothing
        ran: made runnable (``reload``), it is sent again."""

    @op
    def call(self, client: Any, transition: Transition, keys: Sequence[str],
             args: Sequence[Arg]) -> Program[Any]:
        self.refuse(transition)
        try:
            try:
                reply = yield Send(client, self.command(transition, keys, args))
            except twins(ResponseError) as exc:
                reload = None if self.ran(transition, exc) else self.reload(client, transition)
                if reload is None:
                    raise
                yield from reload
                reply = yield Send(client, self.command(transition, keys, args))
        except twins(ResponseError) as exc:
            raise_mapped(exc)
        self.ran(transition, reply)
        return reply

    @op
    def call_many(self, client: Any, calls: Sequence[Call],
                  then: Sequence[tuple[Any, ...]] = ()) -> Program[list[Any]]:
        """Runs many calls in one pipeline flush; a reply each. Every transition is prepared (and
        a refused one raises) before anything is sent. Calls refused with NOSCRIPT (a server that
        lost its scripts) have their scripts loaded once and are sent again in one more flush.
        ``then``: plain commands sent after the calls in every flush (their replies dropped)."""
        replies = yield from self._replies(client, calls, then)
        settled = []
        for call, reply in zip(calls, replies, strict=True):
            settled.append((yield from ExecutorMethods._settle.program(self, client, call, reply)))
        return settled

    @op
    def call_each(self, client: Any, calls: Sequence[Call]) -> Program[list[Any]]:
        """``call_many``, but a call the server refused has its error (echomq's, or the
        server's) as its reply, not raised, so the caller learns which calls ran: a reply or
        an error each, in order. Any other failure (a connection lost) is raised."""
        replies = yield from self._replies(client, calls)
        settled: list[Any] = []
        refused: tuple[type[BaseException], ...] = (*twins(ResponseError), EchoMQError)
        for call, reply in zip(calls, replies, strict=True):
            try:
                settled.append((yield from ExecutorMethods._settle.program(self, client, call,
                                                                           reply)))
            except refused as exc:
                settled.append(exc)
        return settled

    def _replies(self, client: Any, calls: Sequence[Call],
                 then: Sequence[tuple[Any, ...]] = ()) -> Program[list[Any]]:
        """The replies to ``calls`` sent in one flush (server errors as replies), those refused
        with NOSCRIPT sent again in one more once their scripts are loaded."""
        for transition in {call[0] for call in calls}:
            self.refuse(transition)
        replies = yield from self._flush(client, calls, then)
        lost = [n for n, reply in enumerate(replies) if not self.ran(calls[n][0], reply)]
        if lost:
            for transition in {calls[n][0] for n in lost}:
                yield from ExecutorMethods.load.program(self, client, transition)
            again = yield from self._flush(client, [calls[n] for n in lost], then)
            for n, reply in zip(lost, again, strict=True):
                replies[n] = reply
        return replies

    @op
    def call_atomic(self, client: Any, calls: Sequence[Call]) -> Program[list[Any]]:
        """Runs ``calls`` as one transaction (``MULTI``/``EXEC``: nothing else runs between
        them); a reply each. A script the server lost (NOSCRIPT: a restart, ``SCRIPT FLUSH``)
        fails only its own call inside the transaction, so its script is loaded and the whole
        transaction sent again: callers send only calls whose second run changes nothing the
        first did (admissions answer DUPLICATE), and take each call's first good reply."""
        for transition in {call[0] for call in calls}:
            self.refuse(transition)
        replies: list[Any] = list((yield Atomic(client, [self.command(*call) for call in calls])))
        ran = [self.ran(call[0], reply) for call, reply in zip(calls, replies, strict=True)]
        lost = {call[0] for call, done in zip(calls, ran, strict=True) if not done}
        if lost:
            for transition in lost:
                yield from ExecutorMethods.load.program(self, client, transition)
            again = yield Atomic(client, [self.command(*call) for call in calls])
            # EXECABORT: a command refused as it was queued (an unknown EMQ.* command) kept the
            # whole transaction from running
            replies = [first if done and not isinstance(first, twins(ExecAbortError)) else fresh
                       for first, done, fresh in zip(replies, ran, again, strict=True)]
        settled = []
        for call, reply in zip(calls, replies, strict=True):
            settled.append((yield from ExecutorMethods._settle.program(self, client, call, reply)))
        return settled

    def _flush(self, client: Any, calls: Sequence[Call],
               then: Sequence[tuple[Any, ...]] = ()) -> Program[list[Any]]:
        commands = [self.command(*call) for call in calls]
        replies: list[Any] = (yield Flush(client, [*commands, *then]))[:len(calls)]
        return replies

    @op
    def _settle(self, client: Any, call: Call, reply: Any) -> Program[Any]:
        if not self.ran(call[0], reply):
            # The server lost its scripts mid-flush (restart, SCRIPT FLUSH), or has no trafikey
            # (wire auto): run this one again.
            return (yield from ExecutorMethods.call.program(self, client, *call))
        if isinstance(reply, twins(ResponseError)):
            raise_mapped(reply)
        if isinstance(reply, Exception):  # a connection or cluster error in place of a reply
            raise reply
        return reply

    @op
    def prepare(self, client: Any, transition: Transition) -> Program[None]:
        """Refuses ``transition`` before a pipeline is built if this wire cannot run it."""
        self.refuse(transition)
        yield from ()

    @op
    def load(self, client: Any, transition: Transition) -> Program[None]:
        """Makes ``transition`` runnable again on a server that refused it with NOSCRIPT."""
        reload = self.reload(client, transition)
        if reload is not None:
            yield from reload


class ScriptWire(ExecutorMethods):
    """wire=5: ``EVALSHA`` of the transition's Lua script, loaded again on ``NOSCRIPT``."""

    wire = Wire.SCRIPTS

    def command(self, transition: Transition, keys: Sequence[str],
                args: Sequence[Arg]) -> tuple[Any, ...]:
        # EVALSHA as a command: a RedisCluster pipeline refuses .evalsha(), not EVALSHA itself
        return ("EVALSHA", script_for(transition).sha, len(keys), *keys, *args)

    def refuse(self, transition: Transition) -> None:
        """Nothing: a batch is sent as EVALSHA, and only a NOSCRIPT reply loads the script."""

    def ran(self, transition: Transition, reply: Any) -> bool:
        return not isinstance(reply, twins(NoScriptError))

    def reload(self, client: Any, transition: Transition) -> Program[None] | None:
        """``SCRIPT LOAD``; on a cluster, on each node that serves a slot (``script_nodes``),
        one by one, so that a node that is down (a failover under way) is passed over: the
        others run the transition, and a node that had no copy then refuses with NOSCRIPT
        again, which loads it there. Raised: what failed on every node."""
        source = script_for(transition).source
        if not is_cluster(client):
            return _one(Invoke(client, method("script_load", source)))
        return _load_on_each(client, source)


class NativeWire(ExecutorMethods):
    """wire=6: the trafikey module's ``EMQ.*`` command; script-only transitions are refused."""

    wire = Wire.NATIVE

    def command(self, transition: Transition, keys: Sequence[str],
                args: Sequence[Arg]) -> tuple[Any, ...]:
        return (transition.native, len(keys), *keys, *args)

    def refuse(self, transition: Transition) -> None:
        if transition.native is None:
            raise Wire6Unsupported(transition.name)

    def reload(self, client: Any, transition: Transition) -> Program[None] | None:
        """None: a module's commands are never lost as scripts are."""
        return None

    def ran(self, transition: Transition, reply: Any) -> bool:
        return True


_SCRIPT_WIRE = ScriptWire()
_NATIVE_WIRE = NativeWire()


class AutoWire(ExecutorMethods):
    """wire="auto": each transition as its native command (``NativeWire``) while the server
    runs them, as its script (``ScriptWire``) where it has no native twin (lanes), and every
    one as its script once a native command is refused as such — unknown to the server (no
    trafikey there, or on the node of the queue's slot) or not permitted to the caller's ACL
    user — for good: nothing ran, so that call is sent again as its script. So detection costs
    no command where trafikey is loaded (the first native reply decides) and one refused
    command where it is not; it asks nothing (``MODULE LIST``, ``COMMAND INFO``) that an ACL
    may deny, and it reads the very node a call goes to. Both wires give byte-identical
    replies, so calls on one queue may go either way. One a queue (its shards share it):
    ``chosen`` is None until the first reply decides; the choice is logged once (logger
    ``echomq``, INFO)."""

    wire = Wire.AUTO

    def __init__(self, queue: str = "") -> None:
        self.queue = queue
        self.chosen: Wire | None = None
        self._lock = threading.Lock()

    @property
    def wire_in_use(self) -> Wire:
        """``NATIVE`` once the server ran a native command, ``SCRIPTS`` once it refused one
        (lanes run their scripts either way), ``AUTO`` before a reply decided."""
        return Wire.AUTO if self.chosen is None else self.chosen

    def command(self, transition: Transition, keys: Sequence[str],
                args: Sequence[Arg]) -> tuple[Any, ...]:
        return self._wire_of(transition).command(transition, keys, args)

    def refuse(self, transition: Transition) -> None:
        """Nothing: a transition with no native twin runs its script."""

    def reload(self, client: Any, transition: Transition) -> Program[None] | None:
        """The script's ``SCRIPT LOAD``: a refused native command is sent again as its script."""
        return _SCRIPT_WIRE.reload(client, transition)

    def ran(self, transition: Transition, reply: Any) -> bool:
        if isinstance(reply, twins(NoScriptError)):
            return False
        if transition.native is None:
            return True
        refusal = native_refusal(reply) if isinstance(reply, twins(ResponseError)) else None
        if refusal is not None:
            self._choose(Wire.SCRIPTS, refusal)
            return False
        if not isinstance(reply, BaseException) and self.chosen is None:
            self._choose(Wire.NATIVE, f"the server ran {transition.native}")
        return True

    def _wire_of(self, transition: Transition) -> ExecutorMethods:
        if transition.native is None or self.chosen is Wire.SCRIPTS:
            return _SCRIPT_WIRE
        return _NATIVE_WIRE

    def _choose(self, wire: Wire, why: str) -> None:
        """Take ``wire`` (native while undecided; scripts at any time, for good) and say why."""
        with self._lock:
            was = self.chosen
            if was is wire or was is Wire.SCRIPTS:
                return
            self.chosen = wire
        if wire is Wire.NATIVE:
            log.info("queue %s: wire auto runs each transition as its native EMQ.* command "
                     "(%s; lanes run their scripts)", self.queue, why)
        else:
            (log.warning if was is Wire.NATIVE else log.info)(
                "queue %s: wire auto runs each transition as its Lua script (%s)",
                self.queue, why)


def _one(step: Step) -> Program[None]:
    """A program of one ``step`` whose reply is dropped."""
    yield step


def _load_on_each(client: Any, source: bytes) -> Program[None]:
    """``SCRIPT LOAD source`` on each of the cluster ``client``'s slot-serving nodes; a node
    whose connection fails is passed over, unless every one failed."""
    failed: BaseException | None = None
    loaded = False
    for node in script_nodes(client):
        try:
            yield Invoke(client, method("execute_command", "SCRIPT LOAD", source,
                                        target_nodes=node))
            loaded = True
        except lost_reply() as exc:  # the node down or out of reach, not the script refused
            failed = exc
    if not loaded and failed is not None:
        raise failed
