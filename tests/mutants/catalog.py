"""The seeded bugs of ``make mutants``: each a named, described edit of the source, one or more
exact replacements (each ``old`` must occur exactly once in its file). A twin makes the same bug
in the Lua script and in the C module."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Edit:
    path: str
    old: str
    new: str


@dataclass(frozen=True)
class Mutant:
    name: str
    area: str
    description: str
    edits: tuple[Edit, ...]
    # test files of the selection expected to kill it, run first (``run.py --hinted``)
    hints: tuple[str, ...] = ()


def lua(path: str, old: str, new: str) -> Edit:
    return Edit(f"echomq/lua/{path}", old, new)


def c(path: str, old: str, new: str) -> Edit:
    return Edit(f"native/{path}", old, new)


def py(path: str, old: str, new: str) -> Edit:
    return Edit(f"echomq/{path}", old, new)


def mutant(name: str, area: str, description: str, *edits: Edit) -> Mutant:
    return Mutant(name, area, description, edits, HINTS.get(name, ()))


Q, C = "tests/test_", "tests/conformance/test_"
HINTS: dict[str, tuple[str, ...]] = {
    "twin-dedupe-kept": (f"{C}join.py", f"{Q}queue_dedupe.py"),
    "lua-dedupe-kept": (f"{Q}queue_dedupe.py",),
    "c-dedupe-kept": (f"{Q}queue_dedupe.py",),
    "twin-fence-same": (f"{Q}queue.py",),
    "c-fence-same": (f"{Q}queue.py",),
    "twin-attempt-uncounted": (f"{Q}queue.py",),
    "twin-lease-deadline-short": (f"{Q}queue.py",),
    "twin-retry-dead-late": (f"{Q}queue.py",),
    "twin-recover-dead-late": (f"{Q}queue.py",),
    "lua-recover-dead-late": (f"{Q}queue.py",),
    "twin-dead-bound-off": (f"{Q}dead_bounds.py",),
    "twin-priority-flipped": (f"{Q}queue_priority.py",),
    "lua-priority-flipped": (f"{C}priority.py",),
    "c-priority-flipped": (f"{C}priority.py",),
    "twin-move-one-fewer": (f"{Q}queue.py",),
    "twin-cancel-running-unmarked": (f"{C}cancel.py", f"{Q}queue_cancel.py"),
    "twin-queue-concurrency-plus-one": (f"{Q}queue_limits.py",),
    "twin-queue-rate-window-long": (f"{Q}queue_limits.py",),
    "lua-lane-rate-window-long": (f"{Q}lane_limits.py",),
    "lua-lane-concurrency-plus-one": (f"{Q}lane_limits.py",),
    "twin-dependent-released-early": (f"{Q}queue_after.py", f"{C}join.py"),
    "housekeeping-interval-ignored": (f"{Q}loop.py",),
    "recover-due-promote-single-step": (f"{Q}queue.py",),
    "recover-due-recover-single-step": (f"{Q}queue.py",),
    "read-ahead-batch-single-attempt": (f"{Q}loop_batches.py", f"{Q}read_ahead.py"),
    "extend-at-lease-end": (f"{Q}loop.py",),
    "cancelled-wins-dropped-attempts": (f"{Q}cancel.py",),
    "cancelled-wins-dropped-metrics-returned": (f"{Q}cancel.py",),
    "cancelled-wins-dropped-metrics-raised": (f"{Q}cancel.py",),
    "retry-policy-last-late": (f"{Q}tasks.py", f"{Q}tasks_codec.py"),
    "retry-in-max-plus-one": (f"{Q}tasks.py",),
    "arguments-unconverted": (f"{Q}tasks_codec.py", f"{Q}tasks.py"),
    "keep-result-ignored": (f"{Q}tasks.py",),
    "chord-body-after-first-child": (f"{Q}canvas_plan.py",),
    "chain-order-reversed": (f"{Q}canvas_plan.py",),
}


DEDUPE_LUA = lua("include/dependents.lua",
                 "if redis.call('GET', step.key) ~= step.id then return end",
                 "if true then return end")
DEDUPE_C = c("dependents.c",
             "if (same && st->ms > 0) fx_pexpire(j->ctx, key, st->key, st->ms);\n"
             "        else if (same) fx_del(j->ctx, key, st->key);",
             "(void)same;")
FENCE_LUA = lua("include/claims.lua", "local fence = last_fence + 1", "local fence = last_fence")
FENCE_C = c("effects.c", "*fence = last_fence + 1;", "*fence = last_fence;")
RECOVER_DEAD_LUA = lua("include/moves.lua", "elseif attempts and attempts >= max_attempts then",
                       "elseif attempts and attempts > max_attempts then")
RECOVER_DEAD_C = c("moves.c", "if (max_attempts > 0 && attempts >= max_attempts) {",
                   "if (max_attempts > 0 && attempts > max_attempts) {")
PRIORITY_LUA = lua("include/priority.lua", "return math.min(t, TIME_CAP) - p * PRIORITY_BAND",
                   "return math.min(t, TIME_CAP) + p * PRIORITY_BAND")
PRIORITY_C = c("emq_core.c", "- priority * EMQ_PRIORITY_BAND;", "+ priority * EMQ_PRIORITY_BAND;")

EXECUTORS = [
    mutant("twin-dedupe-kept", "executors (twin)",
           "the dedupe key is never released at a job's end (neither deleted nor given its "
           "window), in Lua and C alike", DEDUPE_LUA, DEDUPE_C),
    mutant("lua-dedupe-kept", "executor (Lua)", "the dedupe key is never released (Lua only)",
           DEDUPE_LUA),
    mutant("c-dedupe-kept", "executor (C)", "the dedupe key is never released (C only)", DEDUPE_C),
    mutant("twin-fence-same", "executors (twin)",
           "a lease takes the last fence again instead of the next", FENCE_LUA, FENCE_C),
    mutant("c-fence-same", "executor (C)", "a lease takes the last fence again (C only)", FENCE_C),
    mutant("twin-attempt-uncounted", "executors (twin)", "a lease does not count its attempt",
           lua("include/claims.lua", "local attempt = int_field(f[1], 0) + 1",
               "local attempt = int_field(f[1], 0)"),
           c("effects.c", "*attempt = lease_attempts(ctx, row, row_name) + 1;",
             "*attempt = lease_attempts(ctx, row, row_name);")),
    mutant("twin-lease-deadline-short", "executors (twin)",
           "claim's lease deadline is now + lease_ms - 1",
           lua("claim.lua", "last_fence, now + lease_ms)", "last_fence, now + lease_ms - 1)"),
           c("claim.c", "&last_fence, now + lease_ms, &ev);",
             "&last_fence, now + lease_ms - 1, &ev);")),
    mutant("twin-retry-dead-late", "executors (twin)",
           "retry sends a job dead only after max_attempts + 1 attempts",
           lua("include/settlements.lua",
               "  if attempts >= max_attempts then\n    redis.call('ZADD', dead",
               "  if attempts > max_attempts then\n    redis.call('ZADD', dead"),
           c("transitions.c", "if (attempts >= max_attempts) {\n        fx_zadd(ctx, rk->dead",
             "if (attempts > max_attempts) {\n        fx_zadd(ctx, rk->dead")),
    mutant("twin-recover-dead-late", "executors (twin)",
           "recover sends a lost job dead only after max_attempts + 1 attempts",
           RECOVER_DEAD_LUA, RECOVER_DEAD_C),
    mutant("lua-recover-dead-late", "executor (Lua)",
           "recover sends a lost job dead one attempt late (Lua only)", RECOVER_DEAD_LUA),
    mutant("twin-dead-bound-off", "executors (twin)",
           "trim_dead keeps one dead job more than the bound max_count",
           lua("trim_dead.lua", "over = redis.call('ZCARD', dead) - max_count",
               "over = redis.call('ZCARD', dead) - max_count - 1"),
           c("trim_dead.c", "(long long)ValkeyModule_ValueLength(dead) - bounds[0] : 0;",
             "(long long)ValkeyModule_ValueLength(dead) - bounds[0] - 1 : 0;")),
    mutant("twin-priority-flipped", "executors (twin)",
           "a higher priority sorts later in pending instead of first", PRIORITY_LUA, PRIORITY_C),
    mutant("lua-priority-flipped", "executor (Lua)", "priority order flipped (Lua only)",
           PRIORITY_LUA),
    mutant("c-priority-flipped", "executor (C core)",
           "priority order flipped in the pure C core (the module and echomq._core)", PRIORITY_C),
    mutant("twin-move-one-fewer", "executors (twin)",
           "promote and recover move one job fewer than their limit",
           lua("include/moves.lua", "'LIMIT', '0',\n    dec(limit))",
               "'LIMIT', '0',\n    dec(limit - 1))"),
           c("moves.c", "(long long)n < limit) {", "(long long)n < limit - 1) {")),
    mutant("twin-cancel-running-unmarked", "executors (twin)",
           "cancel of a running job answers CANCELLING but does not mark its row",
           lua("cancel.lua", "if redis.call('HEXISTS', row, 'cancel') == 0 then mark_cancel(",
               "if false then mark_cancel("),
           c("cancel.c", "if (!row_has(ctx, row, \"cancel\")) fx_mark_cancel(",
             "if (0) fx_mark_cancel(")),
    mutant("twin-queue-concurrency-plus-one", "executors (twin)",
           "a queue's concurrency limit lets one lease more run",
           lua("include/queue_limits.lua", "math.max(0, limits.concurrency - redis.call",
               "math.max(0, limits.concurrency + 1 - redis.call"),
           c("queue_limits.c", "long long room = ql->concurrency - (long long)",
             "long long room = ql->concurrency + 1 - (long long)")),
    mutant("twin-queue-rate-window-long", "executors (twin)",
           "a queue's rate window lasts one ms longer (its end counted in it)",
           lua("include/queue_limits.lua", "now < tonumber(start) + limits.window_ms then",
               "now <= tonumber(start) + limits.window_ms then"),
           c("queue_limits.c", "now < start + ql->window_ms) {",
             "now <= start + ql->window_ms) {")),
    mutant("lua-lane-rate-window-long", "executor (Lua lanes)",
           "a lane's rate window lasts one ms longer",
           lua("include/lane_limits.lua", "if start and now < tonumber(start) + window_ms then",
               "if start and now <= tonumber(start) + window_ms then")),
    mutant("lua-lane-concurrency-plus-one", "executor (Lua lanes)",
           "a lane's concurrency limit lets one lease more run",
           lua("include/lane_limits.lua", "'leased', group), 0) >= limit then",
               "'leased', group), 0) > limit then")),
    mutant("twin-dependent-released-early", "executors (twin)",
           "a waiting job is released when one parent is still to end",
           lua("include/dependents.lua", "if s.waits <= 0 and not s.hold then",
               "if s.waits <= 1 and not s.hold then"),
           c("dependents.c", "if (s->waits <= 0 && !s->hold) {",
             "if (s->waits <= 1 && !s->hold) {")),
]

CONSUMER = [
    mutant("housekeeping-interval-ignored", "consumer core",
           "a consumer takes its housekeeping turn on every round, whatever housekeeping_ms",
           py("consumer/core.py", "if not force and now < self.housekeeping_at:",
              "if not force and now < self.housekeeping_at and False:")),
    mutant("recover-due-promote-single-step", "consumer core (housekeeping)",
           "recover_due promotes one step (HOUSEKEEPING_STEP) instead of stepping until none is "
           "due",
           py("queue/methods.py",
              "            promoted += step\n            if not more_due(step):\n",
              "            promoted += step\n            if True:\n")),
    mutant("recover-due-recover-single-step", "consumer core (housekeeping)",
           "recover_due recovers one step instead of stepping until none is due",
           py("queue/methods.py",
              "            recovered += step\n            if not more_due(step):\n",
              "            recovered += step\n            if True:\n")),
    mutant("read-ahead-batch-single-attempt", "consumer core",
           "a consumer giving each job one attempt (max_attempts=1) still claims a batch",
           py("consumer/settings.py", "return 1 if self.max_attempts == 1 else self.capacity",
              "return self.capacity")),
    mutant("extend-at-lease-end", "consumer core",
           "leases are extended every lease_ms instead of a third of it",
           py("consumer/settings.py", "return max(self.lease_ms / 3, 1) / 1000",
              "return max(self.lease_ms, 1) / 1000")),
]

TASKS = [
    mutant("cancelled-wins-dropped-attempts", "task layer",
           "a task's attempt forgets its cancelled outcome (attempts.py calls no cancelled_wins)",
           py("tasks/attempts.py", "        cancelled_wins(self.record)\n", "")),
    mutant("cancelled-wins-dropped-metrics-returned", "task layer (metrics)",
           "instrument's handler that returned forgets the cancelled outcome",
           py("ops/metrics.py", "        cancelled_wins(record)\n        return value",
              "        return value")),
    mutant("cancelled-wins-dropped-metrics-raised", "task layer (metrics)",
           "instrument's handler that raised forgets the cancelled outcome",
           py("ops/metrics.py", "error_text(exc)\n        cancelled_wins(record)\n",
              "error_text(exc)\n")),
    mutant("retry-policy-last-late", "task layer",
           "the retry policy counts its last attempt one late",
           py("tasks/retry.py", "return attempt >= self.max_attempts",
              "return attempt > self.max_attempts")),
    mutant("retry-in-max-plus-one", "task layer",
           "a failed task's retry directive allows one attempt more than its policy",
           py("tasks/app.py", "self.function),\n                       self.policy.max_attempts)",
              "self.function),\n                       self.policy.max_attempts + 1)")),
    mutant("arguments-unconverted", "task layer",
           "a task's arguments reach it as decoded, not converted to its hints",
           py("tasks/app.py",
              "        return self.signature.convert(envelope.args, envelope.kwargs,\n"
              + " " * 38 + "from_json=is_json(job.payload))",
              "        return list(envelope.args), dict(envelope.kwargs)")),
    mutant("keep-result-ignored", "task layer", "keep_result=False still keeps the result",
           py("tasks/app.py", "if not self.keep_result:\n            return DONE_UNKEPT",
              "if False:\n            return DONE_UNKEPT")),
]

WORKFLOWS = [
    mutant("chord-body-after-first-child", "workflows",
           "a node after a group (a chord's body, a chain's next) waits on its first job only",
           py("tasks/canvas.py", "after = tuple(leaves(shape))",
              "after = tuple(leaves(shape))[:1]")),
    mutant("chain-order-reversed", "workflows", "a chain runs its nodes last first",
           py("tasks/canvas.py", "    for node in nodes:\n        shape = node.planned",
              "    for node in reversed(nodes):\n        shape = node.planned")),
]

MUTANTS: list[Mutant] = [*EXECUTORS, *CONSUMER, *TASKS, *WORKFLOWS]
