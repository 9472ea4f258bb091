/* progress.c: the logic of EMQ.PROGRESS, a running job's report of how far it got, fenced by its
 * lease as EMQ.EXTEND is. Its one write goes through effects.c. */
#include "trafikey.h"

/* EMQ.PROGRESS 2 <base>active <base>job:<id> <id> <fence:1> <progress>
 * Twin of progress.lua. +RECORDED | +STALE | EMQARITY EMQKIND EMQKEYS EMQNUM EMQSIZE WRONGTYPE. */
int tx_progress(ValkeyModuleCtx *ctx, Call *call, ValkeyModuleKey **k) {
    ValkeyModuleString *id = call->args[EMQ_PROGRESS_ARG_ID];
    ValkeyModuleKey *row = k[EMQ_PROGRESS_KEY_JOB];
    if (!is_current_lease(ctx, k[EMQ_PROGRESS_KEY_ACTIVE], row, id, call->num[EMQ_PROGRESS_ARG_FENCE]))
        return ValkeyModule_ReplyWithSimpleString(ctx, "STALE");
    fx_hset1(ctx, row, call->keys[EMQ_PROGRESS_KEY_JOB], "progress", call->args[EMQ_PROGRESS_ARG_PROGRESS]);
    EventSink ev = event_sink(call, k);
    ev_emit(ctx, &ev,
            &(Event){.kind = "progress", .id = id, .attempt = ev_attempts(ctx, &ev, row),
                     .fence = call->num[EMQ_PROGRESS_ARG_FENCE], .with = EV_FENCE});
    return ValkeyModule_ReplyWithSimpleString(ctx, "RECORDED");
}
