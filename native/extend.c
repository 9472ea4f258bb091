/* extend.c: a lease's deadline pushed back, one (EMQ.EXTEND) or many (EMQ.EXTEND_MANY), once
 * validate.c has checked the call and opened its declared keys. Twins of extend.lua and
 * extend_many.lua, following docs/PROTOCOL.md. */
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "trafikey.h"

/* EMQ.EXTEND 2 <base>active <base>job:<id> <id> <fence:1> <lease_ms:1> <now>
 * Twin of extend.lua. +EXTENDED | +CANCELLING (a lease a cancel flagged, extended too) | +STALE | EMQARITY EMQKIND EMQKEYS EMQNUM WRONGTYPE. */
int tx_extend(ValkeyModuleCtx *ctx, Call *call, ValkeyModuleKey **k) {
    ValkeyModuleString *id = call->args[EMQ_EXTEND_ARG_ID];
    ValkeyModuleKey *active = k[EMQ_EXTEND_KEY_ACTIVE];
    if (!is_current_lease(ctx, active, k[EMQ_EXTEND_KEY_JOB], id, call->num[EMQ_EXTEND_ARG_FENCE]))
        return ValkeyModule_ReplyWithSimpleString(ctx, "STALE");
    long long deadline = call->num[EMQ_EXTEND_ARG_NOW] + call->num[EMQ_EXTEND_ARG_LEASE_MS];
    fx_zadd(ctx, active, call->keys[EMQ_EXTEND_KEY_ACTIVE], (double)deadline, id);
    return ValkeyModule_ReplyWithSimpleString(ctx, extended(ctx, k[EMQ_EXTEND_KEY_JOB]));
}

/* Every item's row derived and checked, in order, before anything is written. */
static const char *check_rows(ValkeyModuleCtx *ctx, Acl *acl, Bytes base, Item *items, long long n) {
    for (long long i = 0; i < n; i++) {
        items[i].row_name = derived_key(ctx, base, "job:", ITEM_ID(&items[i]));
        const char *err = check_row(ctx, acl, base, items[i].row_name);
        if (err) return err;
    }
    return NULL;
}

/* EMQ.EXTEND_MANY 1 <base>active <lease_ms:1> <now> [<id> <fence:1> ...]
 * Twin of extend_many.lua. *N +EXTENDED|+CANCELLING|+STALE | EMQARITY EMQKEYS EMQNUM EMQITEM EMQKIND WRONGTYPE
 * NOPERM TRYAGAIN. */
int tx_extend_many(ValkeyModuleCtx *ctx, Call *call, ValkeyModuleKey **k) {
    ValkeyModuleKey *active = k[EMQ_EXTEND_MANY_KEY_ACTIVE];
    long long deadline = call->num[EMQ_EXTEND_MANY_ARG_NOW] + call->num[EMQ_EXTEND_MANY_ARG_LEASE_MS];
    Acl acl = {ctx, NULL, 0};
    const char *fail = check_rows(ctx, &acl, call->base, call->items, call->nitems);
    acl_release(&acl);
    if (fail) return reply_error(ctx, fail);
    ValkeyModule_ReplyWithArray(ctx, call->nitems);
    for (long long i = 0; i < call->nitems; i++) {
        const Item *it = &call->items[i];
        ValkeyModuleKey *row = ValkeyModule_OpenKey(ctx, it->row_name, VALKEYMODULE_READ);
        const char *verdict = is_current_lease(ctx, active, row, ITEM_ID(it), ITEM_FENCE(it)) ? extended(ctx, row) : "STALE";
        ValkeyModule_CloseKey(row);
        if (verdict[0] != 'S') fx_zadd(ctx, active, call->keys[EMQ_EXTEND_MANY_KEY_ACTIVE], (double)deadline, ITEM_ID(it));
        ValkeyModule_ReplyWithSimpleString(ctx, verdict);
    }
    return VALKEYMODULE_OK;
}
