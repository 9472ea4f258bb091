/* moves.c: recover and promote, the two transitions that move due jobs (EMQ.RECOVER: expired leases
 * back to pending, or dead at their last attempt; EMQ.PROMOTE: due delayed jobs to pending), once
 * validate.c has checked the call and opened its declared keys. Twins of recover.lua and
 * promote.lua, following docs/PROTOCOL.md; where they differ, the Lua is the reference. */
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "trafikey.h"

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
