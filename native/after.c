/* after.c: EMQ.ENQUEUE_AFTER and EMQ.AFTER (dependencies and the join).
 *
 * STUBS (join-lua): these reply an error so that the module builds while the C twins are being
 * written by join-native, who replaces this file. The scripts (enqueue_after.lua, after.lua)
 * are the reference. */
#include "trafikey.h"

int tx_enqueue_after(ValkeyModuleCtx *ctx, Call *call, ValkeyModuleKey **k) {
    (void)call;
    (void)k;
    return ValkeyModule_ReplyWithError(ctx, "ERR EMQ.ENQUEUE_AFTER is not implemented yet (stub)");
}

int tx_after(ValkeyModuleCtx *ctx, Call *call, ValkeyModuleKey **k) {
    (void)call;
    (void)k;
    return ValkeyModule_ReplyWithError(ctx, "ERR EMQ.AFTER is not implemented yet (stub)");
}
