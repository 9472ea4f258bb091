"""A task's parameters and their type hints: arguments checked by arity at enqueue, and by type
when the worker decodes them.

The producer only binds the call to the signature (a wrong arity is a TypeError before anything
is sent); it does not convert values, which costs time on the path every job takes. The worker
converts each decoded value to its parameter's annotation with ``msgspec.convert`` (a
``datetime`` from its JSON string, a Struct or dataclass from its map, and so on); a value that
cannot fit raises ArgumentsRejected naming the parameter.
"""

from __future__ import annotations

import datetime
import inspect
import typing
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import msgspec

# Values a MessagePack decode already gives as their own types; convert passes them through.
MSGPACK_NATIVE = (bytes, bytearray, datetime.datetime)
NO_HINT = inspect.Parameter.empty


class ArgumentsRejected(ValueError):
    """Arguments that do not fit a task's signature: the job goes dead without retries."""


class Signature:
    """The parameters of ``function`` with their resolved type hints (Any when unannotated)."""

    def __init__(self, function: Callable[..., Any]) -> None:
        self.name = getattr(function, "__qualname__", repr(function))
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

    def convert(self, args: Sequence[Any], kwargs: Mapping[str, Any], *,
                from_json: bool) -> tuple[list[Any], dict[str, Any]]:
        """The decoded ``args`` and ``kwargs``, each converted to its parameter's hint;
        ArgumentsRejected, naming the parameter, for a missing, extra or ill-typed one."""
        builtin = () if from_json else MSGPACK_NATIVE
        positional = None if kwargs else self._positional.get(len(args))
        if positional is not None:
            try:
                return list(msgspec.convert(args, positional, builtin_types=builtin)), {}
            except msgspec.ValidationError:
                pass  # the way below names the parameter
        try:
            bound = self.signature.bind(*args, **kwargs)
        except TypeError as exc:
            raise ArgumentsRejected(f"{self.name}: {exc}") from None
        if self._checks:
            for name, value in bound.arguments.items():
                bound.arguments[name] = self._converted(name, value, builtin)
        return list(bound.args), dict(bound.kwargs)

    def _converted(self, name: str, value: Any, builtin: tuple[type, ...]) -> Any:
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
            raise ArgumentsRejected(f"{self.name}: argument {name!r}: {exc}") from None

    def converted_result(self, value: Any, *, from_json: bool) -> Any:
        """A kept result decoded to the task's return hint (as it was, when there is none)."""
        if self.returns is Any or self.returns is type(None):
            return value
        builtin = () if from_json else MSGPACK_NATIVE
        return msgspec.convert(value, self.returns, builtin_types=builtin)
