"""A workload of real consumers on a cluster whose nodes fail: one producer thread per queue that
never lets its queue empty, four ``echomq.Consumer`` threads, and a ledger of every enqueue, start
and ack, each start stamped with the server's clock.

The queue under test is made by one factory (``make_queue``), so the same scenarios can run on
another kind of queue. Producers retry what failed for a transient reason (``keep_trying``);
consumers heal by themselves. With ``confirm``, every admission and every ack is confirmed by
``WAIT`` on the node of its queue's slot (``Confirmer``): after a failover, that is what Valkey's
asynchronous replication keeps, and what the ledger counts.
"""

from __future__ import annotations

import threading
import time
from collections import Counter, defaultdict
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import redis
from redis.cluster import RedisCluster

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

QueueFactory = Callable[[RedisCluster, str, int], Queue]


def make_queue(conn: RedisCluster, name: str, wire: int) -> Queue:
    """The queue every scenario runs on."""
    return Queue(conn, name, wire=wire)


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
    ``confirmed`` the leases among them whose ack WAIT confirmed."""

    told: set[str] = field(default_factory=set)
    starts: list[Start] = field(default_factory=list)
    confirmed: set[tuple[str, int]] = field(default_factory=set)
    fences: list[tuple[str, int]] = field(default_factory=list)
    # Per queue (by its ids' prefix): ids told admitted, ids acked at least once.
    told_count: Counter[str] = field(default_factory=Counter)
    acked_count: Counter[str] = field(default_factory=Counter)
    acked_ids: set[str] = field(default_factory=set)

    def tell(self, prefix: str, ids: list[str]) -> None:
        with self.lock:
            self.told.update(ids)
            self.told_count[prefix] += len(ids)

    def start(self, job: Job, at_ms: int) -> None:
        with self.lock:
            self.starts.append(Start(job.id, job.attempt, job.fence, at_ms))

    def ack(self, prefix: str, job: Job, confirmed: bool) -> None:
        with self.lock:
            if job.id not in self.acked_ids:
                self.acked_ids.add(job.id)
                self.acked_count[prefix] += 1
            self.acks.append((job.id, job.attempt))
            self.fences.append((job.id, job.fence))
            if confirmed:
                self.confirmed.add((job.id, job.fence))

    def outstanding(self, prefix: str) -> int:
        with self.lock:
            return self.told_count[prefix] - self.acked_count[prefix]


class Confirmer:
    """Confirms that a queue's node has passed what this thread was told on to a replica: a
    marker write in the queue's slot, then ``WAIT 1`` on that connection (its offset is past the
    call whose reply came before). A node named ``sole`` (a promoted replica whose primary is
    gone) is the only copy there is: what it answered counts."""

    def __init__(self, rc: RedisCluster) -> None:
        self.rc = rc
        self.sole: set[int] = set()
        self._local = threading.local()
        self._opened: list[redis.Redis] = []
        self._lock = threading.Lock()

    def confirm(self, queue: Queue) -> bool:
        try:
            node = self.rc.get_node_from_key(queue.key("pending"))
            conn = self._conn(node.port)
            conn.set(f"confirm:{{{queue.name}}}", "1")
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
            held = (port, redis.Redis(port=port, socket_timeout=3, single_connection_client=True))
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
    """Producers and four consumers on ``queues`` (names on different primaries), with a ledger.
    ``clock``: a client of a node that stays up, whose ``TIME`` stamps each start (every node on
    loopback reads the same clock)."""

    def __init__(self, rc: RedisCluster, queues: Sequence[Queue], clock: redis.Redis, *,
                 confirm: bool, deadline_s: float = 60.0) -> None:
        self.rc, self.queues, self.clock = rc, list(queues), clock
        self.ledger = FlowLedger()
        self.confirmer = Confirmer(rc) if confirm else None
        self.deadline = time.monotonic() + deadline_s
        self.producing = threading.Event()
        self.failures: list[BaseException] = []
        self.consumers = [Consumer(self.queues[n % len(self.queues)], self.handle,
                                   lease_ms=LEASE_MS, housekeeping_ms=HOUSEKEEPING_MS,
                                   prefetch=4, on_ack=self.acked, announce=False)
                          for n in range(WORKERS)]
        self.threads = [threading.Thread(target=self._guard, args=(consumer.run,), daemon=True)
                        for consumer in self.consumers]
        self.producers = [threading.Thread(target=self._guard, args=(self._producer(q),),
                                           daemon=True) for q in self.queues]

    def start(self) -> Flow:
        self.producing.set()
        for thread in [*self.producers, *self.threads]:
            thread.start()
        return self

    def _guard(self, body: Callable[[], None]) -> None:
        try:
            body()
        except BaseException as exc:
            self.failures.append(exc)

    # the ledger's writers ---------------------------------------------------------------

    def handle(self, job: Job) -> None:
        at = keep_trying(lambda: server_ms(self.clock), self.ledger, "time", self.deadline)
        self.ledger.start(job, at)
        time.sleep(HANDLER_S)

    def acked(self, job: Job) -> None:
        queue = next(q for q in self.queues if job.id.startswith(prefix_of(q)))
        self.ledger.ack(prefix_of(queue), job, self._confirmed(queue))

    def _confirmed(self, queue: Queue) -> bool:
        return self.confirmer is None or self.confirmer.confirm(queue)

    def _producer(self, queue: Queue) -> Callable[[], None]:
        def produce() -> None:
            prefix, n = prefix_of(queue), 0
            while self.producing.is_set() and time.monotonic() < self.deadline:
                if self.ledger.outstanding(prefix) >= BACKLOG:
                    time.sleep(0.002)
                    continue
                ids = [f"{prefix}{n + i}" for i in range(BATCH)]
                n += BATCH
                verdicts = keep_trying(
                    lambda ids=ids: queue.enqueue_many([(i, b"payload") for i in ids]),  # type: ignore[misc]
                    self.ledger, "enqueue_many", self.deadline)
                self.ledger.tell(prefix, ids)
                if self._confirmed(queue):
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
            counts = [keep_trying(q.counts, self.ledger, "counts", self.deadline)
                      for q in self.queues]
            if all(sum(c[k] for k in ("pending", "active", "delayed", "lanes")) == 0
                   for c in counts):
                break
            time.sleep(0.05)
        self.halt()

    def halt(self, *, check: bool = True) -> None:
        """Stops every thread; with ``check``, raises the first failure of any."""
        self.producing.clear()
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


def lease_deadlines(node: Any, queue: Queue) -> dict[str, int]:
    """The leases ``queue`` holds on ``node`` (a plain client of its slot's primary): each id
    in ``active`` and its lease's deadline on the server's clock."""
    return {member.decode(): int(score)
            for member, score in node.zrange(queue.key("active"), 0, -1, withscores=True)}

