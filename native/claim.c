/* claim.c: EMQ.CLAIM, and claim's walk of pending and its lease, shared with settle
 * (transitions.c); the call's claim record (claimrecord.c keeps what it holds). Twin of claim.lua
 * and include/claims.lua, as transitions.c's header says of every command. The walk keeps the
 * name of each live row it checked, so the lease names and opens it once more, not twice. */
#include <string.h>

#include "trafikey.h"

void strlist_push(StrList *l, ValkeyModuleString *s) {
    if (l->n == l->cap) {
        l->cap = l->cap ? l->cap * 2 : 8;
        l->v = ValkeyModule_Realloc(l->v, l->cap * sizeof *l->v);
    }
    l->v[l->n++] = s;
}

void strlist_free(ValkeyModuleCtx *ctx, StrList *l) {
    for (size_t i = 0; i < l->n; i++) ValkeyModule_FreeString(ctx, l->v[i]);
    ValkeyModule_Free(l->v);
    l->v = NULL;
    l->n = l->cap = 0;
}


/* ---- Claiming: claim's walk and lease, shared with settle ------------------------------------ */

/* expired_by of the prelude: whether the row's deadline (expires_at, an integer from 1) is met by
 * now. Absent, 0 or not an integer: no deadline. */
static int expired_by(ValkeyModuleCtx *ctx, ValkeyModuleString *row_name, long long now) {
    ValkeyModuleKey *row = ValkeyModule_OpenKey(ctx, row_name, VALKEYMODULE_READ);
    long long at = row_int_field(ctx, row, "expires_at", 0);
    ValkeyModule_CloseKey(row);
    return at > 0 && at <= now;
}

/* plan_claims of the prelude: walk pending from its lowest entry for up to count live rows (to
 * lease), the ghosts met on the way (to drop) and the rows whose deadline now meets (to end, at
 * most EMQ_EXPIRED_MAX: the walk stops at the bound), checking every row before anything is
 * written. Each live row's name goes to rows, in step with claims; each expired one's id and name
 * to w->expired and w->expired_rows. NULL, or the error to reply. */
const char *plan_claims(ValkeyModuleCtx *ctx, Acl *acl, Bytes base, ValkeyModuleKey *pending, long long count,
                        long long now, ClaimWalk *w) {
    const char *err = NULL;
    if (count == 0 || ValkeyModule_ZsetFirstInScoreRange(pending, VALKEYMODULE_NEGATIVE_INFINITE,
                                                         VALKEYMODULE_POSITIVE_INFINITE, 0, 0) != VALKEYMODULE_OK)
        return NULL;
    while (!ValkeyModule_ZsetRangeEndReached(pending) && (long long)w->claims.n < count &&
           w->expired.n < EMQ_EXPIRED_MAX) {
        double score;
        ValkeyModuleString *member = ValkeyModule_ZsetRangeCurrentElement(pending, &score);
        if (member == NULL) break;
        int t;
        ValkeyModuleString *row = derived_key(ctx, base, "job:", member);
        err = check_key(ctx, acl, base, row, KEYTYPE_ANY, &t);
        if (err || t != VALKEYMODULE_KEYTYPE_HASH) ValkeyModule_FreeString(ctx, row);
        if (err) {
            ValkeyModule_FreeString(ctx, member);
            break;
        }
        if (t != VALKEYMODULE_KEYTYPE_HASH) {
            strlist_push(&w->ghosts, member);
        } else if (expired_by(ctx, row, now)) {
            strlist_push(&w->expired_rows, row);
            strlist_push(&w->expired, member);
        } else {
            strlist_push(&w->rows, row); /* its name kept for the lease */
            strlist_push(&w->claims, member);
        }
        if (!ValkeyModule_ZsetRangeNext(pending)) break;
    }
    ValkeyModule_ZsetRangeStop(pending);
    return err;
}

/* The end of each expired job the walk found, planned on the call's join in walk order (plan_expire
 * of the script each). NULL, or the failure of a check. */
const char *plan_expired(Join *j, const ClaimWalk *w) {
    const char *err = NULL;
    for (size_t i = 0; i < w->expired.n && !err; i++) err = join_expire(j, w->expired.v[i], w->expired_rows.v[i]);
    return err;
}

void claim_walk_free(ValkeyModuleCtx *ctx, ClaimWalk *w) {
    strlist_free(ctx, &w->claims);
    strlist_free(ctx, &w->rows);
    strlist_free(ctx, &w->ghosts);
    strlist_free(ctx, &w->expired);
    strlist_free(ctx, &w->expired_rows);
}

/* Lease one planned job (its row named row_name, the walk's) as claim does and reply [id, payload, attempt, fence]. */
void claim_planned(ValkeyModuleCtx *ctx, const ClaimKeys *ck, ValkeyModuleString *id, ValkeyModuleString *row_name,
                   long long *last_fence, long long deadline, const EventSink *ev) {
    ValkeyModuleKey *row = ValkeyModule_OpenKey(ctx, row_name, VALKEYMODULE_READ | VALKEYMODULE_WRITE);
    fx_zrem(ctx, ck->pending, ck->pending_name, id);
    long long attempt, fence;
    fx_lease(ctx, row, row_name, id, ck->active, ck->active_name, ck->fence, ck->fence_name, *last_fence,
             deadline, &attempt, &fence);
    *last_fence = fence;
    ev_emit(ctx, ev, &(Event){.kind = "claimed", .id = id, .attempt = attempt, .fence = fence, .with = EV_FENCE});
    ValkeyModuleString *payload;
    hash_get1(row, ROW_PAYLOAD, &payload);
    ValkeyModule_ReplyWithArray(ctx, 4);
    ValkeyModule_ReplyWithString(ctx, id);
    if (payload) {
        ValkeyModule_ReplyWithString(ctx, payload);
        ValkeyModule_FreeString(ctx, payload);
    } else {
        ValkeyModule_ReplyWithStringBuffer(ctx, "", 0);
    }
    ValkeyModule_ReplyWithLongLong(ctx, attempt);
    ValkeyModule_ReplyWithLongLong(ctx, fence);
    ValkeyModule_CloseKey(row);
}

/* The call's claim record when it declares one (the key after the table's), else NULL. */
ValkeyModuleKey *record_of(const Call *call, ValkeyModuleKey **k) {
    return call->record_at >= 0 ? k[call->record_at] : NULL;
}

/* Its name (NULL when it declares none). */
ValkeyModuleString *record_name_of(const Call *call) {
    return call->record_at >= 0 ? call->keys[call->record_at] : NULL;
}

/* After a claim leased n jobs (ids, fenced from first_fence on): its record, if it declares one. */
void record_claims(ValkeyModuleCtx *ctx, const Call *call, ValkeyModuleKey **k, const StrList *claims,
                          long long first_fence, long long lease_ms) {
    if (record_of(call, k) == NULL || claims->n == 0) return;
    int at = call->record_at;
    fx_record(ctx, &k[at], call->keys[at], claims->v, claims->n, first_fence, lease_ms);
}

/* EMQ.CLAIM 3|4 <base>pending <base>active <base>fence [<base>claim:<claim_id>] <lease_ms:1> <now>
 * Twin of claim.lua. *4 id payload :attempt :fence | null | EMQARITY EMQKEYS EMQNUM WRONGTYPE
 * EMQFENCE NOPERM TRYAGAIN.
 * Walks pending from its lowest entry (plan_claims for one job); ghosts met on the way are dropped
 * once the walk is over, then each job whose deadline now meets ends dead ("expired", its end hook
 * after it: plan_expired), at most EMQ_EXPIRED_MAX a call: a walk stopped at that bound leaves one
 * wake token (<base>wake, derived and checked after them), so a consumer claims again at once. With its claim record: a record found answers its first lease still
 * held (or null) and nothing is written; else the lease made is recorded. */
int tx_claim(ValkeyModuleCtx *ctx, Call *call, ValkeyModuleKey **k) {
    ValkeyModuleKey *pending = k[EMQ_CLAIM_KEY_PENDING], *active = k[EMQ_CLAIM_KEY_ACTIVE],
                    *fence_key = k[EMQ_CLAIM_KEY_FENCE];
    long long lease_ms = call->num[EMQ_CLAIM_ARG_LEASE_MS], now = call->num[EMQ_CLAIM_ARG_NOW];
    long long last_fence;
    Acl acl = {ctx, NULL, 0};
    Recorded recorded;
    const char *err = read_record(ctx, &acl, call->base, record_of(call, k), record_name_of(call), &recorded);
    if (err || recorded.present) {
        acl_release(&acl);
        if (!err) reply_recorded(ctx, call->base, active, &recorded, 1);
        recorded_free(ctx, &recorded);
        return err ? reply_error(ctx, err) : VALKEYMODULE_OK;
    }
    if (!fence_counter(ctx, fence_key, call->keys[EMQ_CLAIM_KEY_FENCE], &last_fence)) {
        acl_release(&acl);
        return reply_error(ctx, EMQ_ERR_FENCE);
    }
    int paused;
    err = queue_paused(ctx, &acl, call->base, &paused);
    if (err || paused) {
        acl_release(&acl);
        return err ? reply_error(ctx, err) : ValkeyModule_ReplyWithNull(ctx);
    }

    QueueLimits limits;
    err = queue_limits(ctx, &acl, call->base, now, &limits);
    if (err) {
        acl_release(&acl);
        return reply_error(ctx, err);
    }

    /* Find the first live job: every derived row is checked before anything is written, and the
     * end of each expired job met on the way planned. */
    ClaimWalk w = {0};
    EventSink ev = event_sink(call, k);
    Join *j = join_new(ctx, call->base, &ev, 1, now, call->keys, k, call->nkeys);
    err = plan_claims(ctx, &acl, call->base, pending, 1, now, &w);
    if (!err) err = plan_expired(j, &w);
    /* A walk stopped at its bound leaves a wake token: its key checked after the expired jobs'. */
    ValkeyModuleString *wake_name = w.expired.n >= EMQ_EXPIRED_MAX ? derived_key(ctx, call->base, "wake", NULL) : NULL;
    if (!err && wake_name) err = check_key(ctx, &acl, call->base, wake_name, VALKEYMODULE_KEYTYPE_LIST, NULL);
    acl_release(&acl);
    if (!err) {
        ValkeyModuleString **names = call->keys;
        for (size_t i = 0; i < w.ghosts.n; i++) fx_zrem(ctx, pending, names[EMQ_CLAIM_KEY_PENDING], w.ghosts.v[i]);
        join_apply(j);
        if (wake_name) {
            ValkeyModuleKey *wake = ValkeyModule_OpenKey(ctx, wake_name, VALKEYMODULE_READ | VALKEYMODULE_WRITE);
            fx_wake(ctx, wake, wake_name, 1);
            ValkeyModule_CloseKey(wake);
        }
        ClaimKeys ck = {pending,
                        active,
                        &k[EMQ_CLAIM_KEY_FENCE],
                        names[EMQ_CLAIM_KEY_PENDING],
                        names[EMQ_CLAIM_KEY_ACTIVE],
                        names[EMQ_CLAIM_KEY_FENCE]};
        long long first_fence = last_fence + 1;
        long long take = w.claims.n == 0 ? 0 : limited_take(&limits, active, 1);
        if (take == 0) ValkeyModule_ReplyWithNull(ctx);
        else claim_planned(ctx, &ck, w.claims.v[0], w.rows.v[0], &last_fence, now + lease_ms, &ev);
        StrList leased = {w.claims.v, (size_t)take, w.claims.cap}; /* a view: claims owns the strings */
        record_claims(ctx, call, k, &leased, first_fence, lease_ms);
        note_queue_limits(ctx, call->base, &limits, active, pending, take);
    }
    if (wake_name) ValkeyModule_FreeString(ctx, wake_name);
    join_free(j);
    claim_walk_free(ctx, &w);
    return err ? reply_error(ctx, err) : VALKEYMODULE_OK;
}
