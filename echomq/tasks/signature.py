"""A task's parameters and their type hints: arguments checked at enqueue, and converted when
the worker decodes them, by one rule — ``msgspec.convert`` of what the payload carries to each
parameter's hint.

The worker converts each decoded value (``convert``: a ``datetime`` from its JSON string, a
Struct or dataclass from its map, and so on); a value that cannot fit there (a job another
producer wrote) raises ArgumentsRejected naming the parameter. The producer checks the caller's
values as the payload will carry them (``check``, on ``carried`` values: a ``Decimal`` arrives
as its text, a NaN in JSON as null), so it refuses exactly what the worker would: a call whose
arity or names do not fit, or a value that cannot be converted to its parameter's hint
(``"two"`` for an ``int``, a ``Decimal`` for an ``int`` or a ``float``), is a TypeError naming
the parameter, the hint and the type passed, before anything is sent. A call of plain
positional arguments is checked, and converted, in one msgspec call.
"""

from __future__ import annotations

import datetime
import inspect
import typing
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any

import msgspec

from echomq.tasks.envelope import Serializer, carried

# Values a MessagePack decode already gives as their own types; convert passes them through.
MSGPACK_NATIVE = (bytes, bytearray, datetime.datetime)
NO_HINT = inspect.Parameter.empty
# Iterable values told by their type alone when they do not fit.
TEXT = (str, bytes, bytearray, memoryview)


class ArgumentsRejected(ValueError):
    """Arguments that do not fit a task's signature: the job goes dead without retries."""


class Misfit(Exception):
    """The argument ``name`` (``value``) cannot be converted to its parameter's ``hint``."""

    def __init__(self, name: str, value: Any, hint: Any, error: msgspec.ValidationError) -> None:
        super().__init__(name)
        self.name, self.value, self.hint, self.error = name, value, hint, error

    def caller_text(self, task: str, given: Any, serializer: Serializer) -> str:
        """The misfit of the value ``given`` (``self.value`` is what ``serializer`` carries of
        it) told to the caller: the parameter, its hint and the type given; for a collection,
        msgspec's words too, which say where in it; for a value that would fit as it was
        given, what the payload makes of it."""
        detail = ""
        if isinstance(given, Iterable) and not isinstance(given, TEXT):
            detail = f" ({self.error})"
        elif _fits(given, self.hint, builtin_types(serializer == "json")):
            detail = f" ({serializer} carries it as {_type_name(self.value)})"
        return (f"{task}: argument {self.name!r} must be {hint_text(self.hint)}, not "
                f"{type(given).__name__}{detail}")


def _fits(value: Any, hint: Any, builtin: tuple[type, ...]) -> bool:
    try:
        msgspec.convert(value, hint, builtin_types=builtin)
    except msgspec.ValidationError:
        return False
    return True


def _type_name(value: Any) -> str:
    return "null" if value is None else type(value).__name__


def hint_text(hint: Any) -> str:
    """A type hint as it is written: ``int``, ``list[int]``, ``int | None``, ``Point``."""
    if isinstance(hint, type) and not typing.get_args(hint):
        return hint.__qualname__
    return repr(hint).replace("typing.", "")


def builtin_types(from_json: bool) -> tuple[type, ...]:
    """The types msgspec takes as they are, not from strings: those a MessagePack decode gives
    natively; none for JSON."""
    return () if from_json else MSGPACK_NATIVE


class Signature:
    """The parameters of ``function`` with their resolved type hints (Any when unannotated);
    ``name`` (default the function's qualified name) is what its errors call it."""

    def __init__(self, function: Callable[..., Any], name: str | None = None) -> None:
        self.name = name if name else str(getattr(function, "__qualname__", repr(function)))
        self.signature = inspect.signature(function)
        hints = typing.get_type_hints(function)
        self.hints = {name: hints.get(name, Any) for name in self.signature.parameters}
        self.returns: Any = hints.get("return", Any)
        self._checks = any(hint is not Any for hint in self.hints.values())
        self._positional = self._positional_types()

    def _positional_types(self) -> dict[int, Any]:
        """For a signature of plain parameters only (no ``*args``, ``**kwargs`` or keyword-only
        ones): the tuple type of each count of positional arguments it takes, so a call made
        with positional arguments only is checked and converted in one msgspec call."""
        parameters = list(self.signature.parameters.values())
        plain = (inspect.Parameter.POSITIONAL_ONLY, inspect.Parameter.POSITIONAL_OR_KEYWORD)
        if any(parameter.kind not in plain for parameter in parameters):
            return {}
        required = sum(parameter.default is NO_HINT for parameter in parameters)
        hints = [self.hints[parameter.name] for parameter in parameters]
        return {count: tuple[tuple(hints[:count])] if count else tuple[()]  # type: ignore[misc]
                for count in range(required, len(parameters) + 1)}

    def bind(self, args: Sequence[Any], kwargs: Mapping[str, Any]) -> None:
        """TypeError when the call does not fit the signature's arity and names."""
        if kwargs or len(args) not in self._positional:
            self.signature.bind(*args, **kwargs)

    def check(self, args: Sequence[Any], kwargs: Mapping[str, Any], *, from_json: bool) -> None:
        """TypeError when the call does not fit: its arity and names (``bind``), or a value
        that the worker could not convert to its parameter's hint: each is converted as the
        payload carries it, by the rules the worker converts with (``from_json``: the call is
        sent as JSON, whose strings the worker parses into dates, bytes and the like); or a
        value the serializer cannot carry at all."""
        if not self._checks:
            self.bind(args, kwargs)
            return
        serializer: Serializer = "json" if from_json else "msgpack"
        try:
            sent_args, sent_kwargs = carried([args, kwargs], serializer)
        except TypeError:  # a value that does not fit its hint is named first
            self._refuse_misfits(args, kwargs, (args, kwargs), serializer)
            raise
        self._refuse_misfits(sent_args, sent_kwargs, (args, kwargs), serializer)

    def _refuse_misfits(self, args: Sequence[Any], kwargs: Mapping[str, Any],
                        given: tuple[Sequence[Any], Mapping[str, Any]],
                        serializer: Serializer) -> None:
        """TypeError naming the first of ``args`` and ``kwargs`` that does not fit its hint by
        the type of its value in the call as ``given``."""
        try:
            self._converted(args, kwargs, builtin_types(serializer == "json"))
        except Misfit as misfit:
            value = self.signature.bind(*given[0], **given[1]).arguments[misfit.name]
            raise TypeError(misfit.caller_text(self.name, value, serializer)) from None

    def convert(self, args: Sequence[Any], kwargs: Mapping[str, Any], *,
                from_json: bool) -> tuple[list[Any], dict[str, Any]]:
        """The decoded ``args`` and ``kwargs``, each converted to its parameter's hint;
        ArgumentsRejected, naming the parameter, for a missing, extra or ill-typed one."""
        try:
            return self._converted(args, kwargs, builtin_types(from_json))
        except TypeError as exc:
            raise ArgumentsRejected(f"{self.name}: {exc}") from None
        except Misfit as misfit:
            raise ArgumentsRejected(f"{self.name}: argument {misfit.name!r}: {misfit.error}"
                                    ) from None

    def _converted(self, args: Sequence[Any], kwargs: Mapping[str, Any],
                   builtin: tuple[type, ...]) -> tuple[list[Any], dict[str, Any]]:
        """``args`` and ``kwargs`` converted to the hints: TypeError when they do not bind,
        Misfit naming the first that cannot be converted."""
        positional = None if kwargs else self._positional.get(len(args))
        if positional is not None:
            try:
                return list(msgspec.convert(args, positional, builtin_types=builtin)), {}
            except msgspec.ValidationError:
                pass  # the way below names the parameter
        bound = self.signature.bind(*args, **kwargs)
        if self._checks:
            for name, value in bound.arguments.items():
                bound.arguments[name] = self._converted_one(name, value, builtin)
        return list(bound.args), dict(bound.kwargs)

    def _converted_one(self, name: str, value: Any, builtin: tuple[type, ...]) -> Any:
        hint = self.hints[name]
        if hint is Any:
            return value
        kind = self.signature.parameters[name].kind
        if kind is inspect.Parameter.VAR_POSITIONAL:
            hint = tuple[hint, ...]  # type: ignore[valid-type]
        elif kind is inspect.Parameter.VAR_KEYWORD:
            hint = dict[str, hint]  # type: ignore[valid-type]
        try:
            return msgspec.convert(value, hint, builtin_types=builtin)
        except msgspec.ValidationError as exc:
            raise Misfit(name, value, hint, exc) from None

    def converted_result(self, value: Any, *, from_json: bool) -> Any:
        """A kept result decoded to the task's return hint (as it was, when there is none)."""
        if self.returns is Any or self.returns is type(None):
            return value
        return msgspec.convert(value, self.returns, builtin_types=builtin_types(from_json))
