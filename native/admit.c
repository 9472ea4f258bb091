/* admit.c: the two single admissions, EMQ.ENQUEUE and EMQ.ENQUEUE_DELAYED (the batch is
 * enqueue_many.c), once validate.c has checked the call and opened its declared keys. Twins of
 * enqueue.lua and enqueue_delayed.lua, following docs/PROTOCOL.md. */
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "trafikey.h"

/* new_row of the scripts (include/admit.lua): the row's one HSET, with expires_at after the
 * priority when the job has a deadline (above 0: expiry_fields). */
static void new_row(ValkeyModuleCtx *ctx, ValkeyModuleKey *row, ValkeyModuleString *row_name,
                    ValkeyModuleString *payload, long long now, long long priority, long long expires_at) {
    if (expires_at == 0) {
        fx_new_row(ctx, row, row_name, payload, now, priority);
        return;
    }
    char num[24];
    static const char *const fields[] = {"expires_at"};
    ValkeyModuleString *value = ValkeyModule_CreateString(ctx, num, decimal(expires_at, num));
    fx_new_row_with(ctx, row, row_name, payload, now, priority, fields, &value, 1);
    ValkeyModule_FreeString(ctx, value);
}

/* EMQ.ENQUEUE 3 <base>job:<id> <base>pending <base>wake <id> <payload> <now> [<priority> [<expires_at>]]
 * Twin of enqueue.lua. +ENQUEUED | +DUPLICATE | EMQARITY EMQKIND EMQKEYS EMQNUM WRONGTYPE.
 * The row keeps a priority other than 0; the job waits in its band of pending. */
int tx_enqueue(ValkeyModuleCtx *ctx, Call *call, ValkeyModuleKey **k) {
    ValkeyModuleString *id = call->args[EMQ_ENQUEUE_ARG_ID], *payload = call->args[EMQ_ENQUEUE_ARG_PAYLOAD];
    ValkeyModuleString **names = call->keys;
    ValkeyModuleKey *row = k[EMQ_ENQUEUE_KEY_JOB];
    long long now = call->num[EMQ_ENQUEUE_ARG_NOW], priority = call->num[EMQ_ENQUEUE_ARG_PRIORITY];
    if (ValkeyModule_KeyType(row) != VALKEYMODULE_KEYTYPE_EMPTY)
        return ValkeyModule_ReplyWithSimpleString(ctx, "DUPLICATE");

    new_row(ctx, row, names[EMQ_ENQUEUE_KEY_JOB], payload, now, priority, call->num[EMQ_ENQUEUE_ARG_EXPIRES_AT]);
    fx_zadd(ctx, k[EMQ_ENQUEUE_KEY_PENDING], names[EMQ_ENQUEUE_KEY_PENDING],
            (double)emq_pending_score(priority, now), id);
    fx_wake(ctx, k[EMQ_ENQUEUE_KEY_WAKE], names[EMQ_ENQUEUE_KEY_WAKE], 1);
    EventSink ev = event_sink(call, k);
    ev_emit(ctx, &ev, &(Event){.kind = "enqueued", .id = id, .priority = priority});
    return ValkeyModule_ReplyWithSimpleString(ctx, "ENQUEUED");
}

/* EMQ.ENQUEUE_DELAYED 3 <base>job:<id> <base>delayed <base>wake <id> <payload> <now> <delay_ms:0> <at_ms:0>
 *     [<priority> [<expires_at>]]
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
    new_row(ctx, row, names[EMQ_ENQUEUE_DELAYED_KEY_JOB], call->args[EMQ_ENQUEUE_DELAYED_ARG_PAYLOAD], now,
            call->num[EMQ_ENQUEUE_DELAYED_ARG_PRIORITY], call->num[EMQ_ENQUEUE_DELAYED_ARG_EXPIRES_AT]);
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
