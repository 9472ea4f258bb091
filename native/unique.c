/* unique.c: the logic of EMQ.ENQUEUE_UNIQUE, an enqueue once per dedupe key (the twin of
 * echomq/lua/enqueue_unique.lua): dedupe, debounce and throttle. Reads here; every write through
 * effects.c. */
#include <string.h>

#include "trafikey.h"

enum { MODE_DEDUPE, MODE_DEBOUNCE, MODE_THROTTLE }; /* the mode argument, as validate.c reads it */

/* The job the dedupe key names (GET, as the script reads it), when its value is an id of the kind
 * gate: the id and its row's name, both owned by the caller; NULL otherwise. */
static ValkeyModuleString *holder_of(ValkeyModuleCtx *ctx, ValkeyModuleString *dedupe_name, Bytes base,
                                     ValkeyModuleString **row_name) {
    ValkeyModuleString *id = NULL;
    size_t len = 0;
    ValkeyModuleCallReply *reply = ValkeyModule_Call(ctx, "GET", "s", dedupe_name);
    const char *p = reply ? ValkeyModule_CallReplyStringPtr(reply, &len) : NULL;
    if (p != NULL && emq_id_ok(p, len)) id = ValkeyModule_CreateString(ctx, p, len);
    if (reply) ValkeyModule_FreeCallReply(reply);
    *row_name = id ? derived_key(ctx, base, "job:", id) : NULL;
    return id;
}

static int key_exists(ValkeyModuleCtx *ctx, ValkeyModuleString *name) {
    ValkeyModuleKey *key = ValkeyModule_OpenKey(ctx, name, VALKEYMODULE_READ);
    int t = ValkeyModule_KeyType(key);
    ValkeyModule_CloseKey(key);
    return t != VALKEYMODULE_KEYTYPE_EMPTY;
}

/* The job admitted: its row (with the dedupe fields given), into delayed at due, or pending at its
 * priority's band when due < 0; then, when set, the dedupe key holding it (for px ms when px > 0),
 * one wake token and the enqueued entry. */
static int admit(ValkeyModuleCtx *ctx, Call *call, ValkeyModuleKey **k, long long due, int fields, int set,
                 long long px) {
    ValkeyModuleString **names = call->keys, *id = call->args[EMQ_ENQUEUE_UNIQUE_ARG_ID];
    long long now = call->num[EMQ_ENQUEUE_UNIQUE_ARG_NOW], priority = call->num[EMQ_ENQUEUE_UNIQUE_ARG_PRIORITY];
    long long period = call->num[EMQ_ENQUEUE_UNIQUE_ARG_PERIOD_MS];
    Bytes dkey = bytes_of(names[EMQ_ENQUEUE_UNIQUE_KEY_DEDUPE]);
    static const char *const extra[] = {"dedupe", "dedupe_ms"};
    char num[24];
    ValkeyModuleString *values[2];
    values[0] = ValkeyModule_CreateString(ctx, dkey.p + call->base.n, dkey.n - call->base.n);
    values[1] = ValkeyModule_CreateString(ctx, num, decimal(period, num));
    size_t nextra = fields == 0 ? 0 : fields == 2 && period > 0 ? 2 : 1;
    fx_new_row_with(ctx, k[EMQ_ENQUEUE_UNIQUE_KEY_JOB], names[EMQ_ENQUEUE_UNIQUE_KEY_JOB],
                    call->args[EMQ_ENQUEUE_UNIQUE_ARG_PAYLOAD], now, priority, extra, values, nextra);
    ValkeyModule_FreeString(ctx, values[0]);
    ValkeyModule_FreeString(ctx, values[1]);
    if (due >= 0)
        fx_zadd(ctx, k[EMQ_ENQUEUE_UNIQUE_KEY_DELAYED], names[EMQ_ENQUEUE_UNIQUE_KEY_DELAYED], (double)due, id);
    else
        fx_zadd(ctx, k[EMQ_ENQUEUE_UNIQUE_KEY_PENDING], names[EMQ_ENQUEUE_UNIQUE_KEY_PENDING],
                (double)emq_pending_score(priority, now), id);
    if (set) fx_set_string(ctx, &k[EMQ_ENQUEUE_UNIQUE_KEY_DEDUPE], names[EMQ_ENQUEUE_UNIQUE_KEY_DEDUPE], id, px);
    fx_wake(ctx, k[EMQ_ENQUEUE_UNIQUE_KEY_WAKE], names[EMQ_ENQUEUE_UNIQUE_KEY_WAKE], 1);
    EventSink ev = event_sink(call, k);
    ev_emit(ctx, &ev,
            &(Event){.kind = "enqueued", .id = id, .due = due, .priority = priority, .with = due >= 0 ? EV_DUE : 0});
    return ValkeyModule_ReplyWithSimpleString(ctx, "ENQUEUED");
}

/* debounce on a job still in delayed: its payload replaced, its due time moved, the debounced
 * entry. */
static int debounced(ValkeyModuleCtx *ctx, Call *call, ValkeyModuleKey **k, ValkeyModuleString *holder,
                     ValkeyModuleString *row_name, long long due) {
    ValkeyModuleKey *row = ValkeyModule_OpenKey(ctx, row_name, VALKEYMODULE_READ | VALKEYMODULE_WRITE);
    fx_hset1(ctx, row, row_name, ROW_PAYLOAD, call->args[EMQ_ENQUEUE_UNIQUE_ARG_PAYLOAD]);
    fx_zadd(ctx, k[EMQ_ENQUEUE_UNIQUE_KEY_DELAYED], call->keys[EMQ_ENQUEUE_UNIQUE_KEY_DELAYED], (double)due, holder);
    EventSink ev = event_sink(call, k);
    ev_emit(ctx, &ev,
            &(Event){.kind = "debounced", .id = holder, .attempt = ev_attempts(ctx, &ev, row), .due = due,
                     .with = EV_DUE});
    ValkeyModule_CloseKey(row);
    return ValkeyModule_ReplyWithSimpleString(ctx, "DEBOUNCED");
}

static int decide(ValkeyModuleCtx *ctx, Call *call, ValkeyModuleKey **k, ValkeyModuleString *holder,
                  ValkeyModuleString *holder_row) {
    long long mode = call->num[EMQ_ENQUEUE_UNIQUE_ARG_MODE], now = call->num[EMQ_ENQUEUE_UNIQUE_ARG_NOW];
    long long period = call->num[EMQ_ENQUEUE_UNIQUE_ARG_PERIOD_MS], delay = call->num[EMQ_ENQUEUE_UNIQUE_ARG_DELAY_MS];
    ValkeyModuleKey *dedupe = k[EMQ_ENQUEUE_UNIQUE_KEY_DEDUPE];
    int taken = ValkeyModule_KeyType(dedupe) != VALKEYMODULE_KEYTYPE_EMPTY;
    long long later = delay > 0 ? now + delay : -1;
    if (ValkeyModule_KeyType(k[EMQ_ENQUEUE_UNIQUE_KEY_JOB]) != VALKEYMODULE_KEYTYPE_EMPTY)
        return ValkeyModule_ReplyWithSimpleString(ctx, "DUPLICATE");
    if (mode == MODE_DEDUPE) {
        if (taken && ((holder_row && key_exists(ctx, holder_row)) ||
                      ValkeyModule_GetAbsExpire(dedupe) != -1))
            return ValkeyModule_ReplyWithSimpleString(ctx, "DUPLICATE");
        return admit(ctx, call, k, later, 2, 1, 0);
    }
    if (mode == MODE_DEBOUNCE) {
        long long due = now + period + delay;
        double score;
        if (holder && ValkeyModule_ZsetScore(k[EMQ_ENQUEUE_UNIQUE_KEY_DELAYED], holder, &score) == VALKEYMODULE_OK &&
            key_exists(ctx, holder_row))
            return debounced(ctx, call, k, holder, holder_row, due);
        return admit(ctx, call, k, due, 1, 1, 0);
    }
    if (taken) return ValkeyModule_ReplyWithSimpleString(ctx, "THROTTLED");
    return admit(ctx, call, k, later, 0, period > 0, period);
}

/* EMQ.ENQUEUE_UNIQUE 5|6 <base>pending <base>delayed <base>job:<id> <base>wake <base>dedupe:<key>
 *     [<base>events] <id> <payload> <now> <mode> <period_ms:0> <delay_ms:0> [<priority>]
 * Twin of enqueue_unique.lua. +ENQUEUED | +DUPLICATE | +DEBOUNCED | +THROTTLED | EMQARITY EMQKIND
 * EMQKEYS EMQNUM EMQMODE WRONGTYPE NOPERM TRYAGAIN.
 * Step 6 (dedupe, debounce): the row of the job the dedupe key names, absent or a hash. */
int tx_enqueue_unique(ValkeyModuleCtx *ctx, Call *call, ValkeyModuleKey **k) {
    ValkeyModuleString *holder = NULL, *holder_row = NULL;
    if (call->num[EMQ_ENQUEUE_UNIQUE_ARG_MODE] != MODE_THROTTLE &&
        ValkeyModule_KeyType(k[EMQ_ENQUEUE_UNIQUE_KEY_DEDUPE]) != VALKEYMODULE_KEYTYPE_EMPTY) {
        holder = holder_of(ctx, call->keys[EMQ_ENQUEUE_UNIQUE_KEY_DEDUPE], call->base, &holder_row);
        if (holder) {
            Acl acl = {ctx, NULL, 0};
            const char *err = check_row(ctx, &acl, call->base, holder_row);
            acl_release(&acl);
            if (err) {
                ValkeyModule_FreeString(ctx, holder);
                ValkeyModule_FreeString(ctx, holder_row);
                return reply_error(ctx, err);
            }
        }
    }
    int r = decide(ctx, call, k, holder, holder_row);
    if (holder) ValkeyModule_FreeString(ctx, holder);
    if (holder_row) ValkeyModule_FreeString(ctx, holder_row);
    return r;
}
