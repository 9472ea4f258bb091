"""The exceptions echomq raises. A server's error reply is told by its code, the first word of
the reply (``error_reply``, the one place that reads an error's text), and each of echomq's codes
raises the class the error table of echomq.engine.transitions names for it."""

from __future__ import annotations

from dataclasses import dataclass

from echomq.engine.transitions import ERROR_CODES


class EchoMQError(Exception):
    """Base of every echomq error."""


class KindError(EchoMQError, ValueError):
    """A job id that fails the kind gate: ``JOB:<rest>``, rest 1-200 of ``[A-Za-z0-9._:-]``."""


class LaneError(EchoMQError, ValueError):
    """A lane (group) name that is not 1-200 bytes of ``[A-Za-z0-9._:-]``."""


class ArgumentError(EchoMQError, ValueError):
    """An argument the protocol refuses (a bad number, a bad key list, a wrong arity)."""


class ItemError(ArgumentError):
    """An element of a settle or extend_many list that is not of its documented shape."""


class StaleLease(EchoMQError):
    """An ack, retry or extend for a lease that is no longer the job's current one."""

    def __init__(self, job_id: str, attempt: int) -> None:
        super().__init__(f"lease of {job_id} at attempt {attempt} is not current")
        self.job_id = job_id
        self.attempt = attempt


class Wire6Unsupported(EchoMQError, NotImplementedError):
    """A transition that has no native twin, asked of a ``wire=6`` queue; nothing was sent."""

    def __init__(self, name: str) -> None:
        super().__init__(f"{name} has no native twin in trafikey; use wire=5")
        self.name = name


class FatalServerError(EchoMQError):
    """An error from the server that waiting will not heal (an unknown command, NOPERM, a key of
    the wrong type): ``Consumer.run()`` stops with it instead of retrying for ever."""


class TrafikeyMissing(FatalServerError):
    """A ``wire=6`` command the server does not know: trafikey is not loaded there. It cannot
    heal by retrying; the server needs the module (or the queue ``wire=5``)."""

    def __init__(self, command: str) -> None:
        self.reason = f"the server does not know {command}: the trafikey module is not loaded there"
        super().__init__(
            f"{self.reason}; start valkey-server with --loadmodule <path of trafikey.so> "
            "(echomq.engine.native.module_path()), or use wire=5")
        self.command = command


class FenceError(FatalServerError):
    """The queue's fence counter cannot number another lease: it holds a string that is not an
    integer from 0 to 999999999999998, or a batch would take it past 999999999999999."""


class LayoutError(FatalServerError):
    """A queue whose rows are recorded in a layout this release cannot read (its
    ``<base>layout`` names a later one): a worker leaves it alone rather than run jobs it
    would misread."""

    def __init__(self, queue: str, recorded: int, readable: int, *, running: bool = False) -> None:
        done = ("it claims no more of the queue's jobs" if running
                else "no job of the queue was claimed")
        super().__init__(
            f"queue {queue!r} records row layout {recorded}; this release reads layouts up to "
            f"{readable}: upgrade this worker ({done})")
        self.queue, self.recorded = queue, recorded


class EvictionPolicyWarning(UserWarning):
    """The server may evict keys (its maxmemory-policy is not ``noeviction``)."""


# The codes client libraries strip from the errors they have a class for (redis-py's parser), by
# the class's name (the same in valkey-py); redis-py 6 and later also keep it as ``status_code``.
# A plain ResponseError whose text starts with no code lost "ERR". redis-py 8.2 sets
# ``status_code`` on every error, also when it left the code in the text (WRONGTYPE, EMQ...).
_STRIPPED_CODES = {
    "BusyLoadingError": "LOADING", "NoScriptError": "NOSCRIPT", "ReadOnlyError": "READONLY",
    "NoPermissionError": "NOPERM", "OutOfMemoryError": "OOM", "ExecAbortError": "EXECABORT",
    "TryAgainError": "TRYAGAIN", "ClusterDownError": "CLUSTERDOWN", "MasterDownError": "MASTERDOWN",
    "ClusterCrossSlotError": "CROSSSLOT", "AskError": "ASK", "MovedError": "MOVED",
    "ModuleError": "ERR",
}


@dataclass(frozen=True)
class ErrorReply:
    """A server's error reply: its code (``EMQKIND``, ``WRONGTYPE``, ``ERR``, ``NOSCRIPT``...) and
    the text after it."""

    code: str
    text: str

    @property
    def line(self) -> str:
        """The reply as the server sent it, without the leading ``-``."""
        return f"{self.code} {self.text}" if self.text else self.code

    def unknown_command(self) -> str | None:
        """The command an ``ERR unknown command '<name>'...`` reply names, else None."""
        head = "unknown command '"
        if self.code != "ERR" or not self.text.lower().startswith(head):
            return None
        return self.text[len(head):].partition("'")[0]


def _is_code(word: str) -> bool:
    return word.isascii() and word.isupper() and word.isalnum()


def error_reply(exc: BaseException) -> ErrorReply:
    """The error reply behind a server error (of redis-py or valkey-py), however its library
    parsed it: the code it stripped (told by the exception's class or ``status_code``), or the
    first word of the text."""
    text = str(exc)
    word, _, rest = text.partition(" ")
    stripped = _stripped_code(exc)
    if stripped is not None and word != stripped:
        return ErrorReply(stripped, text)
    return ErrorReply(word, rest) if _is_code(word) else ErrorReply("ERR", text)


def _stripped_code(exc: BaseException) -> str | None:
    """The code the library names for an error (``status_code``, else told by its class); the
    text may still start with it (see ``_STRIPPED_CODES``)."""
    named = getattr(exc, "status_code", None)
    if isinstance(named, str):
        return named
    return next((_STRIPPED_CODES[kind.__name__] for kind in type(exc).__mro__
                 if kind.__name__ in _STRIPPED_CODES), None)


def reply_code(exc: BaseException) -> str:
    """The code of a server error's reply (see ``error_reply``)."""
    return error_reply(exc).code


def _class_named(name: str) -> type[EchoMQError]:
    kind = globals()[name]
    if not (isinstance(kind, type) and issubclass(kind, EchoMQError)):
        raise TypeError(f"the error table names {name}, which is not an echomq error")
    return kind


# The exception of each of echomq's codes, as the error table names it.
_CODES: dict[str, type[EchoMQError]] = {row.code: _class_named(row.exception)
                                        for row in ERROR_CODES if row.ours}


def exception_for(code: str) -> type[EchoMQError]:
    """The echomq exception class of one of echomq's codes (KeyError for another code)."""
    return _CODES[code]


def mapped_error(exc: BaseException) -> EchoMQError | None:
    """The echomq error a server error stands for: the class of its code, with the reply's text;
    TrafikeyMissing for an ``EMQ.*`` command the server does not know; None for any other."""
    reply = error_reply(exc)
    kind = _CODES.get(reply.code)
    if kind is not None:
        return kind(reply.line)
    command = reply.unknown_command()
    if command is not None and command.upper().startswith("EMQ."):
        return TrafikeyMissing(command)
    return None


def native_refusal(exc: BaseException) -> str | None:
    """Why a server refused an ``EMQ.*`` command before running it, when the reason is the
    command itself: the server does not know it (trafikey is not loaded there) or the caller's
    ACL user may not run it; None for any other error (one the command gave, or a key's)."""
    reply = error_reply(exc)
    command = reply.unknown_command()
    if command is not None and command.upper().startswith("EMQ."):
        return f"the server does not know {command.upper()}: trafikey is not loaded there"
    _, found, rest = reply.text.partition("permissions to run the '")
    denied = rest.partition("'")[0].upper()
    if reply.code == "NOPERM" and found and denied.startswith("EMQ."):
        return f"this ACL user may not run {denied}"
    return None


class TaskFailed(EchoMQError):
    """A task's job is dead: ``error`` is its last error (type, message and last frames)."""

    def __init__(self, job_id: str, error: str, attempts: int) -> None:
        super().__init__(f"{job_id} is dead after {attempts} attempt(s): {error}")
        self.job_id = job_id
        self.error = error
        self.attempts = attempts


class ResultDropped(EchoMQError):
    """A task's job is done, but its result was not kept: ``reason`` "memory" when the ack ran on a
    server over its maxmemory, which keeps the outcome and drops the result so that draining a
    full server frees memory (docs/PROTOCOL.md, "Results under memory pressure")."""

    def __init__(self, job_id: str, reason: str) -> None:
        super().__init__(f"{job_id} is done, but its result was dropped ({reason}): the server "
                         "was over its maxmemory when the job was acked")
        self.job_id = job_id
        self.reason = reason


class MetricsUnavailable(EchoMQError):
    """The metrics endpoint cannot listen where it was asked to (the port in use, a bad address)."""
