/* enqueue_many.c: EMQ.ENQUEUE_MANY, a producer's batch in one call. Each job is admitted exactly as
 * EMQ.ENQUEUE (delay_ms 0) or EMQ.ENQUEUE_DELAYED (delay_ms above 0, no at_ms) would admit it, in
 * list order, with its verdict; the wake tokens come last, one per job admitted (bounded as
 * enqueue's), so the queue ends as the same enqueues one by one would leave it. */
#include "trafikey.h"

/* EMQ.ENQUEUE_MANY 3 <base>pending <base>delayed <base>wake <now> [<id> <payload> <delay_ms:0> <priority> ...]
 * Twin of enqueue_many.lua. *N +ENQUEUED|+DUPLICATE | EMQARITY EMQKEYS EMQNUM EMQITEM EMQKIND WRONGTYPE
 * NOPERM TRYAGAIN. Every job's row (<base>job:<id>, derived) is checked, in list order, before
 * anything is written; an id met earlier in the call is a DUPLICATE, its row being there by then. */
int tx_enqueue_many(ValkeyModuleCtx *ctx, Call *call, ValkeyModuleKey **k) {
    ValkeyModuleString **names = call->keys;
    long long now = call->num[EMQ_ENQUEUE_MANY_ARG_NOW];
    Acl acl = {ctx, NULL, 0};
    const char *fail = NULL;
    for (long long i = 0; i < call->nitems && fail == NULL; i++) {
        Item *it = &call->items[i];
        it->row_name = derived_key(ctx, call->base, "job:", ITEM_ID(it));
        fail = check_row(ctx, &acl, call->base, it->row_name);
    }
    acl_release(&acl);
    if (fail) return reply_error(ctx, fail);

    EventSink ev = event_sink(call, k);
    long long admitted = 0;
    ValkeyModule_ReplyWithArray(ctx, call->nitems);
    for (long long i = 0; i < call->nitems; i++) {
        const Item *it = &call->items[i];
        ValkeyModuleKey *row = ValkeyModule_OpenKey(ctx, it->row_name, VALKEYMODULE_READ | VALKEYMODULE_WRITE);
        if (ValkeyModule_KeyType(row) != VALKEYMODULE_KEYTYPE_EMPTY) {
            ValkeyModule_CloseKey(row);
            ValkeyModule_ReplyWithSimpleString(ctx, "DUPLICATE");
            continue;
        }
        long long delay_ms = it->num[EMQ_ENQUEUE_MANY_ITEM_ARG_DELAY_MS];
        long long priority = it->num[EMQ_ENQUEUE_MANY_ITEM_ARG_PRIORITY];
        fx_new_row(ctx, row, it->row_name, it->args[EMQ_ENQUEUE_MANY_ITEM_ARG_PAYLOAD], now, priority);
        ValkeyModule_CloseKey(row);
        if (delay_ms == 0) {
            fx_zadd(ctx, k[EMQ_ENQUEUE_MANY_KEY_PENDING], names[EMQ_ENQUEUE_MANY_KEY_PENDING],
                    (double)emq_pending_score(priority, now), ITEM_ID(it));
            ev_emit(ctx, &ev, &(Event){.kind = "enqueued", .id = ITEM_ID(it), .priority = priority});
        } else {
            fx_zadd(ctx, k[EMQ_ENQUEUE_MANY_KEY_DELAYED], names[EMQ_ENQUEUE_MANY_KEY_DELAYED],
                    (double)(now + delay_ms), ITEM_ID(it));
            ev_emit(ctx, &ev,
                    &(Event){.kind = "enqueued", .id = ITEM_ID(it), .due = now + delay_ms, .priority = priority,
                             .with = EV_DUE});
        }
        admitted++;
        ValkeyModule_ReplyWithSimpleString(ctx, "ENQUEUED");
    }
    fx_wake(ctx, k[EMQ_ENQUEUE_MANY_KEY_WAKE], names[EMQ_ENQUEUE_MANY_KEY_WAKE], admitted);
    return VALKEYMODULE_OK;
}
