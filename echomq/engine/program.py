"""Methods written once for both clients: each is a program that yields the steps it needs sent
and receives their replies; a blocking shell drives it to the end (``drive``), an asyncio shell
awaits each step (``adrive``).

A program is a generator: it yields a step — ``Send`` (one command sent once, a transition),
``Flush`` (commands sent together once), ``Atomic`` (commands sent as one transaction),
``Scatter`` (commands sent once each to a cluster's nodes, one round for them all),
``Invoke`` (a method of the client's own: a read, a
blocking pop, ``SCRIPT LOAD``) or ``Reads`` (a pipeline of such methods) — and is sent the
step's reply, or has the step's error thrown into it at the ``yield``, so it handles errors as
straight-line code does. What it returns is the method's reply. A step names the client it goes
to; performing it is the only I/O, and is here alone.

``op`` makes a method of a program: on a class that is a ``BlockingShell`` the method returns the
program's reply, on an ``AsyncShell`` it is a coroutine function awaiting it, with the same
name, parameters and docstring. Type checkers see both (``Op.__get__``).
"""

from __future__ import annotations

import functools
import inspect
import threading
from collections.abc import Callable, Coroutine, Generator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Concatenate, Generic, ParamSpec, Self, TypeVar, cast, overload

from echomq.engine.once import (
    Sent,
    async_flush_once,
    async_send_once,
    flush_once,
    send_once,
    sends_ahead,
)
from echomq.engine.scatter import async_scatter, scatter
from echomq.engine.transact import async_transact_once, transact_once

P = ParamSpec("P")
R = TypeVar("R")
S = TypeVar("S")
Command = Sequence[Any]


@dataclass(frozen=True, slots=True)
class Method:
    """A client method by name with its arguments: ``client.<name>(*args, **kwargs)``."""

    name: str
    args: tuple[Any, ...] = ()
    kwargs: Mapping[str, Any] = field(default_factory=dict)

    def on(self, client: Any) -> Any:
        return getattr(client, self.name)(*self.args, **self.kwargs)


def method(name: str, *args: Any, **kwargs: Any) -> Method:
    return Method(name, args, kwargs)


@dataclass(frozen=True, slots=True)
class Send:
    """``command`` sent once on ``client`` (``echomq.engine.once``): its reply, or its error."""

    client: Any
    command: Command

    def perform(self, aio: bool) -> Any:
        return (async_send_once if aio else send_once)(self.client, *self.command)


@dataclass(frozen=True, slots=True)
class Flush:
    """``commands`` sent together once: a reply each, a server error as a reply (not raised)."""

    client: Any
    commands: Sequence[Command]

    def perform(self, aio: bool) -> Any:
        return (async_flush_once if aio else flush_once)(self.client, self.commands)


@dataclass(frozen=True, slots=True)
class Invoke:
    """A method of ``client`` (the client library's own call, with its retry policy)."""

    client: Any
    method: Method

    def perform(self, aio: bool) -> Any:
        return self.method.on(self.client)  # an awaitable on an asyncio client


@dataclass(frozen=True, slots=True)
class Reads:
    """``methods`` queued on one pipeline of ``client`` (no transaction): a reply each; with
    ``raise_on_error`` False, a server error is a reply."""

    client: Any
    methods: Sequence[Method]
    raise_on_error: bool = True

    def perform(self, aio: bool) -> Any:
        return self._async_read() if aio else self._read()

    def _read(self) -> Any:
        with self.client.pipeline(transaction=False) as pipe:
            return self._execute(pipe)

    async def _async_read(self) -> Any:
        async with self.client.pipeline(transaction=False) as pipe:
            return await self._execute(pipe)

    def _execute(self, pipe: Any) -> Any:
        for queued in self.methods:
            queued.on(pipe)
        return pipe.execute() if self.raise_on_error else pipe.execute(raise_on_error=False)


@dataclass(frozen=True, slots=True)
class Atomic:
    """``commands`` sent once as one transaction (``MULTI`` … ``EXEC``): every one runs and
    nothing else runs between them (``echomq.engine.transact``); a reply each, a server error as
    a reply (not raised)."""

    client: Any
    commands: Sequence[Command]

    def perform(self, aio: bool) -> Any:
        return (async_transact_once if aio else transact_once)(self.client, self.commands)


@dataclass(frozen=True, slots=True)
class Scatter:
    """``commands`` sent once each through the cluster ``client`` in one round: grouped by
    node, every group written before any reply is read (``echomq.engine.scatter``); a reply
    each, a server error or a node's failed connection as a reply (not raised)."""

    client: Any
    commands: Sequence[Command]

    def perform(self, aio: bool) -> Any:
        return (async_scatter if aio else scatter)(self.client, self.commands)


Step = Send | Flush | Invoke | Reads | Atomic | Scatter
Program = Generator[Step, Any, R]


class Turns(Generic[R]):
    """A program taken step by step: iterating gives the next step to perform, ``answer`` (or
    ``async_answer``) performs it and keeps its reply or error for the program, ``result`` is
    what the program returned."""

    _result: R

    def __init__(self, program: Program[R]) -> None:
        self._program = program
        self._reply: Any = None
        self._error: BaseException | None = None

    def __iter__(self) -> Self:
        return self

    def __next__(self) -> Step:
        error, self._error = self._error, None
        try:
            if error is not None:
                return self._program.throw(error)
            return self._program.send(self._reply)
        except StopIteration as stop:
            self._result = stop.value
            raise StopIteration from None

    def answer(self, step: Step) -> None:
        try:
            self._reply = step.perform(False)
        except BaseException as exc:  # the program decides: it is thrown in at its ``yield``
            self._error = exc

    def replied(self, reply: Any) -> None:
        """The reply of the step last given, performed elsewhere."""
        self._reply = reply

    def failed(self, error: BaseException) -> None:
        """The step last given raised ``error`` (thrown into the program at its ``yield``)."""
        self._error = error

    async def async_answer(self, step: Step) -> None:
        try:
            self._reply = await step.perform(True)
        except BaseException as exc:
            self._error = exc

    @property
    def result(self) -> R:
        return self._result


def preceded(program: Program[R], first: Callable[[], Program[Any]]) -> Program[R]:
    """``program`` with ``first()``'s steps performed just before its own first step: after
    what it checks before sending anything (bad input raises as it would alone, nothing
    sent), before anything it sends. A program that sends nothing runs alone."""
    try:
        step = next(program)
    except StopIteration as stop:
        return cast(R, stop.value)
    yield from first()
    while True:  # ``yield from program``, the program being already at its first step
        try:
            reply = yield step
        except BaseException as exc:
            try:
                step = program.throw(exc)
            except StopIteration as stop:
                return cast(R, stop.value)
        else:
            try:
                step = program.send(reply)
            except StopIteration as stop:
                return cast(R, stop.value)


def drive(program: Program[R]) -> R:
    """What ``program`` returns, its steps performed on blocking clients."""
    turns = Turns(program)
    for step in turns:
        turns.answer(step)
    return turns.result


async def adrive(program: Program[R]) -> R:
    """What ``program`` returns, its steps awaited on asyncio clients."""
    turns = Turns(program)
    for step in turns:
        await turns.async_answer(step)
    return turns.result


class Ahead(Generic[R]):
    """A program driven on blocking clients whose first step is sent now and whose reply is
    read by ``result``, so what the caller does meanwhile overlaps that round trip. A first
    step that cannot be split (a cluster, a client of one connection, a step that is not a
    ``Send`` or ``Flush``) is performed whole now; the steps after the first (a script loaded
    again, a second flush) are performed by ``result``, once: a later call, from any thread,
    gives the same return or raises the same error."""

    def __init__(self, program: Program[R]) -> None:
        self._lock = threading.Lock()
        self._outcome: tuple[bool, Any] | None = None
        self._turns = Turns(program)
        self._step: Step | None = next(self._turns, None)
        self._sent: Sent | None = None
        step = self._step
        if step is None:
            return
        if isinstance(step, Send | Flush) and sends_ahead(step.client):
            commands = [step.command] if isinstance(step, Send) else list(step.commands)
            if commands:
                try:
                    self._sent = Sent(step.client, commands, isinstance(step, Flush))
                except BaseException as exc:
                    self._turns.failed(exc)
                    self._step = None
                return
        self._turns.answer(step)
        self._step = None

    def result(self) -> R:
        """What the program returns: the first step's reply read, then the rest driven (the
        first call; the calls after it wait for it and answer as it did)."""
        with self._lock:
            if self._outcome is None:
                try:
                    self._outcome = (True, self._finish())
                except BaseException as exc:
                    self._outcome = (False, exc)
        returned, value = self._outcome
        if not returned:
            raise cast(BaseException, value)
        return cast(R, value)

    def _finish(self) -> R:
        sent, self._sent = self._sent, None
        if sent is not None:
            try:
                self._turns.replied(sent.reply())
            except BaseException as exc:
                self._turns.failed(exc)
        for step in self._turns:
            self._turns.answer(step)
        return self._turns.result

    def close(self) -> None:
        """Give up the reply (its connection closed), never reading it."""
        sent, self._sent = self._sent, None
        if sent is not None:
            sent.close()


class BlockingShell:
    """A class whose ops are plain methods: each drives its program to the end (``drive``)."""

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        for name, found in ops_of(cls).items():
            setattr(cls, name, found.blocking(cls))

    def _drive(self, program: Program[R]) -> R:
        return drive(program)


class AsyncShell:
    """A class whose ops are coroutine methods: each awaits its program's steps (``adrive``)."""

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        for name, found in ops_of(cls).items():
            setattr(cls, name, found.asyncio(cls))

    async def _adrive(self, program: Program[R]) -> R:
        return await adrive(program)


class Op(Generic[S, P, R]):
    """A method written once, as ``program``: see the module's docstring."""

    def __init__(self, program: Callable[Concatenate[S, P], Program[R]]) -> None:
        self.program = program

    @overload
    def __get__(self, obj: None, owner: type[Any]) -> Self: ...

    @overload
    def __get__(self, obj: BlockingShell, owner: type[Any]) -> Callable[P, R]: ...

    @overload
    def __get__(self, obj: AsyncShell,
                owner: type[Any]) -> Callable[P, Coroutine[Any, Any, R]]: ...

    def __get__(self, obj: Any, owner: type[Any]) -> Any:
        if obj is None:
            return self
        raise TypeError(f"{owner.__name__}.{self.program.__name__} is a program: a class that "
                        "runs it is a BlockingShell or an AsyncShell")

    def blocking(self, owner: type[BlockingShell]) -> Callable[..., Any]:
        program = self.program

        def blocking_method(shell: Any, *args: Any, **kwargs: Any) -> Any:
            return shell._drive(program(shell, *args, **kwargs))

        return self._dressed(blocking_method, owner)

    def asyncio(self, owner: type[AsyncShell]) -> Callable[..., Any]:
        program = self.program

        async def async_method(shell: Any, *args: Any, **kwargs: Any) -> Any:
            return await shell._adrive(program(shell, *args, **kwargs))

        return self._dressed(async_method, owner)

    def _dressed(self, made: Callable[..., Any], owner: type[Any]) -> Callable[..., Any]:
        """``made`` named, documented and signed as the program, replying what it returns."""
        functools.update_wrapper(made, self.program)
        made.__qualname__ = f"{owner.__qualname__}.{self.program.__name__}"
        signature = inspect.signature(self.program)
        returns = replied(signature.return_annotation)
        made.__signature__ = signature.replace(return_annotation=returns)  # type: ignore[attr-defined]
        made.__annotations__ = {**made.__annotations__, "return": returns}
        return made


def replied(annotation: Any) -> Any:
    """What a method replies, from its program's return annotation ``Program[X]``: ``X``."""
    if isinstance(annotation, str) and annotation.startswith("Program["):
        return annotation.removeprefix("Program[").removesuffix("]")
    return annotation


def op(program: Callable[Concatenate[S, P], Program[R]]) -> Op[S, P, R]:
    """The method of ``program`` (a decorator)."""
    return Op(program)


def ops_of(cls: type[Any]) -> dict[str, Op[Any, Any, Any]]:
    """The ops ``cls`` has that no class nearer it has made a method of (or overridden)."""
    found: dict[str, Op[Any, Any, Any]] = {}
    for klass in reversed(cls.__mro__):
        for name, value in vars(klass).items():
            if isinstance(value, Op):
                found[name] = value
            else:
                found.pop(name, None)
    return found
