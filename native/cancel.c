/* cancel.c: EMQ.CANCEL, the twin of cancel.lua, and the tombstone a cancelled job ends as
 * (bury_cancelled, the twin of include/cancelled.lua), which the settlements share when they end
 * a flagged lease. A job waiting to run leaves its set and is buried at once; a leased one is
 * flagged (the cancel mark on its row) for its holder to be told, and woken by a notice on
 * <base>cancels. */
#include "trafikey.h"

/* bury_cancelled of the prelude: the row drops its payload and expires retention_ms later,
 * keeping its cancel mark (0: the row is deleted), and the job's ended key wakes its waiters. */
const char *bury_cancelled(ValkeyModuleCtx *ctx, ValkeyModuleKey *row, ValkeyModuleString *row_name,
                           ValkeyModuleString *ended, long long retention_ms) {
    if (retention_ms == 0) {
        fx_del(ctx, row, row_name);
        return "CANCELLED";
    }
    fx_drop_payload(ctx, row, row_name);
    fx_pexpire(ctx, row, row_name, retention_ms);
    fx_mark_ended(ctx, ended, retention_ms);
    return "CANCELLED";
}

/* How many entries the cancel notices keep (<base>cancels, exact MAXLEN), CANCELS_MAXLEN of
 * include/cancelled.lua: a consumer that reads them fewer times than this many cancels of running
 * jobs learns the rest at its heartbeat. */
#define EMQ_CANCELS_MAXLEN "1000"

/* notify_holder of the prelude: the notice a flagged lease's holder is woken by, one entry on
 * <base>cancels, `job <id> fence <fence>` (the lease's fence: a notice never matches a later lease
 * of the id). */
static void notify_holder(ValkeyModuleCtx *ctx, ValkeyModuleString *notices, ValkeyModuleString *id,
                          long long fence) {
    char buf[24];
    ValkeyModuleString *fields[4] = {
        ValkeyModule_CreateString(ctx, "job", 3), id, ValkeyModule_CreateString(ctx, "fence", 5),
        ValkeyModule_CreateString(ctx, buf, decimal(fence, buf))};
    fx_xadd_capped(ctx, notices, EMQ_CANCELS_MAXLEN, fields, 4);
    ValkeyModule_FreeString(ctx, fields[0]);
    ValkeyModule_FreeString(ctx, fields[2]);
    ValkeyModule_FreeString(ctx, fields[3]);
}

static int in_zset(ValkeyModuleKey *zset, ValkeyModuleString *member) {
    double score;
    return ValkeyModule_ZsetScore(zset, member, &score) == VALKEYMODULE_OK;
}

/* The verdict on a row whose derived keys passed, and its effects. group, lane: a lane job's
 * group and lane key, else NULL. */
static const char *cancel_job(ValkeyModuleCtx *ctx, Call *call, ValkeyModuleKey **k, ValkeyModuleString *ended,
                              ValkeyModuleString *group, ValkeyModuleString *lane, const char **err) {
    ValkeyModuleString *id = call->args[EMQ_CANCEL_ARG_ID], **names = call->keys;
    ValkeyModuleKey *row = k[EMQ_CANCEL_KEY_JOB];
    long long now = call->num[EMQ_CANCEL_ARG_NOW], retention_ms = call->num[EMQ_CANCEL_ARG_RETENTION_MS];
    if (ValkeyModule_KeyType(row) != VALKEYMODULE_KEYTYPE_HASH) return "UNKNOWN";
    if (in_zset(k[EMQ_CANCEL_KEY_DEAD], id)) return "DEAD";
    if (!row_has(ctx, row, ROW_PAYLOAD)) return row_has(ctx, row, "cancelled") ? "CANCELLED" : "DONE";
    if (in_zset(k[EMQ_CANCEL_KEY_ACTIVE], id)) {
        if (!row_has(ctx, row, "cancel")) {
            /* flagged now: its holder is woken by a notice on <base>cancels (checked before it writes) */
            ValkeyModuleString *notices = derived_key(ctx, call->base, "cancels", NULL);
            Acl acl = {ctx, NULL, 0};
            *err = check_key(ctx, &acl, call->base, notices, VALKEYMODULE_KEYTYPE_STREAM, NULL);
            acl_release(&acl);
            if (*err == NULL) {
                fx_mark_cancel(ctx, row, names[EMQ_CANCEL_KEY_JOB], retention_ms, now);
                notify_holder(ctx, notices, id, row_int_field(ctx, row, ROW_FENCE, 0));
            }
            ValkeyModule_FreeString(ctx, notices);
            if (*err) return NULL;
        }
        return "CANCELLING";
    }
    /* The job ends now: a waiting one (its row counts waits) leaves <base>waiting too, and the end
     * hook runs (dependents.c), planned before anything is written. */
    EventSink ev = event_sink(call, k);
    int waits = row_has(ctx, row, "waits");
    ValkeyModuleString *waiting = waits ? derived_key(ctx, call->base, "waiting", NULL) : NULL;
    if (waiting) {
        Acl acl = {ctx, NULL, 0};
        *err = check_key(ctx, &acl, call->base, waiting, VALKEYMODULE_KEYTYPE_ZSET, NULL);
        acl_release(&acl);
    }
    Join *j = join_new(ctx, call->base, &ev, 1, now, names, k, call->nkeys);
    /* The job ends here: a cycle of dependents that leads back to it finds it ending, not waiting. */
    join_ending(j, id, names[EMQ_CANCEL_KEY_JOB]);
    if (*err == NULL) *err = join_end(j, id, names[EMQ_CANCEL_KEY_JOB], JOIN_CANCELLED, NULL, retention_ms, now);
    if (*err) {
        join_free(j);
        if (waiting) ValkeyModule_FreeString(ctx, waiting);
        return NULL;
    }
    fx_zrem(ctx, k[EMQ_CANCEL_KEY_PENDING], names[EMQ_CANCEL_KEY_PENDING], id);
    fx_zrem(ctx, k[EMQ_CANCEL_KEY_DELAYED], names[EMQ_CANCEL_KEY_DELAYED], id);
    if (waiting) {
        ValkeyModuleKey *key = ValkeyModule_OpenKey(ctx, waiting, VALKEYMODULE_READ | VALKEYMODULE_WRITE);
        fx_zrem(ctx, key, waiting, id);
        ValkeyModule_CloseKey(key);
        ValkeyModule_FreeString(ctx, waiting);
        static const char *const fields[] = {"waits", "hold"};
        fx_hdel_fields(ctx, row, names[EMQ_CANCEL_KEY_JOB], fields, 2);
    }
    if (lane) {
        fx_lrem(ctx, lane, id);
        ValkeyModuleString *prio_name = derived_key(ctx, call->base, "prio:", group);
        ValkeyModuleKey *prio = ValkeyModule_OpenKey(ctx, prio_name, VALKEYMODULE_READ | VALKEYMODULE_WRITE);
        fx_zrem(ctx, prio, prio_name, id);
        ValkeyModule_CloseKey(prio);
        ValkeyModule_FreeString(ctx, prio_name);
        /* a lane left empty leaves the ring (its entry left behind, the ring not walked), so the
         * group joins it once when its lane fills again; a parked group is out of it already */
        if (lane_is_empty(ctx, call->base, group) && !lane_parked(ctx, call->base, group))
            leave_ring(ctx, call->base, group);
    }
    long long attempt = ev_attempts(ctx, &ev, row);
    if (retention_ms > 0) fx_mark_cancel(ctx, row, names[EMQ_CANCEL_KEY_JOB], retention_ms, now);
    bury_cancelled(ctx, row, names[EMQ_CANCEL_KEY_JOB], ended, retention_ms);
    ev_emit(ctx, &ev, &(Event){.kind = "cancelled", .id = id, .attempt = attempt});
    join_apply(j);
    join_free(j);
    return "CANCELLED";
}

/* EMQ.CANCEL 6 <base>job:<id> <base>pending <base>delayed <base>active <base>dead <base>ring <id> <now> <retention_ms:0>
 * Twin of cancel.lua. +CANCELLED | +CANCELLING | +DONE | +DEAD | +UNKNOWN | EMQARITY EMQKIND EMQKEYS
 * EMQNUM WRONGTYPE NOPERM TRYAGAIN. Step 6: the job's ended key, then a lane job's lane, its prio
 * zset, <base>parked and <base>ringleft; a lease flagged now, <base>cancels (stream). */
int tx_cancel(ValkeyModuleCtx *ctx, Call *call, ValkeyModuleKey **k) {
    ValkeyModuleString *id = call->args[EMQ_CANCEL_ARG_ID], *group = NULL, *lane = NULL;
    ValkeyModuleKey *row = k[EMQ_CANCEL_KEY_JOB];
    ValkeyModuleString *ended = derived_key(ctx, call->base, "ended:", id);
    Acl acl = {ctx, NULL, 0};
    const char *err = check_ended(ctx, &acl, call->base, ended);
    if (!err && ValkeyModule_KeyType(row) == VALKEYMODULE_KEYTYPE_HASH)
        ValkeyModule_HashGet(row, VALKEYMODULE_HASH_CFIELDS, "lane", &group, NULL);
    if (!err && group) {
        lane = derived_key(ctx, call->base, "lane:", group);
        err = check_lane_keys(ctx, &acl, call->base, group, lane);
        if (!err) err = check_named_key(ctx, &acl, call->base, "parked", NULL, VALKEYMODULE_KEYTYPE_HASH, NULL);
        if (!err) err = check_named_key(ctx, &acl, call->base, "ringleft", NULL, VALKEYMODULE_KEYTYPE_HASH, NULL);
    }
    acl_release(&acl);
    const char *verdict = err ? NULL : cancel_job(ctx, call, k, ended, group, lane, &err);
    int rc = err ? reply_error(ctx, err) : ValkeyModule_ReplyWithSimpleString(ctx, verdict);
    if (group) ValkeyModule_FreeString(ctx, group);
    if (lane) ValkeyModule_FreeString(ctx, lane);
    ValkeyModule_FreeString(ctx, ended);
    return rc;
}
