/* after.c: EMQ.ENQUEUE_AFTER and EMQ.AFTER, the twins of enqueue_after.lua and after.lua: a job
 * admitted to wait for its parents, and its parents registered (the join's plan and moves are
 * dependents.c's, shared with the end hook of every transition that ends a job). */
#include <string.h>

#include "trafikey.h"

/* EMQ.ENQUEUE_AFTER 2|3 <base>waiting <base>job:<id> [<base>events] <id> <payload> <now> <policy> [<priority>]
 * Twin of enqueue_after.lua. +WAITING | +DUPLICATE | EMQARITY EMQKIND EMQKEYS EMQNUM EMQPOLICY
 * WRONGTYPE. The row is an enqueue's (one HSET), then waits 1, hold 1 and the policy unless fail
 * (a second HSET); the job waits in <base>waiting at now. */
int tx_enqueue_after(ValkeyModuleCtx *ctx, Call *call, ValkeyModuleKey **k) {
    ValkeyModuleString *id = call->args[EMQ_ENQUEUE_AFTER_ARG_ID], **names = call->keys;
    ValkeyModuleString *policy = call->args[EMQ_ENQUEUE_AFTER_ARG_POLICY];
    ValkeyModuleKey *row = k[EMQ_ENQUEUE_AFTER_KEY_JOB];
    long long now = call->num[EMQ_ENQUEUE_AFTER_ARG_NOW], priority = call->num[EMQ_ENQUEUE_AFTER_ARG_PRIORITY];
    if (ValkeyModule_KeyType(row) != VALKEYMODULE_KEYTYPE_EMPTY)
        return ValkeyModule_ReplyWithSimpleString(ctx, "DUPLICATE");

    fx_new_row(ctx, row, names[EMQ_ENQUEUE_AFTER_KEY_JOB], call->args[EMQ_ENQUEUE_AFTER_ARG_PAYLOAD], now, priority);
    static const char *const fields[] = {"waits", "hold", "policy"};
    ValkeyModuleString *values[] = {s_one, s_one, policy};
    Bytes p = bytes_of(policy);
    int fail = p.n == 4 && memcmp(p.p, "fail", 4) == 0;
    fx_hset_fields(ctx, row, names[EMQ_ENQUEUE_AFTER_KEY_JOB], fields, values, fail ? 2 : 3);
    fx_zadd(ctx, k[EMQ_ENQUEUE_AFTER_KEY_WAITING], names[EMQ_ENQUEUE_AFTER_KEY_WAITING], (double)now, id);
    EventSink ev = event_sink(call, k);
    ev_emit(ctx, &ev, &(Event){.kind = "waiting", .id = id, .priority = priority});
    return ValkeyModule_ReplyWithSimpleString(ctx, "WAITING");
}

static int in_zset(ValkeyModuleKey *zset, ValkeyModuleString *member) {
    double score;
    return ValkeyModule_ZsetScore(zset, member, &score) == VALKEYMODULE_OK;
}

static int same(ValkeyModuleString *a, ValkeyModuleString *b) {
    Bytes x = bytes_of(a), y = bytes_of(b);
    return x.n == y.n && memcmp(x.p, y.p, x.n) == 0;
}

/* A row field, or NULL (the row open, any type); the caller frees it. */
static ValkeyModuleString *hget(ValkeyModuleKey *row, const char *field) {
    ValkeyModuleString *v = NULL;
    if (ValkeyModule_KeyType(row) == VALKEYMODULE_KEYTYPE_HASH)
        ValkeyModule_HashGet(row, VALKEYMODULE_HASH_CFIELDS, field, &v, NULL);
    return v;
}

/* One parent p of the waiting job id, planned (the parent's row checked in step 6). Returns the
 * verdict it leads to, or NULL when it changes none. */
static const char *plan_parent(ValkeyModuleCtx *ctx, Join *j, Call *call, ValkeyModuleKey **k, ValkeyModuleString *p,
                               int policy_continue, int policy_ignore) {
    ValkeyModuleString *id = call->args[EMQ_AFTER_ARG_ID];
    ValkeyModuleString *prow_name = derived_key(ctx, call->base, "job:", p);
    ValkeyModuleKey *prow = ValkeyModule_OpenKey(ctx, prow_name, VALKEYMODULE_READ);
    const char *verdict = NULL;
    int live = row_has(ctx, prow, ROW_PAYLOAD);
    if (ValkeyModule_KeyType(prow) == VALKEYMODULE_KEYTYPE_EMPTY) {
        /* done, forgotten */
    } else if (in_zset(k[EMQ_AFTER_KEY_DEAD], p)) {
        if (policy_continue) {
            join_release(j, id);
            verdict = "READY";
        } else if (!policy_ignore) {
            ValkeyModuleString *error = hget(prow, "error");
            join_fail(j, id, p, error);
            if (error) ValkeyModule_FreeString(ctx, error);
            verdict = "DEAD";
        }
    } else if (!live) {
        if (row_has(ctx, prow, "cancelled")) {
            long long retention = row_int_field(ctx, prow, "cancel", 0), at = row_int_field(ctx, prow, "cancelled", 0);
            join_cancel(j, id, retention, at);
            verdict = "CANCELLED";
        } /* else done: a tombstone */
    } else { /* live */
        ValkeyModuleString *next = hget(prow, "next");
        if (!join_linked(j, p, next, id)) join_link(j, p, prow_name, id);
        if (next) ValkeyModule_FreeString(ctx, next);
    }
    ValkeyModule_CloseKey(prow);
    ValkeyModule_FreeString(ctx, prow_name);
    return verdict;
}

/* EMQ.AFTER 5|6 <base>waiting <base>pending <base>dead <base>job:<id> <base>wake [<base>events] <id> <now> <seal:0>
 *           [<parent> ...]
 * Twin of after.lua. +WAITING | +READY | +DEAD | +CANCELLED | +NOTWAITING | +SEALED | EMQARITY
 * EMQKIND EMQKEYS EMQNUM WRONGTYPE NOPERM TRYAGAIN. Step 6: each parent's row, in order; then
 * the keys the join derives (dependents.c), as it plans. */
int tx_after(ValkeyModuleCtx *ctx, Call *call, ValkeyModuleKey **k) {
    ValkeyModuleString *id = call->args[EMQ_AFTER_ARG_ID];
    ValkeyModuleKey *row = k[EMQ_AFTER_KEY_JOB];
    long long now = call->num[EMQ_AFTER_ARG_NOW], seal = call->num[EMQ_AFTER_ARG_SEAL];
    Acl acl = {ctx, NULL, 0};
    const char *err = NULL;
    for (long long i = 0; i < call->nitems && err == NULL; i++) {
        Item *it = &call->items[i];
        it->row_name = derived_key(ctx, call->base, "job:", ITEM_ID(it));
        err = check_row(ctx, &acl, call->base, it->row_name);
    }
    acl_release(&acl);
    if (err) return reply_error(ctx, err);
    if (!in_zset(k[EMQ_AFTER_KEY_WAITING], id)) return ValkeyModule_ReplyWithSimpleString(ctx, "NOTWAITING");
    if (!row_has(ctx, row, "hold")) return ValkeyModule_ReplyWithSimpleString(ctx, "SEALED");

    long long waits;
    if (!row_count_field(ctx, row, "waits", &waits)) return reply_error(ctx, waits_error());

    EventSink ev = event_sink(call, k);
    Join *j = join_new(ctx, call->base, &ev, 1, now, call->keys, k, call->nkeys);
    ValkeyModuleString *policy = hget(row, "policy");
    join_waiter(j, id, call->keys[EMQ_AFTER_KEY_JOB], waits, 1, policy);
    Bytes pb = policy ? bytes_of(policy) : (Bytes){"fail", 4};
    int policy_continue = pb.n == 8 && memcmp(pb.p, "continue", 8) == 0;
    int policy_ignore = pb.n == 6 && memcmp(pb.p, "ignore", 6) == 0;
    if (policy) ValkeyModule_FreeString(ctx, policy);
    const char *verdict = "WAITING";
    for (long long i = 0; i < call->nitems && join_failure(j) == NULL; i++) {
        if (!join_waiting(j, id)) break;
        ValkeyModuleString *p = ITEM_ID(&call->items[i]);
        if (same(p, id)) continue;
        const char *v = plan_parent(ctx, j, call, k, p, policy_continue, policy_ignore);
        if (v) verdict = v;
    }
    if (join_failure(j) == NULL && seal != 0 && join_waiting(j, id)) {
        if (join_waits(j, id) - 1 <= 0) {
            join_release(j, id);
            verdict = "READY";
        } else {
            join_seal(j, id);
        }
    }
    err = join_failure(j);
    if (err == NULL) join_apply(j);
    join_free(j);
    return err ? reply_error(ctx, err) : ValkeyModule_ReplyWithSimpleString(ctx, verdict);
}
