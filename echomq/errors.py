"""The exceptions echomq raises. Server error replies are mapped by their code word."""

from __future__ import annotations


class EchoMQError(Exception):
    """Base of every echomq error."""


class KindError(EchoMQError, ValueError):
    """A job id that fails the kind gate: ``JOB:<rest>``, rest 1-200 of ``[A-Za-z0-9._:-]``."""


class LaneError(EchoMQError, ValueError):
    """A lane (group) name that is not 1-200 bytes of ``[A-Za-z0-9._:-]``."""


class ArgumentError(EchoMQError, ValueError):
    """An argument the protocol refuses (a bad number, a bad key list, a wrong arity)."""


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
        super().__init__(
            f"the server does not know {command}: the trafikey module is not loaded there; "
            "start valkey-server with --loadmodule <path of trafikey.so> "
            "(echomq.native.module_path()), or use wire=5")
        self.command = command


class EvictionPolicyWarning(UserWarning):
    """The server may evict keys (its maxmemory-policy is not ``noeviction``)."""


_CODES: dict[str, type[EchoMQError]] = {
    "EMQKIND": KindError,
    "EMQLANE": LaneError,
    "EMQNUM": ArgumentError,
    "EMQARITY": ArgumentError,
    "EMQKEYS": ArgumentError,
    "EMQSIZE": ArgumentError,
}


def from_reply(message: str) -> EchoMQError | None:
    """The echomq error for a server error message, or None when it is not one of ours."""
    code = message.split(" ", 1)[0]
    kind = _CODES.get(code)
    return kind(message) if kind else None


class TaskFailed(EchoMQError):
    """A task's job is dead: ``error`` is its last error (type, message and last frames)."""

    def __init__(self, job_id: str, error: str, attempts: int) -> None:
        super().__init__(f"{job_id} is dead after {attempts} attempt(s): {error}")
        self.job_id = job_id
        self.error = error
        self.attempts = attempts


class MetricsUnavailable(EchoMQError):
    """The metrics endpoint cannot listen where it was asked to (the port in use, a bad address)."""
