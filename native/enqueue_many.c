/* enqueue_many.c: EMQ.ENQUEUE_MANY, a producer's batch in one call. Each job is admitted exactly as
 * EMQ.ENQUEUE (delay_ms 0) or EMQ.ENQUEUE_DELAYED (delay_ms above 0, no at_ms) would admit it, in
 * list order, with its verdict; the wake tokens come last, one per job admitted (bounded as
 * enqueue's), so the queue ends as the same enqueues one by one would leave it.
 *
 * Each row is opened once: checked (step 6) through the handle its write then uses. A handle
 * opened on an absent key does not see a key another handle creates, so an id given twice is told
 * apart before the writes: the jobs sorted by id (then place), each repeat of an id after its
 * first place is a DUPLICATE (its row is there by the time its turn comes). */
#include <stdlib.h>
#include <string.h>

#include "trafikey.h"

/* A job's id and its place in the list, sorted by id then place. */
typedef struct {
    Bytes id;
    long long at;
} Placed;

static int by_id_then_place(const void *a, const void *b) {
    const Placed *x = a, *y = b;
    size_t n = x->id.n < y->id.n ? x->id.n : y->id.n;
    int c = memcmp(x->id.p, y->id.p, n);
    if (c == 0 && x->id.n != y->id.n) c = x->id.n < y->id.n ? -1 : 1;
    if (c == 0) c = (x->at > y->at) - (x->at < y->at);
    return c;
}

/* fresh[i] stays 1 only for the first place of each id whose row was absent: every later place
 * of an id is taken by then. */
static void mark_repeats(const Call *call, unsigned char *fresh) {
    long long n = call->nitems;
    if (n < 2) return;
    Placed *sorted = ValkeyModule_Alloc((size_t)n * sizeof *sorted);
    for (long long i = 0; i < n; i++) sorted[i] = (Placed){bytes_of(ITEM_ID(&call->items[i])), i};
    qsort(sorted, (size_t)n, sizeof *sorted, by_id_then_place);
    for (long long i = 1; i < n; i++) {
        const Placed *prev = &sorted[i - 1], *cur = &sorted[i];
        if (prev->id.n == cur->id.n && memcmp(prev->id.p, cur->id.p, cur->id.n) == 0) fresh[cur->at] = 0;
    }
    ValkeyModule_Free(sorted);
}

/* Step 6, check_row of the prelude on each job's row in list order (the caller's ACL, a slot
 * moving away, absent or a hash), each row left open for its write. NULL, or the error. */
static const char *open_rows(ValkeyModuleCtx *ctx, Call *call, ValkeyModuleKey **rows, unsigned char *fresh,
                             long long *opened) {
    Acl acl = {ctx, NULL, 0};
    const char *fail = NULL;
    for (long long i = 0; i < call->nitems && fail == NULL; i++) {
        Item *it = &call->items[i];
        it->row_name = derived_key(ctx, call->base, "job:", ITEM_ID(it));
        if (!acl_may_access(&acl, it->row_name)) {
            fail = EMQ_ERR_PERM;
            break;
        }
        rows[i] = ValkeyModule_OpenKey(ctx, it->row_name, VALKEYMODULE_READ | VALKEYMODULE_WRITE);
        *opened = i + 1;
        int t = ValkeyModule_KeyType(rows[i]);
        if (t == VALKEYMODULE_KEYTYPE_EMPTY && moved_away(ctx, it->row_name, call->base)) fail = EMQ_ERR_MOVING;
        else if (t != VALKEYMODULE_KEYTYPE_EMPTY && t != VALKEYMODULE_KEYTYPE_HASH) fail = EMQ_ERR_TYPE;
        fresh[i] = t == VALKEYMODULE_KEYTYPE_EMPTY;
    }
    acl_release(&acl);
    return fail;
}

/* EMQ.ENQUEUE_MANY 3 <base>pending <base>delayed <base>wake <now> [<id> <payload> <delay_ms:0> <priority> ...]
 * Twin of enqueue_many.lua. *N +ENQUEUED|+DUPLICATE | EMQARITY EMQKEYS EMQNUM EMQITEM EMQKIND WRONGTYPE
 * NOPERM TRYAGAIN. Every job's row (<base>job:<id>, derived) is checked, in list order, before
 * anything is written; an id met earlier in the call is a DUPLICATE, its row being there by then. */
int tx_enqueue_many(ValkeyModuleCtx *ctx, Call *call, ValkeyModuleKey **k) {
    ValkeyModuleString **names = call->keys;
    long long now = call->num[EMQ_ENQUEUE_MANY_ARG_NOW], n = call->nitems, opened = 0;
    ValkeyModuleKey **rows = ValkeyModule_Alloc(((size_t)n + 1) * sizeof *rows);
    unsigned char *fresh = ValkeyModule_Alloc((size_t)n + 1);
    const char *fail = open_rows(ctx, call, rows, fresh, &opened);
    if (fail == NULL) {
        mark_repeats(call, fresh);
        EventSink ev = event_sink(call, k);
        long long admitted = 0;
        ValkeyModule_ReplyWithArray(ctx, n);
        for (long long i = 0; i < n; i++) {
            const Item *it = &call->items[i];
            if (!fresh[i]) {
                ValkeyModule_ReplyWithSimpleString(ctx, "DUPLICATE");
                continue;
            }
            long long delay_ms = it->num[EMQ_ENQUEUE_MANY_ITEM_ARG_DELAY_MS];
            long long priority = it->num[EMQ_ENQUEUE_MANY_ITEM_ARG_PRIORITY];
            fx_new_row(ctx, rows[i], it->row_name, it->args[EMQ_ENQUEUE_MANY_ITEM_ARG_PAYLOAD], now, priority);
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
    }
    close_keys(rows, (int)opened);
    ValkeyModule_Free(rows);
    ValkeyModule_Free(fresh);
    return fail ? reply_error(ctx, fail) : VALKEYMODULE_OK;
}
