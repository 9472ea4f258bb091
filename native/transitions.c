/* transitions.c: what each EMQ.* command does once validate.c has checked its call (steps 1-5 of
 * docs/PROTOCOL.md) and opened its declared keys: step 6 (the keys it derives: ACL, slot, type,
 * ghosts), then its effects (effects.c, each replicating itself) and its reply.
 *
 * Each command is the twin of one script in echomq/lua/ and follows docs/PROTOCOL.md: the same keys
 * and arguments, the same validation order, byte-identical replies under RESP2 and RESP3, and the
 * same resulting keyspace for every argument list. Where this file and the Lua differ, the Lua is
 * the reference. A usage line heads each command's function, tx_<name>. This file holds ack, ack
 * with a result, retry and settle; the others have files of their own (admit.c, extend.c, claim.c,
 * moves.c, enqueue_many.c, cancel.c, progress.c, trim_dead.c, after.c, unique.c). */
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

/* The bytes the results a call keeps may still take before the server is over maxmemory
 * (result_room of settlements.lua): unread until the call's first result to keep reads INFO
 * memory, as the calling user (maxmemory less used_memory less mem_not_counted_for_evict, as the
 * server counts it); unbounded when maxmemory is 0 or INFO is refused. */
typedef struct {
    int read, bounded;
    long long left;
} ResultRoom;

/* The decimal after "\n<field>:" in an INFO reply, or -1 when absent (string.match's nil). */
static long long info_field(const char *p, size_t len, const char *field) {
    size_t n = strlen(field);
    for (size_t i = 0; i + n + 2 <= len; i++) {
        if (p[i] != '\n' || memcmp(p + i + 1, field, n) != 0 || p[i + 1 + n] != ':') continue;
        long long v = 0;
        size_t j = i + n + 2, start = j;
        while (j < len && p[j] >= '0' && p[j] <= '9' && v < (1LL << 60)) v = v * 10 + (p[j++] - '0');
        return j > start ? v : -1;
    }
    return -1;
}

/* Whether result fits in the call's room (read at its first result), taking it from the room; an
 * empty result always fits. */
static int result_fits(ValkeyModuleCtx *ctx, ResultRoom *room, ValkeyModuleString *result) {
    if (!room->read) {
        room->read = 1;
        ValkeyModuleCallReply *reply = ValkeyModule_Call(ctx, "INFO", "cC", "memory");
        size_t len = 0;
        const char *p = reply ? ValkeyModule_CallReplyStringPtr(reply, &len) : NULL; /* NULL: refused */
        long long max = p ? info_field(p, len, "maxmemory") : -1;
        if (max > 0) {
            long long used = info_field(p, len, "used_memory"), uncounted = info_field(p, len, "mem_not_counted_for_evict");
            if (used < 0) used = 0;
            if (uncounted < 0) uncounted = 0;
            room->bounded = 1;
            room->left = max - (used > uncounted ? used - uncounted : 0);
        }
        if (reply) ValkeyModule_FreeCallReply(reply);
    }
    if (!room->bounded) return 1;
    size_t n;
    ValkeyModule_StringPtrLen(result, &n);
    if ((long long)n > (room->left > 0 ? room->left : 0)) return 0;
    room->left -= (long long)n;
    return 1;
}

/* finish_ack of the prelude, on a current lease: leave active; the row becomes a tombstone for
 * retention_ms (0: deleted), holding result when one is given (not NULL) and it fits in the
 * call's room (result_fits; else the tombstone's result_dropped field says memory), and then the
 * job's ended key wakes its waiters. HDEL may empty the hash (a row of payload only): then it is
 * gone and PEXPIRE a no-op. */
static const char *finish_ack(ValkeyModuleCtx *ctx, ValkeyModuleKey *active, ValkeyModuleString *active_name,
                              ValkeyModuleKey *row, ValkeyModuleString *row_name, ValkeyModuleString *id,
                              long long retention_ms, ValkeyModuleString *result, ResultRoom *room,
                              ValkeyModuleString *ended, const LaneRing *ring, const EventSink *ev, long long fence) {
    long long attempt = ev_attempts(ctx, ev, row);
    fx_zrem(ctx, active, active_name, id);
    release_lane_slot(ctx, base_of_active(active_name), ring, row);
    if (retention_ms == 0) {
        fx_del(ctx, row, row_name);
    } else {
        if (result && result_fits(ctx, room, result)) {
            fx_hset1(ctx, row, row_name, "result", result);
        } else if (result) {
            ValkeyModuleString *why = ValkeyModule_CreateString(ctx, "memory", 6);
            fx_hset1(ctx, row, row_name, "result_dropped", why);
            ValkeyModule_FreeString(ctx, why);
        }
        fx_drop_payload(ctx, row, row_name);
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
                                                                call->num[EMQ_ACK_ARG_RETENTION_MS], NULL, NULL, NULL, NULL,
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
    ResultRoom room = {0, 0, 0};
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
                             &room, ended, NULL, &ev, fence);
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

/* ---- Batches: settle --------------------------------------------------------------------------- */

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
                               long long retention_ms, long long now, ResultRoom *room, const EventSink *ev) {
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
                                 it->form == EMQ_SETTLE_FORM_DONE ? it->args[EMQ_SETTLE_DONE_ARG_RESULT] : NULL, room,
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
    if (!fail && count > 0 && !fence_counter(ctx, k[EMQ_SETTLE_KEY_FENCE], call->keys[EMQ_SETTLE_KEY_FENCE], &last_fence)) fail = EMQ_ERR_FENCE;
    ClaimWalk w = {0};
    EventSink ev = event_sink(call, k);
    Join *j = join_new(ctx, call->base, &ev, 1, now, call->keys, k, call->nkeys);
    size_t *marks = ValkeyModule_Alloc(((size_t)call->nitems + 1) * sizeof *marks);
    char *current = ValkeyModule_Alloc((size_t)call->nitems + 1);
    if (!fail)
        fail = check_settle_rows(ctx, &acl, call->base, call->items, call->nitems, j, k[EMQ_SETTLE_KEY_ACTIVE], marks,
                                 current);
    if (!fail) fail = plan_claims(ctx, &acl, call->base, pending, count, now, &w);
    size_t expired_from = join_mark(j);
    if (!fail) fail = plan_expired(j, &w);
    size_t expired_to = join_mark(j);
    /* Each lease takes the next fence: a batch the counter cannot number to its end is refused. */
    if (!fail && last_fence + (long long)w.claims.n > EMQ_INT_MAX) fail = EMQ_ERR_FENCE;
    acl_release(&acl);
    if (!fail) {
        ValkeyModuleString **names = call->keys;
        SettleKeys sk = {k, names};
        ResultRoom room = {0, 0, 0};
        ValkeyModule_ReplyWithArray(ctx, 2);
        ValkeyModule_ReplyWithArray(ctx, call->nitems);
        for (long long i = 0; i < call->nitems; i++) {
            ValkeyModule_ReplyWithSimpleString(ctx, settle_item(ctx, &sk, &call->items[i], retention_ms, now, &room, &ev));
            if (marks[i] != SIZE_MAX) join_apply_to(j, marks[i]);
        }
        for (size_t i = 0; i < w.ghosts.n; i++) fx_zrem(ctx, pending, names[EMQ_SETTLE_KEY_PENDING], w.ghosts.v[i]);
        if (expired_to > expired_from) join_apply_to(j, expired_to);
        /* the walk stopped at its bound: a wake token, so a consumer claims again at once */
        if (w.expired.n >= EMQ_EXPIRED_MAX)
            fx_wake(ctx, k[EMQ_SETTLE_KEY_WAKE], names[EMQ_SETTLE_KEY_WAKE], 1);
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
            long long take = count > 0 ? limited_take(&limits, k[EMQ_SETTLE_KEY_ACTIVE], (long long)w.claims.n) : 0;
            ValkeyModule_ReplyWithArray(ctx, (long)take);
            for (long long i = 0; i < take; i++)
                claim_planned(ctx, &ck, w.claims.v[i], w.rows.v[i], &last_fence, now + lease_ms, &ev);
            StrList leased = {w.claims.v, (size_t)take, w.claims.cap}; /* a view: claims owns the strings */
            record_claims(ctx, call, k, &leased, first_fence, lease_ms);
            if (count > 0) note_queue_limits(ctx, call->base, &limits, k[EMQ_SETTLE_KEY_ACTIVE], pending, take);
        }
    }
    recorded_free(ctx, &recorded);
    claim_walk_free(ctx, &w);
    join_free(j);
    ValkeyModule_Free(marks);
    ValkeyModule_Free(current);
    return fail ? reply_error(ctx, fail) : VALKEYMODULE_OK;
}
