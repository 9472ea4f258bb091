"""``PartialAdmission``: a batch (``Queue.enqueue_many``, ``task.enqueue_many``) that failed after
some of its commands were admitted. A batch goes as one command per 10,000 jobs (and one per
lane job), each command all or nothing; when the server refuses one (out of memory, say), the
others of the flush still ran. The exception says which items were admitted and which were not,
so that a caller resends only the rest.

It is raised as a subclass of the error the server gave (``OutOfMemoryError``, say), made for it
here, so an ``except`` clause for that error still catches it; the error is also its
``__cause__`` and its ``error``.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from echomq.engine.errors import EchoMQError

if TYPE_CHECKING:
    from echomq.engine.calls import Verdict


class PartialAdmission(EchoMQError):
    """A batch admitted in part. ``verdicts``: one per item (or call), in order — its verdict
    where its command ran, None where its command was refused (nothing of that item was
    written). ``remaining``: the items (for a task, the calls as signatures, each with the job
    id it was given) whose verdict is None, in order: sending them again admits each once.
    ``handles`` (a task's batch): a handle per call, in order, None for the ones in
    ``remaining``. ``error``: what the server answered the first refused command."""

    error: BaseException
    verdicts: list[Verdict | None]
    remaining: list[Any]
    handles: list[Any] | None

    def __init__(self, error: BaseException, verdicts: Sequence[Verdict | None],
                 remaining: Sequence[Any], handles: Sequence[Any] | None = None) -> None:
        Exception.__init__(self, *error.args)
        self.__dict__.update(vars(error))  # the attributes the error's own class reads
        self.error = error
        self.verdicts = list(verdicts)
        self.remaining = list(remaining)
        self.handles = None if handles is None else list(handles)

    @property
    def admitted(self) -> int:
        """How many items had their command run (ENQUEUED, or DUPLICATE and the like)."""
        return sum(verdict is not None for verdict in self.verdicts)

    def __str__(self) -> str:
        return (f"{self.error} (a batch admitted in part: {self.admitted} of "
                f"{len(self.verdicts)} items admitted before the error; the "
                f"{len(self.remaining)} others are in .remaining, to send again)")


_MADE: dict[type[BaseException], type[PartialAdmission]] = {}


def _partial_of(kind: type[BaseException]) -> type[PartialAdmission]:
    """PartialAdmission made a subclass of ``kind`` too, once per class (PartialAdmission alone
    where the two cannot be combined)."""
    made = _MADE.get(kind)
    if made is None:
        try:
            made = type(PartialAdmission.__name__, (PartialAdmission, kind),
                        {"__module__": __name__, "__qualname__": PartialAdmission.__qualname__})
        except TypeError:  # a layout of its own (an OSError): caught by its cause only
            made = PartialAdmission
        _MADE[kind] = made
    return made


def partial_admission(error: BaseException, verdicts: Sequence[Verdict | None],
                      remaining: Sequence[Any],
                      handles: Sequence[Any] | None = None) -> PartialAdmission:
    """The PartialAdmission of a batch that ``error`` stopped: an instance of ``error``'s class
    too (of its original, when ``error`` is itself a PartialAdmission), with it as cause."""
    cause = error.error if isinstance(error, PartialAdmission) else error
    made = _partial_of(type(cause))(cause, verdicts, remaining, handles)
    made.__cause__ = cause
    return made
