/* transitions.c: what each EMQ.* command does once validate.c has checked its call (steps 1-5 of
 * docs/PROTOCOL.md) and opened its declared keys: step 6 (the keys it derives: ACL, slot, type,
 * ghosts), then its effects (effects.c, each replicating itself) and its reply.
 *
 * Each command is the twin of one script in echomq/lua/ and follows docs/PROTOCOL.md: the same keys
 * and arguments, the same validation order, byte-identical replies under RESP2 and RESP3, and the
 * same resulting keyspace for every argument list. Where this file and the Lua differ, the Lua is
 * the reference. A usage line heads each command's function, tx_<name>. */
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "trafikey.h"

/* ---- Finishing a lease: shared by ack, retry and settle -------------------------------------- */

/* The queue's base, from its active key's name (the call's keys passed keys_base). */
static Bytes base_of_active(ValkeyModuleString *active_name) {
    Bytes b = bytes_of(active_name);
    b.n -= strlen("active");
    return b;
}

/* check_lane_bookkeeping for a single verb (ack, ack_result, retry): its own ACL handle. */
static const char *lane_bookkeeping_error(ValkeyModuleCtx *ctx, Bytes base, ValkeyModuleKey *row) {
    Acl acl = {ctx, NULL, 0};
    const char *err = check_lane_bookkeeping(ctx, &acl, base, row);
    acl_release(&acl);
    return err;
}

/* finish_ack of the prelude, on a current lease: leave active; the row becomes a tombstone for
 * retention_ms (0: deleted), holding result when one is given (not NULL), and then the job's
 * ended key wakes its waiters. HDEL may empty the hash (a row of payload only): then it is gone
 * and PEXPIRE a no-op. */
static const char *finish_ack(ValkeyModuleCtx *ctx, ValkeyModuleKey *active, ValkeyModuleString *active_name,
                              ValkeyModuleKey *row, ValkeyModuleString *row_name, ValkeyModuleString *id,
                              long long retention_ms, ValkeyModuleString *result, ValkeyModuleString *ended,
                              const LaneRing *ring, const EventSink *ev, long long fence) {
    long long attempt = ev_attempts(ctx, ev, row);
    fx_zrem(ctx, active, active_name, id);
    release_lane_slot(ctx, base_of_active(active_name), ring, row);
    if (retention_ms == 0) {
        fx_del(ctx, row, row_name);
    } else {
        if (result) fx_hset1(ctx, row, row_name, "result", result);
        fx_hdel(ctx, row, row_name, ROW_PAYLOAD);
        fx_pexpire(ctx, row, row_name, retention_ms);
        if (result) fx_mark_ended(ctx, ended, retention_ms);
    }
    ev_emit(ctx, ev, &(Event){.kind = "done", .id = id, .attempt = attempt, .fence = fence, .with = EV_FENCE});
    return "ACKED";
}

/* finish_cancelled of the prelude, on a current lease a cancel flagged (whatever its settlement:
 * ack, ack with a result, retry, release): the attempt ends as cancelled — leave active, the lane
 * slot given back, the job buried with the retention its flag carries (no result kept, no retry,
 * never dead). */
static const char *finish_cancelled(ValkeyModuleCtx *ctx, ValkeyModuleKey *active, ValkeyModuleString *active_name,
                                    ValkeyModuleKey *row, ValkeyModuleString *row_name, ValkeyModuleString *id,
                                    ValkeyModuleString *ended, const LaneRing *ring, const EventSink *ev,
                                    long long fence) {
    long long attempt = ev_attempts(ctx, ev, row);
    fx_zrem(ctx, active, active_name, id);
    release_lane_slot(ctx, base_of_active(active_name), ring, row);
    const char *verdict = bury_cancelled(ctx, row, row_name, ended, row_int_field(ctx, row, "cancel", 0));
    ev_emit(ctx, ev, &(Event){.kind = "cancelled", .id = id, .attempt = attempt, .fence = fence, .with = EV_FENCE});
    return verdict;
}

static const char *derive_ended(ValkeyModuleCtx *ctx, Bytes base, ValkeyModuleString *id, ValkeyModuleString **ended);

/* The declared keys retry writes besides the row: active, delayed, dead (open, and their names). */
typedef struct {
    ValkeyModuleKey *active, *delayed, *dead;
    ValkeyModuleString *active_name, *delayed_name, *dead_name;
    const LaneRing *ring; /* the call's ring when it declares one (settle), else NULL */
} RetryKeys;

/* finish_retry of the prelude, on a current lease: leave active, record the error, go dead when
 * the row's attempts reach max_attempts (the job's ended key then wakes its waiters), else wait in
 * delayed until now + delay_ms. */
static const char *finish_retry(ValkeyModuleCtx *ctx, const RetryKeys *rk, ValkeyModuleKey *row,
                                ValkeyModuleString *row_name, ValkeyModuleString *id,
                                ValkeyModuleString *error, long long delay_ms, long long max_attempts,
                                long long now, ValkeyModuleString *ended, const EventSink *ev, long long fence) {
    fx_zrem(ctx, rk->active, rk->active_name, id);
    release_lane_slot(ctx, base_of_active(rk->active_name), rk->ring, row);
    fx_hset1(ctx, row, row_name, "error", error);
    long long attempts = row_int_field(ctx, row, ROW_ATTEMPTS, 0);
    if (attempts >= max_attempts) {
        fx_zadd(ctx, rk->dead, rk->dead_name, (double)now, id);
        fx_mark_ended(ctx, ended, 0);
        ev_emit(ctx, ev, &(Event){.kind = "dead", .id = id, .attempt = attempts, .fence = fence, .with = EV_FENCE});
        return "DEAD";
    }
    fx_zadd(ctx, rk->delayed, rk->delayed_name, (double)(now + delay_ms), id);
    ev_emit(ctx, ev,
            &(Event){.kind = "retried", .id = id, .attempt = attempts, .fence = fence, .due = now + delay_ms,
                     .with = EV_FENCE | EV_DUE});
    return "RETRYING";
}

/* ---- One job at a time ----------------------------------------------------------------------- */

/* EMQ.ENQUEUE 3 <base>job:<id> <base>pending <base>wake <id> <payload> <now> [<priority>]
 * Twin of enqueue.lua. +ENQUEUED | +DUPLICATE | EMQARITY EMQKIND EMQKEYS EMQNUM WRONGTYPE.
 * The row keeps a priority other than 0; the job waits in its band of pending. */
int tx_enqueue(ValkeyModuleCtx *ctx, Call *call, ValkeyModuleKey **k) {
    ValkeyModuleString *id = call->args[EMQ_ENQUEUE_ARG_ID], *payload = call->args[EMQ_ENQUEUE_ARG_PAYLOAD];
    ValkeyModuleString **names = call->keys;
    ValkeyModuleKey *row = k[EMQ_ENQUEUE_KEY_JOB];
    long long now = call->num[EMQ_ENQUEUE_ARG_NOW], priority = call->num[EMQ_ENQUEUE_ARG_PRIORITY];
    if (ValkeyModule_KeyType(row) != VALKEYMODULE_KEYTYPE_EMPTY)
        return ValkeyModule_ReplyWithSimpleString(ctx, "DUPLICATE");

    fx_new_row(ctx, row, names[EMQ_ENQUEUE_KEY_JOB], payload, now, priority);
    fx_zadd(ctx, k[EMQ_ENQUEUE_KEY_PENDING], names[EMQ_ENQUEUE_KEY_PENDING],
            (double)emq_pending_score(priority, now), id);
    fx_wake(ctx, k[EMQ_ENQUEUE_KEY_WAKE], names[EMQ_ENQUEUE_KEY_WAKE], 1);
    EventSink ev = event_sink(call, k);
    ev_emit(ctx, &ev, &(Event){.kind = "enqueued", .id = id, .priority = priority});
    return ValkeyModule_ReplyWithSimpleString(ctx, "ENQUEUED");
}

/* EMQ.ENQUEUE_DELAYED 3 <base>job:<id> <base>delayed <base>wake <id> <payload> <now> <delay_ms:0> <at_ms:0>
 *     [<priority>]
 * Twin of enqueue_delayed.lua. +ENQUEUED | +DUPLICATE | EMQARITY EMQKIND EMQKEYS EMQNUM WRONGTYPE.
 * As EMQ.ENQUEUE, into delayed at the later of now + delay_ms and at_ms; one wake token so a
 * parked consumer looks again at when the next job falls due; the row keeps its priority for
 * promote. */
int tx_enqueue_delayed(ValkeyModuleCtx *ctx, Call *call, ValkeyModuleKey **k) {
    ValkeyModuleString **names = call->keys;
    ValkeyModuleKey *row = k[EMQ_ENQUEUE_DELAYED_KEY_JOB];
    long long now = call->num[EMQ_ENQUEUE_DELAYED_ARG_NOW], at = call->num[EMQ_ENQUEUE_DELAYED_ARG_AT_MS];
    long long due = now + call->num[EMQ_ENQUEUE_DELAYED_ARG_DELAY_MS];
    if (ValkeyModule_KeyType(row) != VALKEYMODULE_KEYTYPE_EMPTY)
        return ValkeyModule_ReplyWithSimpleString(ctx, "DUPLICATE");
    fx_new_row(ctx, row, names[EMQ_ENQUEUE_DELAYED_KEY_JOB], call->args[EMQ_ENQUEUE_DELAYED_ARG_PAYLOAD], now,
               call->num[EMQ_ENQUEUE_DELAYED_ARG_PRIORITY]);
    fx_zadd(ctx, k[EMQ_ENQUEUE_DELAYED_KEY_DELAYED], names[EMQ_ENQUEUE_DELAYED_KEY_DELAYED],
            (double)(at > due ? at : due), call->args[EMQ_ENQUEUE_DELAYED_ARG_ID]);
    fx_wake(ctx, k[EMQ_ENQUEUE_DELAYED_KEY_WAKE], names[EMQ_ENQUEUE_DELAYED_KEY_WAKE], 1);
    EventSink ev = event_sink(call, k);
    ev_emit(ctx, &ev,
            &(Event){.kind = "enqueued", .id = call->args[EMQ_ENQUEUE_DELAYED_ARG_ID], .due = at > due ? at : due,
                     .priority = call->num[EMQ_ENQUEUE_DELAYED_ARG_PRIORITY], .with = EV_DUE});
    return ValkeyModule_ReplyWithSimpleString(ctx, "ENQUEUED");
}

/* The end hook of a job a single verb ends (include/dependents.lua's plan_hook): planned on a
 * new join after the verb's own checks, before anything is written; *j is set either way (the
 * caller frees it). outcome JOIN_CANCELLED takes the row's cancel mark, JOIN_DEAD the error its
 * dependents quote. NULL, or the error to reply. */
static const char *plan_end_hook(ValkeyModuleCtx *ctx, Call *call, ValkeyModuleKey **k, const EventSink *ev,
                                 int has_now, long long now, ValkeyModuleString *id, ValkeyModuleKey *row,
                                 ValkeyModuleString *row_name, int outcome, ValkeyModuleString *error, Join **j) {
    long long retention = 0, at = 0;
    *j = join_new(ctx, call->base, ev, has_now, now, call->keys, k, call->nkeys);
    if (outcome == JOIN_CANCELLED) join_mark_of(ctx, row, &retention, &at);
    return join_end(*j, id, row_name, outcome, error, retention, at);
}

/* EMQ.ACK 2 <base>active <base>job:<id> <id> <fence:1> <retention_ms:0>
 * Twin of ack.lua. +ACKED | +STALE | EMQARITY EMQKIND EMQKEYS EMQNUM WRONGTYPE. */
int tx_ack(ValkeyModuleCtx *ctx, Call *call, ValkeyModuleKey **k) {
    ValkeyModuleString *id = call->args[EMQ_ACK_ARG_ID], *ended = NULL;
    ValkeyModuleKey *active = k[EMQ_ACK_KEY_ACTIVE], *row = k[EMQ_ACK_KEY_JOB];
    int flagged = row_has(ctx, row, "cancel"), rc;
    long long fence = call->num[EMQ_ACK_ARG_FENCE];
    Join *j = NULL;
    EventSink ev = event_sink(call, k);
    const char *err = flagged ? derive_ended(ctx, call->base, id, &ended) : NULL;
    if (err) {
        rc = reply_error(ctx, err);
    } else if (!is_current_lease(ctx, active, row, id, call->num[EMQ_ACK_ARG_FENCE])) {
        rc = ValkeyModule_ReplyWithSimpleString(ctx, replayed(ctx, row, call->num[EMQ_ACK_ARG_FENCE], NULL, NULL, id));
    } else if ((err = lane_bookkeeping_error(ctx, call->base, row)) != NULL) {
        rc = reply_error(ctx, err);
    } else if ((err = plan_end_hook(ctx, call, k, &ev, 0, 0, id, row, call->keys[EMQ_ACK_KEY_JOB],
                                    flagged ? JOIN_CANCELLED : JOIN_DONE, NULL, &j)) != NULL) {
        rc = reply_error(ctx, err);
    } else if (flagged) {
        rc = ValkeyModule_ReplyWithSimpleString(ctx, finish_cancelled(ctx, active, call->keys[EMQ_ACK_KEY_ACTIVE], row,
                                                                      call->keys[EMQ_ACK_KEY_JOB], id, ended, NULL, &ev,
                                                                      fence));
        join_apply(j);
    } else {
        rc = ValkeyModule_ReplyWithSimpleString(ctx, finish_ack(ctx, active, call->keys[EMQ_ACK_KEY_ACTIVE], row,
                                                                call->keys[EMQ_ACK_KEY_JOB], id,
                                                                call->num[EMQ_ACK_ARG_RETENTION_MS], NULL, NULL, NULL,
                                                                &ev, fence));
        join_apply(j);
    }
    join_free(j);
    if (ended) ValkeyModule_FreeString(ctx, ended);
    return rc;
}

/* The job's ended key, <base>ended:<id>, derived and checked (step 6). NULL, or the error to
 * reply; *ended is set either way and the caller frees it. */
static const char *derive_ended(ValkeyModuleCtx *ctx, Bytes base, ValkeyModuleString *id, ValkeyModuleString **ended) {
    Acl acl = {ctx, NULL, 0};
    *ended = derived_key(ctx, base, "ended:", id);
    const char *err = check_ended(ctx, &acl, base, *ended);
    acl_release(&acl);
    return err;
}

/* EMQ.ACK_RESULT 2 <base>active <base>job:<id> <id> <fence:1> <retention_ms:0> <result>
 * Twin of ack_result.lua. +ACKED | +STALE | EMQARITY EMQKIND EMQKEYS EMQNUM EMQSIZE WRONGTYPE NOPERM
 * TRYAGAIN. As EMQ.ACK, the tombstone keeping result (at most EMQ_RESULT_MAX bytes, checked in
 * step 4); with a tombstone kept, the job's ended key (derived, step 6) wakes its waiters. */
int tx_ack_result(ValkeyModuleCtx *ctx, Call *call, ValkeyModuleKey **k) {
    ValkeyModuleString *id = call->args[EMQ_ACK_RESULT_ARG_ID], *ended;
    ValkeyModuleKey *active = k[EMQ_ACK_RESULT_KEY_ACTIVE], *row = k[EMQ_ACK_RESULT_KEY_JOB];
    const char *err = derive_ended(ctx, call->base, id, &ended);
    long long fence = call->num[EMQ_ACK_RESULT_ARG_FENCE];
    EventSink ev = event_sink(call, k);
    Join *j = NULL;
    int rc;
    if (err) {
        rc = reply_error(ctx, err);
    } else if (!is_current_lease(ctx, active, row, id, call->num[EMQ_ACK_RESULT_ARG_FENCE])) {
        rc = ValkeyModule_ReplyWithSimpleString(ctx, replayed(ctx, row, call->num[EMQ_ACK_RESULT_ARG_FENCE], NULL, NULL, id));
    } else if ((err = lane_bookkeeping_error(ctx, call->base, row)) != NULL) {
        rc = reply_error(ctx, err);
    } else if ((err = plan_end_hook(ctx, call, k, &ev, 0, 0, id, row, call->keys[EMQ_ACK_RESULT_KEY_JOB],
                                    row_has(ctx, row, "cancel") ? JOIN_CANCELLED : JOIN_DONE, NULL, &j)) != NULL) {
        rc = reply_error(ctx, err);
    } else {
        const char *verdict =
            row_has(ctx, row, "cancel")
                ? finish_cancelled(ctx, active, call->keys[EMQ_ACK_RESULT_KEY_ACTIVE], row,
                                   call->keys[EMQ_ACK_RESULT_KEY_JOB], id, ended, NULL, &ev, fence)
                : finish_ack(ctx, active, call->keys[EMQ_ACK_RESULT_KEY_ACTIVE], row, call->keys[EMQ_ACK_RESULT_KEY_JOB],
                             id, call->num[EMQ_ACK_RESULT_ARG_RETENTION_MS], call->args[EMQ_ACK_RESULT_ARG_RESULT],
                             ended, NULL, &ev, fence);
        join_apply(j);
        rc = ValkeyModule_ReplyWithSimpleString(ctx, verdict);
    }
    join_free(j);
    ValkeyModule_FreeString(ctx, ended);
    return rc;
}

/* retry's end hook on a current lease: cancelled for a flagged one, dead for one whose attempts
 * reach max_attempts (its dependents quote the error), none otherwise (an empty plan). */
static const char *plan_retry_hook(ValkeyModuleCtx *ctx, Call *call, ValkeyModuleKey **k, const EventSink *ev,
                                   ValkeyModuleKey *row, Join **j) {
    ValkeyModuleString *id = call->args[EMQ_RETRY_ARG_ID], *row_name = call->keys[EMQ_RETRY_KEY_JOB];
    long long now = call->num[EMQ_RETRY_ARG_NOW];
    if (row_has(ctx, row, "cancel"))
        return plan_end_hook(ctx, call, k, ev, 1, now, id, row, row_name, JOIN_CANCELLED, NULL, j);
    if (row_int_field(ctx, row, ROW_ATTEMPTS, 0) >= call->num[EMQ_RETRY_ARG_MAX_ATTEMPTS])
        return plan_end_hook(ctx, call, k, ev, 1, now, id, row, row_name, JOIN_DEAD, call->args[EMQ_RETRY_ARG_ERROR], j);
    *j = join_new(ctx, call->base, ev, 1, now, call->keys, k, call->nkeys);
    return NULL;
}

/* EMQ.RETRY 4 <base>active <base>delayed <base>dead <base>job:<id>
 *            <id> <fence:1> <delay_ms:0> <max_attempts:1> <error> <now>
 * Twin of retry.lua. +RETRYING | +DEAD | +STALE | EMQARITY EMQKIND EMQKEYS EMQNUM WRONGTYPE NOPERM
 * TRYAGAIN. The job's ended key is derived and checked (step 6): it wakes waiters when the job
 * goes dead. */
int tx_retry(ValkeyModuleCtx *ctx, Call *call, ValkeyModuleKey **k) {
    ValkeyModuleString *id = call->args[EMQ_RETRY_ARG_ID], **names = call->keys, *ended;
    ValkeyModuleKey *row = k[EMQ_RETRY_KEY_JOB];
    const char *err = derive_ended(ctx, call->base, id, &ended);
    EventSink ev = event_sink(call, k);
    Join *j = NULL;
    int rc;
    if (err) {
        rc = reply_error(ctx, err);
    } else if (!is_current_lease(ctx, k[EMQ_RETRY_KEY_ACTIVE], row, id, call->num[EMQ_RETRY_ARG_FENCE])) {
        rc = ValkeyModule_ReplyWithSimpleString(ctx, replayed(ctx, row, call->num[EMQ_RETRY_ARG_FENCE],
                                                              call->args[EMQ_RETRY_ARG_ERROR], k[EMQ_RETRY_KEY_DEAD], id));
    } else if ((err = lane_bookkeeping_error(ctx, call->base, row)) != NULL) {
        rc = reply_error(ctx, err);
    } else if ((err = plan_retry_hook(ctx, call, k, &ev, row, &j)) != NULL) {
        rc = reply_error(ctx, err);
    } else {
        long long fence = call->num[EMQ_RETRY_ARG_FENCE];
        RetryKeys rk = {k[EMQ_RETRY_KEY_ACTIVE],     k[EMQ_RETRY_KEY_DELAYED],     k[EMQ_RETRY_KEY_DEAD],
                        names[EMQ_RETRY_KEY_ACTIVE], names[EMQ_RETRY_KEY_DELAYED], names[EMQ_RETRY_KEY_DEAD],
                        NULL};
        const char *verdict =
            row_has(ctx, row, "cancel")
                ? finish_cancelled(ctx, rk.active, rk.active_name, row, names[EMQ_RETRY_KEY_JOB], id, ended, NULL, &ev,
                                   fence)
                : finish_retry(ctx, &rk, row, names[EMQ_RETRY_KEY_JOB], id, call->args[EMQ_RETRY_ARG_ERROR],
                               call->num[EMQ_RETRY_ARG_DELAY_MS], call->num[EMQ_RETRY_ARG_MAX_ATTEMPTS],
                               call->num[EMQ_RETRY_ARG_NOW], ended, &ev, fence);
        join_apply(j);
        rc = ValkeyModule_ReplyWithSimpleString(ctx, verdict);
    }
    join_free(j);
    ValkeyModule_FreeString(ctx, ended);
    return rc;
}

/* EMQ.EXTEND 2 <base>active <base>job:<id> <id> <fence:1> <lease_ms:1> <now>
 * Twin of extend.lua. +EXTENDED | +CANCELLING (a lease a cancel flagged, extended too) | +STALE | EMQARITY EMQKIND EMQKEYS EMQNUM WRONGTYPE. */
int tx_extend(ValkeyModuleCtx *ctx, Call *call, ValkeyModuleKey **k) {
    ValkeyModuleString *id = call->args[EMQ_EXTEND_ARG_ID];
    ValkeyModuleKey *active = k[EMQ_EXTEND_KEY_ACTIVE];
    if (!is_current_lease(ctx, active, k[EMQ_EXTEND_KEY_JOB], id, call->num[EMQ_EXTEND_ARG_FENCE]))
        return ValkeyModule_ReplyWithSimpleString(ctx, "STALE");
    long long deadline = call->num[EMQ_EXTEND_ARG_NOW] + call->num[EMQ_EXTEND_ARG_LEASE_MS];
    fx_zadd(ctx, active, call->keys[EMQ_EXTEND_KEY_ACTIVE], (double)deadline, id);
    return ValkeyModule_ReplyWithSimpleString(ctx, extended(ctx, k[EMQ_EXTEND_KEY_JOB]));
}

/* ---- Batches: settle and extend_many --------------------------------------------------------- */

/* The declared keys of EMQ.SETTLE, open, and their names, in protocol order. */
typedef struct {
    ValkeyModuleKey **k;
    ValkeyModuleString **names;
} SettleKeys;

/* plan_release_lane of settle.lua: a release item's row that has a lane gets its lane key
 * checked as recover checks it. NULL, or the error to reply. */
static const char *plan_release_lane(ValkeyModuleCtx *ctx, Acl *acl, Bytes base, Item *it) {
    ValkeyModuleKey *row = ValkeyModule_OpenKey(ctx, it->row_name, VALKEYMODULE_READ);
    if (ValkeyModule_KeyType(row) == VALKEYMODULE_KEYTYPE_HASH)
        ValkeyModule_HashGet(row, VALKEYMODULE_HASH_CFIELDS, "lane", &it->lane, NULL);
    ValkeyModule_CloseKey(row);
    if (it->lane == NULL) return NULL;
    it->lane_key = derived_key(ctx, base, "lane:", it->lane);
    return check_lane_keys(ctx, acl, base, it->lane, it->lane_key);
}

/* The end hook of a settle item (plan_item_hook of settle.lua), its row open: an item that ends
 * its job (a current lease, not settled earlier in the call) plans it on the call's join — done
 * for ack and done, dead for a retry using up its attempts, cancelled for a flagged lease; release
 * ends nothing. marks[i]: the join's mark after the item's hook (SIZE_MAX: none); current[i]: the
 * item's lease is current as the call found it. NULL, or the failure of a check. */
static const char *plan_item_hook(ValkeyModuleCtx *ctx, Join *j, ValkeyModuleKey *active, Item *items, long long i,
                                  ValkeyModuleKey *row, size_t *marks, char *current) {
    Item *it = &items[i];
    marks[i] = SIZE_MAX;
    current[i] = 0;
    for (long long m = 0; m < i; m++) {
        Bytes a = bytes_of(ITEM_ID(&items[m])), b = bytes_of(ITEM_ID(it));
        if (current[m] && a.n == b.n && memcmp(a.p, b.p, a.n) == 0) return NULL;
    }
    if (!is_current_lease(ctx, active, row, ITEM_ID(it), ITEM_FENCE(it))) return NULL;
    current[i] = 1;
    int outcome = -1;
    long long retention = 0, at = 0;
    ValkeyModuleString *error = NULL;
    if (row_has(ctx, row, "cancel")) {
        outcome = JOIN_CANCELLED;
        join_mark_of(ctx, row, &retention, &at);
    } else if (it->form == EMQ_SETTLE_FORM_ACK || it->form == EMQ_SETTLE_FORM_DONE) {
        outcome = JOIN_DONE;
    } else if (it->form == EMQ_SETTLE_FORM_RETRY &&
               row_int_field(ctx, row, ROW_ATTEMPTS, 0) >= it->num[EMQ_SETTLE_RETRY_ARG_MAX_ATTEMPTS]) {
        outcome = JOIN_DEAD;
        error = it->args[EMQ_SETTLE_RETRY_ARG_ERROR];
    }
    if (outcome < 0) return NULL;
    const char *err = join_end(j, ITEM_ID(it), it->row_name, outcome, error, retention, at);
    marks[i] = join_mark(j);
    return err;
}

/* check_rows for EMQ.SETTLE: each item's row, then a release item's lane, then the ended key of
 * a done or retry item or of a row a cancel flagged, then its lane bookkeeping, then its end hook
 * (plan_item_hook), in item order. */
static const char *check_settle_rows(ValkeyModuleCtx *ctx, Acl *acl, Bytes base, Item *items, long long n, Join *j,
                                     ValkeyModuleKey *active, size_t *marks, char *current) {
    for (long long i = 0; i < n; i++) {
        Item *it = &items[i];
        it->row_name = derived_key(ctx, base, "job:", ITEM_ID(it));
        const char *err = check_row(ctx, acl, base, it->row_name);
        if (!err && it->form == EMQ_SETTLE_FORM_RELEASE) err = plan_release_lane(ctx, acl, base, it);
        if (!err) {
            ValkeyModuleKey *row = ValkeyModule_OpenKey(ctx, it->row_name, VALKEYMODULE_READ);
            if (it->form == EMQ_SETTLE_FORM_DONE || it->form == EMQ_SETTLE_FORM_RETRY || row_has(ctx, row, "cancel")) {
                it->ended = derived_key(ctx, base, "ended:", ITEM_ID(it));
                err = check_ended(ctx, acl, base, it->ended);
            }
            if (!err) err = check_lane_bookkeeping(ctx, acl, base, row);
            if (!err) err = plan_item_hook(ctx, j, active, items, i, row, marks, current);
            ValkeyModule_CloseKey(row);
        }
        if (err) return err;
    }
    return NULL;
}

/* finish_release of settle.lua, on a current lease: leave active, uncount the attempt (never
 * below 0), back where recover puts an expired lease (a flat job to pending at its enqueued_at in
 * its priority's band, a
 * lane job to its lane's head, the group joining the ring if the lane was empty), a wake token. */
static const char *finish_release(ValkeyModuleCtx *ctx, const SettleKeys *sk, ValkeyModuleKey *row,
                                  const Item *it, long long now, const EventSink *ev) {
    Bytes base = base_of_active(sk->names[EMQ_SETTLE_KEY_ACTIVE]);
    LaneRing ring = {sk->k[EMQ_SETTLE_KEY_RING], sk->names[EMQ_SETTLE_KEY_RING], sk->k[EMQ_SETTLE_KEY_WAKE],
                     sk->names[EMQ_SETTLE_KEY_WAKE]};
    fx_zrem(ctx, sk->k[EMQ_SETTLE_KEY_ACTIVE], sk->names[EMQ_SETTLE_KEY_ACTIVE], ITEM_ID(it));
    release_lane_slot(ctx, base, &ring, row);
    long long attempts = row_int_field(ctx, row, ROW_ATTEMPTS, 0);
    char num[24];
    ValkeyModuleString *uncounted = ValkeyModule_CreateString(ctx, num, decimal(attempts > 0 ? attempts - 1 : 0, num));
    fx_hset1(ctx, row, it->row_name, ROW_ATTEMPTS, uncounted);
    ValkeyModule_FreeString(ctx, uncounted);
    if (it->lane) {
        push_lane(ctx, base, &ring, it->lane, it->lane_key, ITEM_ID(it), VALKEYMODULE_LIST_HEAD, row_priority(ctx, row),
                  row_int_field(ctx, row, ROW_ENQUEUED_AT, now));
    } else {
        long long at = row_int_field(ctx, row, ROW_ENQUEUED_AT, now);
        fx_zadd(ctx, sk->k[EMQ_SETTLE_KEY_PENDING], sk->names[EMQ_SETTLE_KEY_PENDING],
                (double)emq_pending_score(row_priority(ctx, row), at), ITEM_ID(it));
    }
    fx_wake(ctx, sk->k[EMQ_SETTLE_KEY_WAKE], sk->names[EMQ_SETTLE_KEY_WAKE], 1);
    ev_emit(ctx, ev,
            &(Event){.kind = "released", .id = ITEM_ID(it), .attempt = attempts > 0 ? attempts - 1 : 0,
                     .fence = ITEM_FENCE(it), .lane = it->lane, .with = EV_FENCE});
    return "RELEASED";
}

/* Settle one item: its verdict, the effects of ack, retry or release on a current lease. */
static const char *settle_item(ValkeyModuleCtx *ctx, const SettleKeys *sk, const Item *it,
                               long long retention_ms, long long now, const EventSink *ev) {
    ValkeyModuleKey *row = ValkeyModule_OpenKey(ctx, it->row_name, VALKEYMODULE_READ | VALKEYMODULE_WRITE);
    LaneRing ring = {sk->k[EMQ_SETTLE_KEY_RING], sk->names[EMQ_SETTLE_KEY_RING], sk->k[EMQ_SETTLE_KEY_WAKE],
                     sk->names[EMQ_SETTLE_KEY_WAKE]};
    RetryKeys rk = {sk->k[EMQ_SETTLE_KEY_ACTIVE], sk->k[EMQ_SETTLE_KEY_DELAYED], sk->k[EMQ_SETTLE_KEY_DEAD],
                    sk->names[EMQ_SETTLE_KEY_ACTIVE], sk->names[EMQ_SETTLE_KEY_DELAYED],
                    sk->names[EMQ_SETTLE_KEY_DEAD], &ring};
    /* Not the current lease (or one settled earlier in this batch): a replay's verdict, or STALE
     * (a release's always); nothing changes. */
    const char *verdict = "STALE";
    if (!is_current_lease(ctx, rk.active, row, ITEM_ID(it), ITEM_FENCE(it))) {
        if (it->form != EMQ_SETTLE_FORM_RELEASE)
            verdict = replayed(ctx, row, ITEM_FENCE(it),
                               it->form == EMQ_SETTLE_FORM_RETRY ? it->args[EMQ_SETTLE_RETRY_ARG_ERROR] : NULL,
                               rk.dead, ITEM_ID(it));
        else if (cancelled_at(ctx, row, ITEM_FENCE(it)))
            verdict = "CANCELLED";
    } else {
        if (row_has(ctx, row, "cancel"))
            verdict = finish_cancelled(ctx, rk.active, rk.active_name, row, it->row_name, ITEM_ID(it), it->ended, &ring,
                                       ev, ITEM_FENCE(it));
        else if (it->form == EMQ_SETTLE_FORM_RETRY)
            verdict = finish_retry(ctx, &rk, row, it->row_name, ITEM_ID(it), it->args[EMQ_SETTLE_RETRY_ARG_ERROR],
                                   it->num[EMQ_SETTLE_RETRY_ARG_DELAY_MS], it->num[EMQ_SETTLE_RETRY_ARG_MAX_ATTEMPTS],
                                   now, it->ended, ev, ITEM_FENCE(it));
        else if (it->form == EMQ_SETTLE_FORM_RELEASE)
            verdict = finish_release(ctx, sk, row, it, now, ev);
        else
            verdict = finish_ack(ctx, rk.active, rk.active_name, row, it->row_name, ITEM_ID(it), retention_ms,
                                 it->form == EMQ_SETTLE_FORM_DONE ? it->args[EMQ_SETTLE_DONE_ARG_RESULT] : NULL,
                                 it->ended, &ring, ev, ITEM_FENCE(it));
    }
    ValkeyModule_CloseKey(row);
    return verdict;
}

/* EMQ.SETTLE 7|8 <base>active <base>delayed <base>dead <base>pending <base>fence <base>ring <base>wake
 *             [<base>claim:<claim_id>] <now> <retention_ms:0> <lease_ms:1> <count:0> [ack <id> <fence:1> | release <id> <fence:1> |
 *             retry <id> <fence:1> <delay_ms:0> <max_attempts:1> <error>]...
 * Twin of settle.lua. *2 [+verdict...] [[id payload :attempt :fence]...] | EMQARITY EMQKEYS EMQNUM
 * EMQITEM EMQKIND WRONGTYPE EMQFENCE NOPERM TRYAGAIN.
 * Items are applied in order, then up to count jobs leased; everything is checked first. With
 * its claim record and count > 0: a record found answers its leases still held as the jobs (no
 * job is leased); else the leases made are recorded. */
int tx_settle(ValkeyModuleCtx *ctx, Call *call, ValkeyModuleKey **k) {
    long long now = call->num[EMQ_SETTLE_ARG_NOW], retention_ms = call->num[EMQ_SETTLE_ARG_RETENTION_MS],
              lease_ms = call->num[EMQ_SETTLE_ARG_LEASE_MS], count = call->num[EMQ_SETTLE_ARG_COUNT];
    ValkeyModuleKey *pending = k[EMQ_SETTLE_KEY_PENDING];
    long long last_fence = 0;
    const char *fail = NULL;
    Acl acl = {ctx, NULL, 0};
    int paused = 0;
    Recorded recorded = {0};
    if (count > 0) fail = read_record(ctx, &acl, call->base, record_of(call, k), record_name_of(call), &recorded);
    if (recorded.present) count = 0;
    if (!fail && count > 0) fail = queue_paused(ctx, &acl, call->base, &paused);
    if (paused) count = 0;
    QueueLimits limits = {0};
    if (!fail && count > 0) fail = queue_limits(ctx, &acl, call->base, now, &limits);
    if (!fail && count > 0 && !fence_counter(k[EMQ_SETTLE_KEY_FENCE], &last_fence)) fail = EMQ_ERR_FENCE;
    StrList claims = {0}, rows = {0}, ghosts = {0};
    EventSink ev = event_sink(call, k);
    Join *j = join_new(ctx, call->base, &ev, 1, now, call->keys, k, call->nkeys);
    size_t *marks = ValkeyModule_Alloc(((size_t)call->nitems + 1) * sizeof *marks);
    char *current = ValkeyModule_Alloc((size_t)call->nitems + 1);
    if (!fail)
        fail = check_settle_rows(ctx, &acl, call->base, call->items, call->nitems, j, k[EMQ_SETTLE_KEY_ACTIVE], marks,
                                 current);
    if (!fail) fail = plan_claims(ctx, &acl, call->base, pending, count, &claims, &rows, &ghosts);
    /* Each lease takes the next fence: a batch the counter cannot number to its end is refused. */
    if (!fail && last_fence + (long long)claims.n > EMQ_INT_MAX) fail = EMQ_ERR_FENCE;
    acl_release(&acl);
    if (!fail) {
        ValkeyModuleString **names = call->keys;
        SettleKeys sk = {k, names};
        ValkeyModule_ReplyWithArray(ctx, 2);
        ValkeyModule_ReplyWithArray(ctx, call->nitems);
        for (long long i = 0; i < call->nitems; i++) {
            ValkeyModule_ReplyWithSimpleString(ctx, settle_item(ctx, &sk, &call->items[i], retention_ms, now, &ev));
            if (marks[i] != SIZE_MAX) join_apply_to(j, marks[i]);
        }
        for (size_t i = 0; i < ghosts.n; i++) fx_zrem(ctx, pending, names[EMQ_SETTLE_KEY_PENDING], ghosts.v[i]);
        ClaimKeys ck = {pending,
                        k[EMQ_SETTLE_KEY_ACTIVE],
                        &k[EMQ_SETTLE_KEY_FENCE],
                        names[EMQ_SETTLE_KEY_PENDING],
                        names[EMQ_SETTLE_KEY_ACTIVE],
                        names[EMQ_SETTLE_KEY_FENCE]};
        long long first_fence = last_fence + 1;
        if (recorded.present) {
            reply_recorded(ctx, call->base, k[EMQ_SETTLE_KEY_ACTIVE], &recorded, 0);
        } else {
            long long take = count > 0 ? limited_take(&limits, k[EMQ_SETTLE_KEY_ACTIVE], (long long)claims.n) : 0;
            ValkeyModule_ReplyWithArray(ctx, (long)take);
            for (long long i = 0; i < take; i++)
                claim_planned(ctx, &ck, claims.v[i], rows.v[i], &last_fence, now + lease_ms, &ev);
            StrList leased = {claims.v, (size_t)take, claims.cap}; /* a view: claims owns the strings */
            record_claims(ctx, call, k, &leased, first_fence, lease_ms);
            if (count > 0) note_queue_limits(ctx, call->base, &limits, k[EMQ_SETTLE_KEY_ACTIVE], pending, take);
        }
    }
    recorded_free(ctx, &recorded);
    strlist_free(ctx, &claims);
    strlist_free(ctx, &rows);
    strlist_free(ctx, &ghosts);
    join_free(j);
    ValkeyModule_Free(marks);
    ValkeyModule_Free(current);
    return fail ? reply_error(ctx, fail) : VALKEYMODULE_OK;
}

/* Every item's row derived and checked, in order, before anything is written. */
static const char *check_rows(ValkeyModuleCtx *ctx, Acl *acl, Bytes base, Item *items, long long n) {
    for (long long i = 0; i < n; i++) {
        items[i].row_name = derived_key(ctx, base, "job:", ITEM_ID(&items[i]));
        const char *err = check_row(ctx, acl, base, items[i].row_name);
        if (err) return err;
    }
    return NULL;
}

/* EMQ.EXTEND_MANY 1 <base>active <lease_ms:1> <now> [<id> <fence:1> ...]
 * Twin of extend_many.lua. *N +EXTENDED|+CANCELLING|+STALE | EMQARITY EMQKEYS EMQNUM EMQITEM EMQKIND WRONGTYPE
 * NOPERM TRYAGAIN. */
int tx_extend_many(ValkeyModuleCtx *ctx, Call *call, ValkeyModuleKey **k) {
    ValkeyModuleKey *active = k[EMQ_EXTEND_MANY_KEY_ACTIVE];
    long long deadline = call->num[EMQ_EXTEND_MANY_ARG_NOW] + call->num[EMQ_EXTEND_MANY_ARG_LEASE_MS];
    Acl acl = {ctx, NULL, 0};
    const char *fail = check_rows(ctx, &acl, call->base, call->items, call->nitems);
    acl_release(&acl);
    if (fail) return reply_error(ctx, fail);
    ValkeyModule_ReplyWithArray(ctx, call->nitems);
    for (long long i = 0; i < call->nitems; i++) {
        const Item *it = &call->items[i];
        ValkeyModuleKey *row = ValkeyModule_OpenKey(ctx, it->row_name, VALKEYMODULE_READ);
        const char *verdict = is_current_lease(ctx, active, row, ITEM_ID(it), ITEM_FENCE(it)) ? extended(ctx, row) : "STALE";
        ValkeyModule_CloseKey(row);
        if (verdict[0] != 'S') fx_zadd(ctx, active, call->keys[EMQ_EXTEND_MANY_KEY_ACTIVE], (double)deadline, ITEM_ID(it));
        ValkeyModule_ReplyWithSimpleString(ctx, verdict);
    }
    return VALKEYMODULE_OK;
}

/* ---- Moving due jobs: recover and promote ---------------------------------------------------- */

/* One due entry of recover/promote, and its plan (plan_moves of the prelude). */
typedef struct {
    ValkeyModuleString *id;
    double score;                /* where a flat job lands in pending */
    int live;                    /* 0: a ghost, dropped from the source zset */
    long long spent;             /* recover: > 0, the attempts of a job that goes dead */
    ValkeyModuleString *lane;    /* the row's lane field, or NULL for a flat job (or a spent one) */
    ValkeyModuleString *lane_key;
    ValkeyModuleString *ended;   /* recover, a spent or cancelled job: its ended key */
    int cancelled;               /* recover: a lease a cancel flagged, which ends cancelled */
    long long priority, at;      /* a lane job: its row's priority, and the time its score is of */
    size_t mark;                 /* recover, a job it ends: the join's mark after its end hook */
} Move;

static void moves_free(ValkeyModuleCtx *ctx, Move *moves, size_t n) {
    for (size_t i = 0; i < n; i++) {
        ValkeyModule_FreeString(ctx, moves[i].id);
        if (moves[i].lane) ValkeyModule_FreeString(ctx, moves[i].lane);
        if (moves[i].lane_key) ValkeyModule_FreeString(ctx, moves[i].lane_key);
        if (moves[i].ended) ValkeyModule_FreeString(ctx, moves[i].ended);
    }
    ValkeyModule_Free(moves);
}

/* The lane of a live job to be put back: its key checked. NULL or the error. */
static const char *plan_lane(ValkeyModuleCtx *ctx, Acl *acl, Bytes base, Move *m) {
    m->lane_key = derived_key(ctx, base, "lane:", m->lane);
    return check_lane_keys(ctx, acl, base, m->lane, m->lane_key);
}

/* The time a job goes back to run at: its enqueued_at (or now) for recover, its due score for
 * promote, whose integer part is taken, never below 0 (a due score set behind the queue's back:
 * -inf, 1.5); a flat job's place in pending is in the band of its row's priority (pending_at). */
static long long back_at(ValkeyModuleCtx *ctx, ValkeyModuleKey *row, double due, int recover, long long now) {
    return recover ? row_int_field(ctx, row, ROW_ENQUEUED_AT, now) : due > 0 ? (long long)due : 0;
}

static double pending_at(ValkeyModuleCtx *ctx, ValkeyModuleKey *row, double due, int recover, long long now) {
    return (double)emq_pending_score(row_priority(ctx, row), back_at(ctx, row, due, recover, now));
}

/* First pass: sort the due entries into live moves and ghosts, checking every derived key (ACL,
 * the lane's type) before anything is written. recover: a job whose attempts reach max_attempts
 * is spent (it goes dead; its lane is not looked at, its ended key is checked), a flat job's score is its enqueued_at, or
 * now; promote (max_attempts 0): its due time; either in the band of the row's priority. Returns NULL on success, else the error to reply. */
static const char *plan_moves(ValkeyModuleCtx *ctx, Bytes base, Move *moves, size_t n, int recover,
                              long long now, long long max_attempts) {
    Acl acl = {ctx, NULL, 0};
    const char *err = NULL;
    for (size_t i = 0; i < n && err == NULL; i++) {
        Move *m = &moves[i];
        ValkeyModuleString *row_name = derived_key(ctx, base, "job:", m->id);
        if (!acl_may_access(&acl, row_name)) {
            err = EMQ_ERR_PERM;
        } else {
            ValkeyModuleKey *row = ValkeyModule_OpenKey(ctx, row_name, VALKEYMODULE_READ);
            int row_type = ValkeyModule_KeyType(row);
            if (row_type == VALKEYMODULE_KEYTYPE_EMPTY && moved_away(ctx, row_name, base)) {
                err = EMQ_ERR_MOVING;
            } else if (row_type == VALKEYMODULE_KEYTYPE_HASH && recover &&
                       (err = check_lane_bookkeeping(ctx, &acl, base, row)) != NULL) {
                /* a lane lease whose bookkeeping keys cannot be written: refused */
            } else if (row_type == VALKEYMODULE_KEYTYPE_HASH && recover && row_has(ctx, row, "cancel")) {
                m->live = 1;
                m->cancelled = 1;
                m->ended = derived_key(ctx, base, "ended:", m->id);
                err = check_ended(ctx, &acl, base, m->ended);
            } else if (row_type == VALKEYMODULE_KEYTYPE_HASH) {
                m->live = 1;
                long long attempts = max_attempts > 0 ? row_int_field(ctx, row, ROW_ATTEMPTS, 0) : 0;
                if (max_attempts > 0 && attempts >= max_attempts) {
                    m->spent = attempts;
                    m->ended = derived_key(ctx, base, "ended:", m->id);
                    err = check_ended(ctx, &acl, base, m->ended);
                } else {
                    ValkeyModule_HashGet(row, VALKEYMODULE_HASH_CFIELDS, "lane", &m->lane, NULL);
                    if (m->lane) {
                        err = plan_lane(ctx, &acl, base, m);
                        m->priority = row_priority(ctx, row);
                        m->at = back_at(ctx, row, m->score, recover, now);
                    } else {
                        m->score = pending_at(ctx, row, m->score, recover, now);
                    }
                }
            }
            ValkeyModule_CloseKey(row);
        }
        ValkeyModule_FreeString(ctx, row_name);
    }
    acl_release(&acl);
    return err;
}

/* recover: the end hooks of the jobs it ends (a flagged lease cancelled, a spent one dead), planned
 * in the order the moves apply (the last due first), after every move's own keys were checked.
 * NULL, or the failure of a check. */
static const char *plan_move_hooks(ValkeyModuleCtx *ctx, Join *j, Bytes base, Move *moves, size_t n) {
    const char *err = NULL;
    for (size_t i = n; i-- > 0 && err == NULL;) {
        Move *m = &moves[i];
        if (!m->live || !(m->cancelled || m->spent)) continue;
        ValkeyModuleString *row_name = derived_key(ctx, base, "job:", m->id);
        if (m->cancelled) {
            long long retention, at;
            ValkeyModuleKey *row = ValkeyModule_OpenKey(ctx, row_name, VALKEYMODULE_READ);
            join_mark_of(ctx, row, &retention, &at);
            ValkeyModule_CloseKey(row);
            err = join_end(j, m->id, row_name, JOIN_CANCELLED, NULL, retention, at);
        } else {
            char text[96];
            int len = snprintf(text, sizeof text, "lease expired during attempt %lld: the worker was lost", m->spent);
            ValkeyModuleString *error = ValkeyModule_CreateString(ctx, text, (size_t)len);
            err = join_end(j, m->id, row_name, JOIN_DEAD, error, 0, 0);
            ValkeyModule_FreeString(ctx, error);
        }
        m->mark = join_mark(j);
        ValkeyModule_FreeString(ctx, row_name);
    }
    return err;
}

/* recover and promote share their layout: the source zset (recover: active, promote: delayed),
 * pending, ring, wake (recover: then dead), then now and limit (recover: then max_attempts). The
 * shared keys are named by recover's macros; promote's must agree. */
enum {
    MOVE_KEY_SOURCE = EMQ_RECOVER_KEY_ACTIVE,
    MOVE_KEY_PENDING = EMQ_RECOVER_KEY_PENDING,
    MOVE_KEY_RING = EMQ_RECOVER_KEY_RING,
    MOVE_KEY_WAKE = EMQ_RECOVER_KEY_WAKE
};
_Static_assert(EMQ_PROMOTE_KEY_DELAYED == MOVE_KEY_SOURCE && EMQ_PROMOTE_KEY_PENDING == MOVE_KEY_PENDING &&
                   EMQ_PROMOTE_KEY_RING == MOVE_KEY_RING && EMQ_PROMOTE_KEY_WAKE == MOVE_KEY_WAKE &&
                   EMQ_PROMOTE_ARG_NOW == EMQ_RECOVER_ARG_NOW && EMQ_PROMOTE_ARG_LIMIT == EMQ_RECOVER_ARG_LIMIT,
               "recover and promote must share their keys and leading arguments");

/* Second pass, one live move: leave the source zset, then pending or the lane (the group joins
 * the ring's tail when its lane was empty: push_lane of the prelude). */
static void apply_move(ValkeyModuleCtx *ctx, const Move *m, ValkeyModuleKey **k, const Call *call,
                       int lane_end, const EventSink *ev) {
    long long attempt = ev_attempts_of(ctx, ev, call->base, m->id);
    fx_zrem(ctx, k[MOVE_KEY_SOURCE], call->keys[MOVE_KEY_SOURCE], m->id);
    if (lane_end == VALKEYMODULE_LIST_HEAD) { /* recover: the lease leaves active */
        LaneRing ring = {k[MOVE_KEY_RING], call->keys[MOVE_KEY_RING], k[MOVE_KEY_WAKE], call->keys[MOVE_KEY_WAKE]};
        ValkeyModuleString *row_name = derived_key(ctx, call->base, "job:", m->id);
        ValkeyModuleKey *row = ValkeyModule_OpenKey(ctx, row_name, VALKEYMODULE_READ);
        release_lane_slot(ctx, call->base, &ring, row);
        ValkeyModule_CloseKey(row);
        ValkeyModule_FreeString(ctx, row_name);
    }
    if (m->lane) {
        LaneRing ring = {k[MOVE_KEY_RING], call->keys[MOVE_KEY_RING], k[MOVE_KEY_WAKE], call->keys[MOVE_KEY_WAKE]};
        push_lane(ctx, call->base, &ring, m->lane, m->lane_key, m->id, lane_end, m->priority, m->at);
    } else {
        fx_zadd(ctx, k[MOVE_KEY_PENDING], call->keys[MOVE_KEY_PENDING], m->score, m->id);
    }
    const char *kind = lane_end == VALKEYMODULE_LIST_HEAD ? "recovered" : "promoted";
    ev_emit(ctx, ev, &(Event){.kind = kind, .id = m->id, .attempt = attempt, .lane = m->lane});
}

/* recover, a spent job: leave active, record why, go dead at now (retry's dead path; the lane, if
 * any, is left as it is). */
static void apply_death(ValkeyModuleCtx *ctx, Bytes base, const Move *m, ValkeyModuleKey **k,
                        const Call *call, long long now, const EventSink *ev) {
    fx_zrem(ctx, k[EMQ_RECOVER_KEY_ACTIVE], call->keys[EMQ_RECOVER_KEY_ACTIVE], m->id);
    ValkeyModuleString *row_name = derived_key(ctx, base, "job:", m->id);
    ValkeyModuleKey *row = ValkeyModule_OpenKey(ctx, row_name, VALKEYMODULE_READ | VALKEYMODULE_WRITE);
    LaneRing ring = {k[EMQ_RECOVER_KEY_RING], call->keys[EMQ_RECOVER_KEY_RING], k[EMQ_RECOVER_KEY_WAKE],
                     call->keys[EMQ_RECOVER_KEY_WAKE]};
    release_lane_slot(ctx, base, &ring, row);
    char text[96];
    int len = snprintf(text, sizeof text, "lease expired during attempt %lld: the worker was lost", m->spent);
    ValkeyModuleString *error = ValkeyModule_CreateString(ctx, text, (size_t)len);
    fx_hset1(ctx, row, row_name, "error", error);
    ValkeyModule_FreeString(ctx, error);
    ValkeyModule_CloseKey(row);
    ValkeyModule_FreeString(ctx, row_name);
    fx_zadd(ctx, k[EMQ_RECOVER_KEY_DEAD], call->keys[EMQ_RECOVER_KEY_DEAD], (double)now, m->id);
    fx_mark_ended(ctx, m->ended, 0);
    ev_emit(ctx, ev, &(Event){.kind = "dead", .id = m->id, .attempt = m->spent});
}

/* recover, a lease a cancel flagged: leave active, the lane slot given back, the job buried with
 * the retention its flag carries (finish_cancelled's effects). */
static void apply_cancel(ValkeyModuleCtx *ctx, Bytes base, const Move *m, ValkeyModuleKey **k, const Call *call,
                         const EventSink *ev) {
    fx_zrem(ctx, k[EMQ_RECOVER_KEY_ACTIVE], call->keys[EMQ_RECOVER_KEY_ACTIVE], m->id);
    ValkeyModuleString *row_name = derived_key(ctx, base, "job:", m->id);
    ValkeyModuleKey *row = ValkeyModule_OpenKey(ctx, row_name, VALKEYMODULE_READ | VALKEYMODULE_WRITE);
    LaneRing ring = {k[EMQ_RECOVER_KEY_RING], call->keys[EMQ_RECOVER_KEY_RING], k[EMQ_RECOVER_KEY_WAKE],
                     call->keys[EMQ_RECOVER_KEY_WAKE]};
    release_lane_slot(ctx, base, &ring, row);
    long long attempt = ev_attempts(ctx, ev, row);
    bury_cancelled(ctx, row, row_name, m->ended, row_int_field(ctx, row, "cancel", 0));
    ValkeyModule_CloseKey(row);
    ValkeyModule_FreeString(ctx, row_name);
    ev_emit(ctx, ev, &(Event){.kind = "cancelled", .id = m->id, .attempt = attempt});
}

/* recover and promote share their shape: take the source zset's entries with score <= now, lowest
 * first, at most limit; drop ghosts; move the live ones (recover: a spent one to dead); leave a
 * wake token per job put back to run. Replies the live jobs taken. */
static int move_due(ValkeyModuleCtx *ctx, Call *call, ValkeyModuleKey **k, int recover) {
    Bytes base = call->base;
    long long now = call->num[EMQ_RECOVER_ARG_NOW], limit = call->num[EMQ_RECOVER_ARG_LIMIT];
    long long max_attempts = recover ? call->num[EMQ_RECOVER_ARG_MAX_ATTEMPTS] : 0;
    ValkeyModuleKey *source = k[MOVE_KEY_SOURCE], *wake = k[MOVE_KEY_WAKE];

    /* ZRANGEBYSCORE source -inf now WITHSCORES LIMIT 0 limit */
    Move *moves = NULL;
    size_t n = 0, cap = 0;
    if (ValkeyModule_ZsetFirstInScoreRange(source, VALKEYMODULE_NEGATIVE_INFINITE, (double)now, 0, 0) ==
        VALKEYMODULE_OK) {
        while (!ValkeyModule_ZsetRangeEndReached(source) && (long long)n < limit) {
            double score;
            ValkeyModuleString *member = ValkeyModule_ZsetRangeCurrentElement(source, &score);
            if (member == NULL) break;
            if (n == cap) {
                cap = cap ? cap * 2 : 16;
                moves = ValkeyModule_Realloc(moves, cap * sizeof *moves);
            }
            moves[n++] = (Move){member, score, 0, 0, NULL, NULL, NULL, 0, 0, 0, SIZE_MAX};
            if (!ValkeyModule_ZsetRangeNext(source)) break;
        }
        ValkeyModule_ZsetRangeStop(source);
    }

    /* promote: the groups whose rate window has opened, checked after the jobs' keys and before
     * anything is written */
    DueLanes due = {NULL, 0};
    EventSink ev = event_sink(call, k);
    Join *j = recover ? join_new(ctx, base, &ev, 1, now, call->keys, k, call->nkeys) : NULL;
    const char *err = plan_moves(ctx, base, moves, n, recover, now, max_attempts);
    if (err == NULL && recover) err = plan_move_hooks(ctx, j, base, moves, n);
    if (err == NULL && !recover) err = check_reopening(ctx, base);
    if (err == NULL && !recover) err = due_lanes(ctx, base, now, limit, &due);
    if (err) {
        join_free(j);
        due_lanes_free(ctx, &due);
        moves_free(ctx, moves, n);
        return reply_error(ctx, err);
    }

    long long taken = 0, back = 0;
    for (size_t i = 0; i < n; i++) {
        if (!moves[i].live) fx_zrem(ctx, source, call->keys[MOVE_KEY_SOURCE], moves[i].id);
        else taken++;
    }
    /* recover pushes lane jobs at the head, latest deadline first, so a lane keeps their order. */
    for (size_t i = 0; i < n; i++) {
        const Move *m = &moves[recover ? n - 1 - i : i];
        if (!m->live) continue;
        if (m->cancelled) {
            apply_cancel(ctx, base, m, k, call, &ev);
            if (m->mark != SIZE_MAX) join_apply_to(j, m->mark);
        } else if (m->spent) {
            apply_death(ctx, base, m, k, call, now, &ev);
            if (m->mark != SIZE_MAX) join_apply_to(j, m->mark);
        } else {
            apply_move(ctx, m, k, call, recover ? VALKEYMODULE_LIST_HEAD : VALKEYMODULE_LIST_TAIL, &ev);
            back++;
        }
    }
    fx_wake(ctx, wake, call->keys[MOVE_KEY_WAKE], back);
    join_free(j);
    moves_free(ctx, moves, n);
    if (!recover) { /* promote: then the groups whose rate window has opened come back */
        LaneRing ring = {k[MOVE_KEY_RING], call->keys[MOVE_KEY_RING], k[MOVE_KEY_WAKE], call->keys[MOVE_KEY_WAKE]};
        fx_wake(ctx, wake, call->keys[MOVE_KEY_WAKE], reopen_lanes(ctx, base, &ring, &due));
    }
    return ValkeyModule_ReplyWithLongLong(ctx, taken);
}

/* EMQ.RECOVER 5 <base>active <base>pending <base>ring <base>wake <base>dead <now> <limit:1> <max_attempts:1>
 * Twin of recover.lua. :taken (back to run or dead) | EMQARITY EMQKEYS EMQNUM WRONGTYPE NOPERM TRYAGAIN. */
int tx_recover(ValkeyModuleCtx *ctx, Call *call, ValkeyModuleKey **k) {
    return move_due(ctx, call, k, 1);
}

/* EMQ.PROMOTE 4 <base>delayed <base>pending <base>ring <base>wake <now> <limit:1>
 * Twin of promote.lua. :moved | EMQARITY EMQKEYS EMQNUM WRONGTYPE NOPERM TRYAGAIN. */
int tx_promote(ValkeyModuleCtx *ctx, Call *call, ValkeyModuleKey **k) {
    return move_due(ctx, call, k, 0);
}
