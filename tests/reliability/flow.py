"""A workload of real consumers on a cluster whose nodes fail: one producer thread per shard of
each queue (a plain queue is one shard, itself) that never lets its shard empty, four
``echomq.Consumer`` threads, and a ledger of every enqueue, start and ack, each start stamped with
the server's clock and each ack with the shard it was on.

Plain and sharded queues (``Queue(conn, name, shards=N)``) run through the same code: whatever
lives in one slot is read per shard (``queue.shard_queues``). A producer's ids all route to its
shard, so a shard that is down holds up its own producer only. Producers retry what failed for a
transient reason (``keep_trying``); consumers heal by themselves. With ``confirm``, every admission
and every ack is confirmed by ``WAIT`` on the node of its shard's slot (``Confirmer``): after a
failover, that is what Valkey's asynchronous replication keeps, and what the ledger counts.
"""

from __future__ import annotations

import itertools
import threading
import time
from collections import Counter, defaultdict
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any

import redis
from redis.backoff import NoBackoff
from redis.cluster import RedisCluster, key_slot
from redis.retry import Retry

from echomq import Consumer, Job, Queue
from echomq.engine.server_time import server_ms
from tests.reliability.ledger import Ledger, present_ids
from tests.reliability.servers import TRANSIENT
from tests.reliability.workload import keep_trying

LEASE_MS = 2_000
HOUSEKEEPING_MS = 500
WORKERS = 4
BACKLOG = 24  # each producer keeps about this many jobs of its queue admitted and not acked
BATCH = 6
HANDLER_S = 0.003  # a job's work: consumers slower than producers, so no queue empties

def make_queue(conn: RedisCluster, name: str, wire: int, shards: int | None = None) -> Queue:
    """The queue every scenario runs on: plain, or sharded over ``shards``."""
    return Queue(conn, name, wire=wire, shards=shards)


def slot_of(shard: Queue) -> int:
    """The slot of a plain queue, or of one shard of a sharded queue (``shard_queues[k]``)."""
    return int(key_slot(shard.key("pending").encode()))


def shard_of_job(queue: Queue, job: Job) -> Queue:
    """The shard ``job`` of ``queue`` lives on (a plain queue: itself)."""
    return queue.shard_queues[queue.shard_of(job.id, job.lane)]


@dataclass(frozen=True)
class Start:
    job_id: str
    attempt: int
    fence: int
    at_ms: int  # the server's clock as the handler began


@dataclass
class FlowLedger(Ledger):
    """``admitted`` holds the admissions that count (confirmed by WAIT when confirming), ``told``
    every one a producer was told of; ``acks`` every ACKED a consumer was told of, with
    ``confirmed`` the leases among them whose ack WAIT confirmed; ``acked_on`` each ack's
    shard (its name) and when it came (time.monotonic)."""

    told: set[str] = field(default_factory=set)
    starts: list[Start] = field(default_factory=list)
    confirmed: set[tuple[str, int]] = field(default_factory=set)
    fences: list[tuple[str, int]] = field(default_factory=list)
    acked_on: list[tuple[str, float]] = field(default_factory=list)
    # Per shard of each queue (``stream``): ids told admitted, ids acked at least once.
    told_count: Counter[str] = field(default_factory=Counter)
    acked_count: Counter[str] = field(default_factory=Counter)
    acked_ids: set[str] = field(default_factory=set)

    def tell(self, stream: str, ids: list[str]) -> None:
        with self.lock:
            self.told.update(ids)
            self.told_count[stream] += len(ids)

    def start(self, job: Job, at_ms: int) -> None:
        with self.lock:
            self.starts.append(Start(job.id, job.attempt, job.fence, at_ms))

    def ack(self, stream: str, shard: str, job: Job, confirmed: bool) -> None:
        with self.lock:
            self.acked_on.append((shard, time.monotonic()))
            if job.id not in self.acked_ids:
                self.acked_ids.add(job.id)
                self.acked_count[stream] += 1
            self.acks.append((job.id, job.attempt))
            self.fences.append((job.id, job.fence))
            if confirmed:
                self.confirmed.add((job.id, job.fence))

    def outstanding(self, stream: str) -> int:
        with self.lock:
            return self.told_count[stream] - self.acked_count[stream]

    def acks_on(self, shards: set[str], after: float, before: float) -> int:
        """How many acks came on ``shards`` (names) between ``after`` and ``before``."""
        with self.lock:
            return sum(1 for shard, at in self.acked_on if shard in shards and after < at < before)


class Confirmer:
    """Confirms that a shard's node (a plain queue's: its own) has passed what this thread was
    told on to a replica: a marker write in the shard's slot, then ``WAIT 1`` on that connection
    (its offset is past the call whose reply came before). A node named ``sole`` (a promoted
    replica whose primary is gone) is the only copy there is: what it answered counts."""

    def __init__(self, rc: RedisCluster) -> None:
        self.rc = rc
        self.sole: set[int] = set()
        self._local = threading.local()
        self._opened: list[redis.Redis] = []
        self._lock = threading.Lock()

    def confirm(self, shard: Queue) -> bool:
        try:
            node = self.rc.get_node_from_key(shard.key("pending"))
            conn = self._conn(node.port)
            conn.set(f"confirm:{{{shard.name}}}", "1")  # a shard's name is its hash tag
            if node.port in self.sole:
                return True
            return int(conn.execute_command("WAIT", 1, 1_000)) >= 1
        except (*TRANSIENT, redis.ResponseError):
            self._drop()
            return False

    def _conn(self, port: int) -> redis.Redis:
        held: tuple[int, redis.Redis] | None = getattr(self._local, "conn", None)
        if held is None or held[0] != port:
            self._drop()
            # No retries: a node that is down fails the confirmation at once (redis-py's own
            # retries of a refused connect take seconds, all of them inside the consumer's on_ack).
            held = (port, redis.Redis(port=port, socket_timeout=3, single_connection_client=True,
                                      retry=Retry(NoBackoff(), 0)))
            self._local.conn = held
            with self._lock:
                self._opened.append(held[1])
        return held[1]

    def close(self) -> None:
        """Closes every thread's connection (once those threads have ended)."""
        with self._lock:
            opened, self._opened = self._opened, []
        for conn in opened:
            conn.close()

    def _drop(self) -> None:
        held = getattr(self._local, "conn", None)
        self._local.conn = None
        if held is not None:
            held[1].close()


class Flow:
    """A producer per shard and four consumers on ``queues`` (plain ones on different
    primaries, or a sharded one spread over them), with a ledger. ``clock``: a client of a node
    that stays up, whose ``TIME`` stamps each start (every node on loopback reads the same
    clock)."""

    def __init__(self, rc: RedisCluster, queues: Sequence[Queue], clock: redis.Redis, *,
                 confirm: bool, deadline_s: float = 60.0) -> None:
        self.rc, self.queues, self.clock = rc, list(queues), clock
        self.ledger = FlowLedger()
        self.confirmer = Confirmer(rc) if confirm else None
        self.deadline = time.monotonic() + deadline_s  # halt() brings it forward
        self.producing = threading.Event()
        self.failures: list[BaseException] = []
        self.consumers = [Consumer(self.queues[n % len(self.queues)], self.handle,
                                   lease_ms=LEASE_MS, housekeeping_ms=HOUSEKEEPING_MS,
                                   prefetch=4, on_ack=self.acked, announce=False)
                          for n in range(WORKERS)]
        self.threads = [threading.Thread(target=self._guard, args=(consumer.run,), daemon=True)
                        for consumer in self.consumers]
        self.producers = [threading.Thread(target=self._guard, args=(self._producer(q, k),),
                                           daemon=True)
                          for q in self.queues for k in range(q.shards)]

    def start(self) -> Flow:
        self.producing.set()
        for thread in [*self.producers, *self.threads]:
            thread.start()
        return self

    def until(self) -> float:
        """The deadline every retry of the flow's threads reads (time.monotonic)."""
        return self.deadline

    def _guard(self, body: Callable[[], None]) -> None:
        try:
            body()
        except BaseException as exc:
            self.failures.append(exc)

    # the ledger's writers ---------------------------------------------------------------

    def handle(self, job: Job) -> None:
        at = keep_trying(lambda: server_ms(self.clock), self.ledger, "time", self.until)
        self.ledger.start(job, at)
        time.sleep(HANDLER_S)

    def acked(self, job: Job) -> None:
        queue = next(q for q in self.queues if job.id.startswith(prefix_of(q)))
        shard = shard_of_job(queue, job)
        self.ledger.ack(stream_of(queue, queue.shard_of(job.id, job.lane)), shard.name, job,
                        self._confirmed(shard))

    def _confirmed(self, shard: Queue) -> bool:
        return self.confirmer is None or self.confirmer.confirm(shard)

    def _producer(self, queue: Queue, index: int) -> Callable[[], None]:
        """Batches of ids of shard ``index`` of ``queue``, enqueued through ``queue``."""
        def produce() -> None:
            stream, ids_of_shard = stream_of(queue, index), ids_on(queue, index)
            while self.producing.is_set() and time.monotonic() < self.deadline:
                if self.ledger.outstanding(stream) >= BACKLOG:
                    time.sleep(0.002)
                    continue
                ids = [next(ids_of_shard) for _ in range(BATCH)]
                verdicts = keep_trying(
                    lambda ids=ids: queue.enqueue_many([(i, b"payload") for i in ids]),  # type: ignore[misc]
                    self.ledger, "enqueue_many", self.until)
                self.ledger.tell(stream, ids)
                if self._confirmed(queue.shard_queues[index]):
                    for job_id, verdict in zip(ids, verdicts, strict=True):
                        self.ledger.admit(job_id, verdict)
        return produce

    # the end ----------------------------------------------------------------------------

    def progress(self, acks: int) -> Callable[[], bool]:
        """True once ``acks`` more jobs are acked than now (or a thread failed)."""
        target = len(self.ledger.acks) + acks
        return lambda: len(self.ledger.acks) >= target or bool(self.failures)

    def drain(self, timeout: float = 30.0) -> None:
        """Stops the producers, waits until every queue is empty (nothing pending, leased or
        delayed), then stops the consumers."""
        self.producing.clear()
        for thread in self.producers:
            thread.join(timeout)
        end = time.monotonic() + timeout
        while not self.failures and time.monotonic() < end:
            counts = [keep_trying(q.counts, self.ledger, "counts", self.until)
                      for q in self.queues]
            if all(sum(c[k] for k in ("pending", "active", "delayed", "lanes")) == 0
                   for c in counts):
                break
            time.sleep(0.05)
        self.halt()

    def halt(self, *, check: bool = True) -> None:
        """Stops every thread (a retry in progress gives up at once); with ``check``, raises
        the first failure of any."""
        self.producing.clear()
        self.deadline = min(self.deadline, time.monotonic())
        for consumer in self.consumers:
            consumer.stop()
        for thread in [*self.producers, *self.threads]:
            thread.join(30)
        assert not any(t.is_alive() for t in [*self.producers, *self.threads]), "a thread hung"
        if self.confirmer is not None:
            self.confirmer.close()
        if check and self.failures:
            raise self.failures[0]


def prefix_of(queue: Queue) -> str:
    return f"JOB:{queue.name}-"


def stream_of(queue: Queue, index: int) -> str:
    """What the ledger counts shard ``index`` of ``queue``'s backlog under."""
    return f"{prefix_of(queue)}#{index}"


def ids_on(queue: Queue, index: int) -> Iterator[str]:
    """The ids ``JOB:<name>-0``, ``-1``, … that ``queue`` routes to shard ``index`` (a plain
    queue: all of them)."""
    prefix = prefix_of(queue)
    return (job_id for job_id in (f"{prefix}{n}" for n in itertools.count())
            if queue.shard_of(job_id) == index)


@dataclass
class Tally:
    """What a scenario's ledger and the cluster say at the end."""

    told: int
    counted: int
    acked: int
    lost: list[str]
    acked_twice: list[str]
    reacked_after_unconfirmed: list[str]
    left: dict[str, str]

    def line(self, label: str) -> str:
        return (f"[{label}] told={self.told} counted={self.counted} acked={self.acked} "
                f"lost={len(self.lost)} acked_twice={len(self.acked_twice)} "
                f"reacked_after_unreplicated_ack={len(self.reacked_after_unconfirmed)} "
                f"left={len(self.left)}")


def tally(flow: Flow, label: str) -> Tally:
    """Every counted admission must be acked (``lost`` otherwise); a job acked under two leases
    is ``acked_twice`` unless every ack before its last was unconfirmed (replication may have
    lost it, and the job ran again: at least once)."""
    ledger = flow.ledger
    left = {k: v for k, v in present_ids(flow.queues).items() if v != "dead"}
    fences: defaultdict[str, list[int]] = defaultdict(list)
    for job_id, fence in ledger.fences:
        fences[job_id].append(fence)
    twice, reacked = [], []
    for job_id, held in fences.items():
        if len(held) > 1:
            earlier_confirmed = any((job_id, f) in ledger.confirmed for f in held[:-1])
            (twice if earlier_confirmed or flow.confirmer is None else reacked).append(job_id)
    acked = set(fences)
    result = Tally(told=len(ledger.told), counted=len(ledger.admitted), acked=len(acked),
                   lost=sorted(ledger.admitted - acked), acked_twice=sorted(twice),
                   reacked_after_unconfirmed=sorted(reacked), left=left)
    print(result.line(label), dict(ledger.errors) or "")
    return result


def assert_held(result: Tally) -> None:
    assert result.counted > 0
    assert not result.lost, f"lost jobs: {result.lost[:20]}"
    assert not result.acked_twice, f"acked under two leases: {result.acked_twice[:20]}"
    assert not result.left, f"jobs left on the server: {list(result.left.items())[:20]}"


def reruns_after(flow: Flow, job_id: str, since_ms: int) -> list[Start]:
    return sorted((s for s in flow.ledger.starts if s.job_id == job_id and s.at_ms > since_ms),
                  key=lambda s: s.at_ms)


def lease_deadlines(node: Any, shard: Queue) -> dict[str, int]:
    """The leases ``shard`` (a plain queue, or a shard of a sharded one) holds on ``node`` (a
    plain client of its slot's primary): each id in ``active`` and its lease's deadline on the
    server's clock."""
    return {member.decode(): int(score)
            for member, score in node.zrange(shard.key("active"), 0, -1, withscores=True)}

