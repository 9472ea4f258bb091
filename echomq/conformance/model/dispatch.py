"""The model: every concern's transitions on one keyspace, and the call that validates an
argument list and runs the transition it names."""

from __future__ import annotations

from collections.abc import Sequence

from echomq.conformance.model.batch import BatchTransitions
from echomq.conformance.model.cancel import Cancels
from echomq.conformance.model.dead import DeadTrimming
from echomq.conformance.model.events import EventSink
from echomq.conformance.model.many import ManyEnqueue
from echomq.conformance.model.movers import Movers
from echomq.conformance.model.steps import StepRecording
from echomq.conformance.model.unique import UniqueEnqueue
from echomq.conformance.model.validation import Validation
from echomq.conformance.resp import Arg
from echomq.engine.transitions import Transition


class Model(Validation, BatchTransitions, Movers, Cancels, DeadTrimming, UniqueEnqueue,
            ManyEnqueue, StepRecording):
    """The queue's keyspace in Python and every transition applied to it."""

    def call(self, transition: Transition, argv: Sequence[Arg]) -> bytes:
        """Runs ``argv`` (numkeys onwards); the raw reply the server must send."""
        checked = self.validate(transition, argv)
        if isinstance(checked, bytes):
            return checked
        handler = getattr(self, "_" + transition.name)
        self.sink = EventSink(checked.events, checked.numbers.get("now"))
        try:
            reply: bytes = handler(checked)
        finally:
            self.sink = EventSink()
        return reply
