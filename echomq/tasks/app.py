"""``App``: typed tasks on top of ``Queue`` and ``Consumer``, never beside them.

``@app.task`` turns a function (plain or ``async def``) into a ``Task``: ``enqueue(*args,
**kwargs)`` admits a job whose payload is an ``Envelope`` naming the task, and returns a
``TaskHandle``. The worker side is ``app.handler`` (``app.async_handler`` for the asyncio
consumer): a handler like any other, which decodes the envelope, converts the arguments to the
task's type hints, runs the task and returns the directive the consumer settles the job with —
``Done`` (with the result, or the empty marker when the task keeps none), ``RetryIn`` (the
task's back-off, or the delay a ``RetryAfter`` asks for) or ``Reject`` (arguments that cannot
fit, an unknown task, an error the task says never to retry).
"""

from __future__ import annotations

import asyncio
import datetime
import inspect
import random
import threading
from collections.abc import Awaitable, Callable, Coroutine, Iterable, Sequence
from typing import Any, Generic, ParamSpec, TypeVar, overload

from echomq.consumer.directives import Done, Reject, RetryIn
from echomq.engine.calls import (
    DEFAULT_MAX_ATTEMPTS,
    DEFAULT_RETENTION_MS,
    MAX_RESULT_BYTES,
    Job,
)
from echomq.engine.native import checked_priority
from echomq.engine.wire import Wire, wire_of
from echomq.queue.blocking import Queue
from echomq.queue.limits import Limit, QueueLimits
from echomq.tasks.attempts import Attempt, Directive, Unrunnable, task_error_text
from echomq.tasks.calling import Parent, TaskCall, at_ms, expiry_options
from echomq.tasks.canvas import TaskSignature
from echomq.tasks.envelope import (
    UNKEPT_RESULT,
    Envelope,
    PayloadError,
    Result,
    Serializer,
    checked_serializer,
    decode_envelope,
    encode,
    enqueue_time,
    is_json,
)
from echomq.tasks.handle import AnyTask, HandledTask, TaskHandle, known_handle
from echomq.tasks.hooks import (
    DEAD,
    UNKNOWN,
    AllHooks,
    NoHooks,
    TaskHooks,
    combined,
)
from echomq.tasks.periodic import Periodic, Schedule, Scheduler
from echomq.tasks.reporting import running
from echomq.tasks.retry import DEFAULT_BACKOFF, Backoff, Draw, RetryPolicy
from echomq.tasks.signature import ArgumentsRejected, Signature
from echomq.tasks.twins import AsyncQueues, QueueOptions
from echomq.tasks.unique import UniqueKey, unique_of
from echomq.tasks.workflow import ParentResultDropped, given_parents, parent_ids

__all__ = ["App", "Task", "TaskCall"]

P = ParamSpec("P")
R = TypeVar("R")
# How a task that keeps no result is done: an ack keeping the empty marker, so that the job's
# ended key still wakes ``handle.result()`` on the server.
DONE_UNKEPT = Done(UNKEPT_RESULT)


class App:
    """Tasks on one Valkey connection. ``queue``: the queue tasks go to unless they name their
    own; ``wire``: every queue of the app's, ``"auto"`` (the default: trafikey's commands where
    the server has the module, else scripts), 5 (scripts) or 6 (trafikey); ``serializer``:
    "json" or "msgpack" for what this app enqueues (its workers read both); ``max_attempts`` and
    ``backoff``: the retry policy of tasks that do not set their own; ``retention_ms``: how
    long an acked job's tombstone (and its kept result) stays; ``hooks``: observers of each
    enqueue and attempt (``echomq.tasks.hooks.TaskHooks``); ``draw``: the jitter's random
    numbers in [0, 1) (a fixed one makes delays exact in tests); ``check_policy``: warn once
    when the server may evict keys (a CONFIG GET before the first command on ``conn``: making
    the app, its queues and its tasks sends nothing but ``limits``); ``events``:
    every queue of the app, and every ``echomq worker`` serving the app, appends each change
    to the queue's events stream (``Queue.events`` reads it); ``aconn``: the asyncio client
    ``aenqueue`` and ``aresult`` use (default: a twin of ``conn`` per event loop,
    ``echomq.tasks.twins``; a cluster App needs one given); ``limits``: a ``QueueLimits`` set on
    the app's queue as the app is made, exactly (a None field clears that limit; one write:
    ``set_limits``, shared by every worker of the queue); ``shards``: the app's queue is one
    logical queue over that many shards (``Queue(..., shards=N)``, docs/CLUSTER.md)."""

    def __init__(self, conn: Any, queue: str = "default", *, wire: int | str = Wire.AUTO,
                 serializer: str = "json", max_attempts: int = DEFAULT_MAX_ATTEMPTS,
                 backoff: Backoff = DEFAULT_BACKOFF, retention_ms: int = DEFAULT_RETENTION_MS,
                 hooks: TaskHooks | Sequence[TaskHooks] = (), draw: Draw = random.random,
                 check_policy: bool = True, events: bool = False, aconn: Any = None,
                 limits: QueueLimits | None = None, shards: int | None = None) -> None:
        self.conn = conn
        self.sharded = {} if shards is None else {queue: shards}
        self.wire = wire_of(wire)
        self.events = events
        self.serializer: Serializer = checked_serializer(serializer)
        self.policy = RetryPolicy(max_attempts=max_attempts, backoff=backoff)
        self.retention_ms = retention_ms
        self.hooks = combined(hooks)
        self.observed = not isinstance(self.hooks, NoHooks)
        self.draw = draw
        self.check_policy = check_policy
        self.tasks: dict[str, Task[Any, Any]] = {}
        self.queues: dict[str, Queue] = {}
        self.queue = self.queue_named(queue)
        self.aqueues = AsyncQueues(conn, aconn, QueueOptions(self.wire, retention_ms,
                                                             self.policy.max_attempts, events,
                                                             self.sharded))
        self.scheduler = Scheduler()
        self._runners = threading.local()
        if limits is not None:  # shared by every worker of the queue: kept on the server
            self.set_limits(concurrency=limits.concurrency, rate=limits.rate,
                            window_ms=limits.window_ms)

    def hook_list(self) -> tuple[TaskHooks, ...]:
        """The hooks the app calls, in order."""
        if isinstance(self.hooks, NoHooks):
            return ()
        return self.hooks.hooks if isinstance(self.hooks, AllHooks) else (self.hooks,)

    def add_hooks(self, *hooks: TaskHooks) -> None:
        """Call ``hooks`` too, after the app's own (``echomq worker --metrics-port`` adds the
        metrics' hooks to an app that has none)."""
        self.hooks = combined([*self.hook_list(), *hooks])
        self.observed = not isinstance(self.hooks, NoHooks)

    def queue_named(self, name: str) -> Queue:
        """The app's Queue called ``name``, made on first use with the app's wire (and events
        flag)."""
        queue = self.queues.get(name)
        if queue is None:
            queue = Queue(self.conn, name, wire=self.wire, retention_ms=self.retention_ms,
                          max_attempts=self.policy.max_attempts, check_policy=self.check_policy,
                          events=self.events, shards=self.sharded.get(name))
            self.queues[name] = queue
        return queue

    def set_limits(self, *, queue: str | None = None, concurrency: Limit = ..., rate: Limit = ...,
                   window_ms: Limit = ...) -> QueueLimits:
        """``Queue.set_limits`` on the app's queue (or ``queue``): the queue-wide limits every
        worker of it shares; the limits as they now apply."""
        target = self.queue if queue is None else self.queue_named(queue)
        return target.set_limits(concurrency=concurrency, rate=rate, window_ms=window_ms)

    async def aclose(self) -> None:
        """Close the asyncio client the running event loop's ``aenqueue`` and ``aresult`` made
        (a loop that ``asyncio.run`` ends closes its own); a given ``aconn`` stays open."""
        await self.aqueues.aclose()

    # the handles of jobs admitted earlier -------------------------------------------------------

    def handle(self, job_id: str, *, task: Task[Any, Any] | None = None,
               queue: str | None = None) -> TaskHandle[Any]:
        """The handle of job ``job_id``, admitted earlier (here or by another process), as
        ``enqueue`` returned it: ``result()``, ``outcome()``, ``progress()``, ``cancel()`` and
        their asyncio twins; its ``verdict`` is None. Looked for on ``queue`` (default:
        ``task``'s queue, else the app's); ``task`` also converts the result to its return hint
        (without it, the result is as decoded: a dataclass's is a dict). UnknownJob (a
        LookupError) at once, naming the id and the queue, when the queue has no such job (never
        admitted, or its tombstone expired); KindError for what is no job id."""
        target, handled = self._handled(task, queue)
        return known_handle(job_id, target, handled, target.outcome(job_id))

    async def ahandle(self, job_id: str, *, task: Task[Any, Any] | None = None,
                      queue: str | None = None) -> TaskHandle[Any]:
        """``handle``, awaited: the job looked for on the App's asyncio client."""
        target, handled = self._handled(task, queue)
        outcome = await (await self.aqueues.queue_named(target.name)).outcome(job_id)
        return known_handle(job_id, target, handled, outcome)

    def _handled(self, task: Task[Any, Any] | None,
                 queue: str | None) -> tuple[Queue, HandledTask]:
        name = queue or (self.queue.name if task is None else task.queue)
        return self.queue_named(name), AnyTask(self.aqueues) if task is None else task

    # declaring tasks ----------------------------------------------------------------------------

    @overload
    def task(self, function: Callable[P, Coroutine[Any, Any, R]], /) -> Task[P, R]: ...

    @overload
    def task(self, function: Callable[P, R], /) -> Task[P, R]: ...

    @overload
    def task(self, /, *, name: str | None = None, queue: str | None = None,
             max_attempts: int | None = None, backoff: Backoff | None = None,
             no_retry: tuple[type[BaseException], ...] = (), keep_result: bool = True,
             priority: int = 0, **unique: UniqueKey | int | None,
             ) -> Callable[[Callable[P, R]], Task[P, R]]: ...

    def task(self, function: Callable[..., Any] | None = None, /, *, name: str | None = None,
             queue: str | None = None, max_attempts: int | None = None,
             backoff: Backoff | None = None, no_retry: tuple[type[BaseException], ...] = (),
             keep_result: bool = True, priority: int = 0, **unique: UniqueKey | int | None) -> Any:
        """Register ``function`` as a task, bare (``@app.task``) or with options: ``name``
        (default ``module.qualname``: what the job names, so producer and worker must agree),
        ``queue``, ``max_attempts`` and ``backoff`` (default the app's), ``no_retry``
        (exception types that send the job dead at once) and ``keep_result`` (default True: keep
        the return value with the job's tombstone for ``handle.result()``; False: the value is
        neither encoded nor kept, and ``handle.result()`` gives None once the job is done) and
        ``priority`` (-100 to 100, default 0: the priority its jobs are enqueued at, unless
        ``with_options`` gives another; higher is claimed first); ``dedupe``, ``debounce`` or
        ``throttle`` and its ``<mode>_ms``, as ``Queue.enqueue`` takes them, a key also a function
        of the task's arguments giving one (ArgumentError here when they are bad)."""
        checked_priority(priority)
        unique = unique_of(self.task, **unique)
        policy = RetryPolicy(
            max_attempts=self.policy.max_attempts if max_attempts is None else max_attempts,
            backoff=backoff or self.policy.backoff, no_retry=tuple(no_retry))

        def register(function: Callable[..., Any]) -> Task[Any, Any]:
            made = Task(self, function, name=name, queue=queue or self.queue.name,
                        policy=policy, keep_result=keep_result, priority=priority, unique=unique)
            if made.name in self.tasks:
                raise ValueError(f"a task named {made.name!r} is already registered")
            self.tasks[made.name] = made
            self.queue_named(made.queue)
            return made

        return register if function is None else register(function)

    # periodic tasks (echomq.tasks.periodic) -------------------------------------------------------

    def periodic(self, cron: str, *, args: Sequence[Any] = (),
                 kwargs: dict[str, Any] | None = None, name: str | None = None,
                 tz: str = "UTC", catch_up: int = 1) -> Callable[[Any], Task[Any, Any]]:
        """Enqueue the decorated task (or function, made a task) with ``args`` and ``kwargs`` at
        each tick of ``cron`` in ``tz``: one job per tick, however many of the app's workers run
        the schedule (``name``, default the task's). Checked here: the arguments against the
        task's signature and type hints, the schedule's name, cron and zone."""
        def schedule(target: Any) -> Task[Any, Any]:
            task = target if isinstance(target, Task) else self.task(target)
            task.signature.check(tuple(args), dict(kwargs or {}),
                                 from_json=self.serializer == "json")
            when = Schedule(name or task.name, cron, tz=tz, catch_up=catch_up)
            self.scheduler.add(Periodic.of_task(when, task, args, kwargs))
            return task
        return schedule

    def worker_started(self, spec: Any) -> None:
        """In each worker process: run the app's periodic schedules (a thread), if it has any."""
        if self.scheduler.entries:
            self.scheduler.start()

    def worker_stopping(self) -> None:
        self.scheduler.stop()

    # the worker side ----------------------------------------------------------------------------

    def handler(self, job: Job) -> Directive:
        """Run the task ``job`` names; the directive its outcome settles with. Async tasks run
        to the end on an event loop of this thread's own."""
        opened = self._open(job)
        if isinstance(opened, Unrunnable):
            return self._refused(opened, job)
        task, envelope = opened
        if not self.observed:
            return self._attempt_sync(task, envelope, job)
        with self._running(task, envelope, job) as record:
            return record.settled(self._attempt_sync(task, envelope, job))

    async def async_handler(self, job: Job) -> Directive:
        """``handler`` for the asyncio consumer: async tasks are awaited, plain ones run in a
        thread (``asyncio.to_thread``: the loop's default executor) so the event loop keeps
        serving the other jobs in flight."""
        opened = self._open(job)
        if isinstance(opened, Unrunnable):
            return self._refused(opened, job)
        task, envelope = opened
        if not self.observed:
            return await self._attempt_async(task, envelope, job)
        with self._running(task, envelope, job) as record:
            return record.settled(await self._attempt_async(task, envelope, job))

    def runs_in_thread(self, job: Job) -> bool:
        """Whether ``async_handler`` runs ``job`` in a thread (its task is a plain function), so
        that cancelling the attempt at a time limit leaves the task running."""
        opened = self._open(job)
        return not isinstance(opened, Unrunnable) and not opened[0].is_async

    def _open(self, job: Job) -> tuple[Task[Any, Any], Envelope] | Unrunnable:
        try:
            envelope = decode_envelope(job.payload)
        except PayloadError as exc:
            return Unrunnable(Reject(str(exc)), None)
        task = self.tasks.get(envelope.task)
        if task is None:
            return Unrunnable(Reject(f"no task named {envelope.task!r} is registered in this app "
                                     f"(known: {', '.join(sorted(self.tasks)) or 'none'})"),
                              envelope)
        return task, envelope

    def _refused(self, unrunnable: Unrunnable, job: Job) -> Reject:
        """Reject a job no task of this app can run, told to the hooks as a dead attempt under
        ``UNKNOWN`` (its queue too, unless the envelope names one of this app's); the reason,
        with the task name as read, is the error."""
        reject, envelope = unrunnable.reject, unrunnable.envelope
        if not self.observed:
            return reject
        queue = envelope.queue if envelope is not None and envelope.queue in self.queues \
            else UNKNOWN
        headers = envelope.headers if envelope is not None else {}
        enqueued_ms = enqueue_time(envelope, job.id) if envelope is not None else None
        with self.hooks.running(queue, UNKNOWN, job, headers, enqueued_ms) as record:
            record.outcome, record.error = DEAD, reject.error
        return reject

    def _running(self, task: Task[Any, Any], envelope: Envelope, job: Job) -> Attempt:
        return Attempt(self.hooks.running(envelope.queue or task.queue, task.name, job,
                                          envelope.headers, enqueue_time(envelope, job.id)),
                       job, task.policy)

    def _reporting(self, task: Task[Any, Any], envelope: Envelope, job: Job) -> Any:
        """The block in which ``echomq.progress`` reports on ``job``."""
        return running(self.queue_named(envelope.queue or task.queue), job, self.serializer)

    def _attempt_sync(self, task: Task[Any, Any], envelope: Envelope, job: Job) -> Directive:
        try:
            if envelope.parents is not None:
                queue = self.queue_named(envelope.queue or task.queue)
                envelope = given_parents(envelope, queue.kept_results(parent_ids(envelope)))
            args, kwargs = task.arguments(envelope, job)
            with self._reporting(task, envelope, job):
                value = task.function(*args, **kwargs)
                if inspect.isawaitable(value):
                    value = self._runner().run(_awaited(value))
        except ArgumentsRejected as exc:
            return Reject(str(exc))
        except ParentResultDropped as exc:
            return Reject(str(exc))  # no retry can bring the result back
        except Exception as exc:
            return task.failed(exc, job.attempt)
        return task.done(value)

    async def _attempt_async(self, task: Task[Any, Any], envelope: Envelope,
                             job: Job) -> Directive:
        try:
            if envelope.parents is not None:
                queue = await self.aqueues.queue_named(envelope.queue or task.queue)
                envelope = given_parents(envelope,
                                         await queue.kept_results(parent_ids(envelope)))
            args, kwargs = task.arguments(envelope, job)
            with self._reporting(task, envelope, job):
                if task.is_async:
                    value = await task.function(*args, **kwargs)
                else:
                    value = await asyncio.to_thread(task.function, *args, **kwargs)
        except ArgumentsRejected as exc:
            return Reject(str(exc))
        except ParentResultDropped as exc:
            return Reject(str(exc))  # no retry can bring the result back
        except Exception as exc:
            return task.failed(exc, job.attempt)
        return task.done(value)

    def _runner(self) -> asyncio.Runner:
        runner: asyncio.Runner | None = getattr(self._runners, "runner", None)
        if runner is None:
            runner = self._runners.runner = asyncio.Runner()
        return runner


async def _awaited(value: Awaitable[Any]) -> Any:
    return await value


class Task(Generic[P, R]):
    """A registered task: call it to run it here, ``enqueue`` it to run it on a worker."""

    def __init__(self, app: App, function: Callable[P, R], *, name: str | None, queue: str,
                 policy: RetryPolicy, keep_result: bool, priority: int = 0,
                 unique: dict[str, Any] | None = None) -> None:
        self.app = app
        self.function = function
        self.name = name or f"{function.__module__}.{function.__qualname__}"
        self.queue = queue
        self.policy = policy
        self.keep_result = keep_result
        self.priority = priority
        self.unique = unique or {}
        self.signature = Signature(function, self.name)
        self.is_async = inspect.iscoroutinefunction(function)
        self.__doc__ = function.__doc__
        self.__wrapped__ = function

    def __repr__(self) -> str:
        return f"<Task {self.name} on {self.queue}>"

    def __call__(self, *args: P.args, **kwargs: P.kwargs) -> Any:
        """Run the function here, now (an ``async def`` task returns its coroutine)."""
        return self.function(*args, **kwargs)

    def enqueue(self, *args: P.args, **kwargs: P.kwargs) -> TaskHandle[R]:
        """Admit one run of this task with these arguments; its handle. TypeError, before
        anything is sent, for arguments that do not fit the signature, its type hints (the
        parameter, its hint and the type given are named) or the serializer."""
        return TaskCall[P, R](self, priority=self.priority,
                              unique=self.unique).enqueue(*args, **kwargs)

    async def aenqueue(self, *args: P.args, **kwargs: P.kwargs) -> TaskHandle[R]:
        """``enqueue``, awaited: on the App's asyncio client, never blocking the event loop."""
        return await TaskCall[P, R](self, priority=self.priority,
                                    unique=self.unique).aenqueue(*args, **kwargs)

    def enqueue_many(self, calls: Iterable[Any]) -> list[TaskHandle[R]]:
        """Admit one run of this task per call, all in one ``Queue.enqueue_many`` (one command
        per 10,000 jobs): a call is a tuple of positional arguments, ``add.enqueue_many([(1, 2),
        (3, 4)])``, or this task's signature, ``add.s(1, y=2)``; a handle per call, in order.
        TypeError or ValueError, before anything is sent, for a call that does not fit.
        ``with_options(lane=, queue=, priority=, delay_ms=)`` sets them for the whole batch."""
        return TaskCall[P, R](self, priority=self.priority,
                              unique=self.unique).enqueue_many(calls)

    async def aenqueue_many(self, calls: Iterable[Any]) -> list[TaskHandle[R]]:
        """``enqueue_many``, awaited: on the App's asyncio client, never blocking the loop."""
        return await TaskCall[P, R](self, priority=self.priority,
                                    unique=self.unique).aenqueue_many(calls)

    def s(self, *args: Any, **kwargs: Any) -> TaskSignature:
        """One call of this task for a workflow (``echomq.chain``, ``group``, ``chord``), given
        its parent's result before ``args``; its arity is checked when the workflow is sent.
        ValueError for a task with dedupe, debounce or throttle (``TaskCall.s``)."""
        return TaskCall[P, R](self, priority=self.priority, unique=self.unique).s(*args, **kwargs)

    def si(self, *args: Any, **kwargs: Any) -> TaskSignature:
        """``s``, ignoring its parent's result: called with ``args`` and ``kwargs`` alone."""
        return TaskCall[P, R](self, priority=self.priority, unique=self.unique).si(*args, **kwargs)

    @property
    def aqueues(self) -> AsyncQueues:
        """The App's asyncio queues (what a handle's ``aresult`` waits on)."""
        return self.app.aqueues

    def with_options(self, *, job_id: str | None = None, delay_ms: int = 0,
                     at: datetime.datetime | None = None,
                     lane: str | None = None, queue: str | None = None,
                     priority: int | None = None, after: Sequence[Parent] | None = None,
                     policy: str = "fail", expires_in: float | None = None,
                     expires_at: datetime.datetime | float | None = None,
                     **unique: UniqueKey | int | None) -> TaskCall[P, R]:
        """This task with per-call options, kept apart from the task's own arguments:
        ``job_id`` (the idempotency key: a second enqueue of it is a DUPLICATE), ``delay_ms``
        or ``at`` (an aware datetime: run then, by the server's clock), ``lane``, ``queue``,
        ``priority`` (-100 to 100; default the task's; ArgumentError otherwise, here),
        ``after`` (handles or job ids of the same queue: the job waits until each of them
        ended) and ``policy`` (what a dead one does to it: "fail", "ignore" or "continue");
        ``dedupe``, ``debounce`` or ``throttle`` and its ``<mode>_ms`` (as ``@app.task``'s;
        any given replace the task's); ``expires_in`` (seconds from the enqueue) or
        ``expires_at`` (an aware datetime or epoch seconds): not started by then, the job is
        dead with the error "expired"."""
        if delay_ms and at is not None:
            raise ValueError("give delay_ms or at, not both")
        if priority is not None:
            checked_priority(priority)
        return TaskCall[P, R](self, job_id=job_id, delay_ms=delay_ms,
                        at_ms=None if at is None else at_ms(at), lane=lane, queue=queue,
                        priority=self.priority if priority is None else priority,
                        after=None if after is None else tuple(after), policy=policy,
                        unique=unique_of(self.with_options, **unique) if unique else self.unique,
                        **expiry_options(expires_in, expires_at))

    # the worker side ----------------------------------------------------------------------------

    def arguments(self, envelope: Envelope,
                  job: Job) -> tuple[list[Any], dict[str, Any]]:
        return self.signature.convert(envelope.args, envelope.kwargs,
                                      from_json=is_json(job.payload))

    def done(self, value: Any) -> Directive:
        if not self.keep_result:
            return DONE_UNKEPT
        try:
            kept = encode(Result(value), self.app.serializer)
        except TypeError as exc:
            return Reject(f"{self.name} returned a value that cannot be kept as its result: "
                          f"{exc}")
        if len(kept) > MAX_RESULT_BYTES:
            return Reject(f"{self.name} returned a result of {len(kept)} bytes encoded; at most "
                          f"{MAX_RESULT_BYTES} are kept")
        return Done(kept)

    def failed(self, exc: Exception, attempt: int) -> Directive:
        if not self.policy.retries(exc):
            return Reject(task_error_text(exc, self.function))
        return RetryIn(self.policy.delay_ms(exc, attempt, self.app.draw),
                       task_error_text(exc, self.function),
                       self.policy.max_attempts)
