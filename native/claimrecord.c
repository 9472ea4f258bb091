/* claimrecord.c: a claim's record, <base>claim:<claim_id>, the optional last key of EMQ.CLAIM and
 * EMQ.SETTLE (the claim record helpers of the scripts, echomq/lua/include/records.lua).
 *
 * A claim that declares its record and leases jobs records them there, '<id> <fence>' each,
 * space-separated, for lease_ms. Sent again with the same record after its reply was lost, the
 * call finds the record and answers, in order, the leases recorded that are still held (the id
 * in active, its row at that fence): no attempt is counted again, nothing more is leased. A value
 * that is not such a list holds no lease. Reads only: the writes are fx_record in effects.c. */
#include <string.h>

#include "trafikey.h"

void recorded_free(ValkeyModuleCtx *ctx, Recorded *r) {
    for (size_t i = 0; i < r->n; i++) ValkeyModule_FreeString(ctx, r->ids[i]);
    ValkeyModule_Free(r->ids);
    ValkeyModule_Free(r->fences);
    r->ids = NULL;
    r->fences = NULL;
    r->n = 0;
}

/* The '<id> <fence>' pairs of value, into r; 0 (and none kept) when value is not such a list. */
static int parse_record(ValkeyModuleCtx *ctx, const char *p, size_t len, Recorded *r) {
    size_t cap = len / 2 + 1;
    r->ids = ValkeyModule_Alloc(cap * sizeof *r->ids);
    r->fences = ValkeyModule_Alloc(cap * sizeof *r->fences);
    size_t pos = 0;
    for (;;) {
        const char *space = memchr(p + pos, ' ', len - pos);
        if (space == NULL) break;
        size_t id_len = (size_t)(space - (p + pos)), fence_at = (size_t)(space - p) + 1;
        const char *next = memchr(p + fence_at, ' ', len - fence_at);
        size_t fence_end = next ? (size_t)(next - p) : len;
        long long fence;
        if (!emq_id_ok(p + pos, id_len) || !emq_parse_int(p + fence_at, fence_end - fence_at, 1, &fence)) break;
        r->ids[r->n] = ValkeyModule_CreateString(ctx, p + pos, id_len);
        r->fences[r->n++] = fence;
        if (next == NULL) return 1;
        pos = fence_end + 1;
    }
    recorded_free(ctx, r);
    return 0;
}

/* read_record of the scripts: whether the call's record is there (r->present), its leases, and
 * each lease's row checked (ACL, slot, type) as any row the call reads. NULL, or the error. The
 * value is read by the server's own GET, as the script reads it: a direct read of a short string
 * would change its encoding (embstr to raw). */
const char *read_record(ValkeyModuleCtx *ctx, Acl *acl, Bytes base, ValkeyModuleKey *record,
                        ValkeyModuleString *record_name, Recorded *r) {
    memset(r, 0, sizeof *r);
    if (record == NULL || ValkeyModule_KeyType(record) == VALKEYMODULE_KEYTYPE_EMPTY) return NULL;
    r->present = 1;
    size_t len = 0;
    ValkeyModuleCallReply *reply = ValkeyModule_Call(ctx, "GET", "s", record_name);
    const char *p = reply ? ValkeyModule_CallReplyStringPtr(reply, &len) : NULL;
    int parsed = p != NULL && parse_record(ctx, p, len, r);
    if (reply) ValkeyModule_FreeCallReply(reply);
    if (!parsed) return NULL;
    for (size_t i = 0; i < r->n; i++) {
        const char *err = check_named_key(ctx, acl, base, "job:", r->ids[i], VALKEYMODULE_KEYTYPE_HASH, NULL);
        if (err) return err;
    }
    return NULL;
}

/* Whether recorded lease i is still held: its id in active, its row at its fence. */
static int still_held(ValkeyModuleCtx *ctx, Bytes base, ValkeyModuleKey *active, const Recorded *r, size_t i) {
    ValkeyModuleString *row_name = derived_key(ctx, base, "job:", r->ids[i]);
    ValkeyModuleKey *row = ValkeyModule_OpenKey(ctx, row_name, VALKEYMODULE_READ);
    int held = is_current_lease(ctx, active, row, r->ids[i], r->fences[i]);
    ValkeyModule_CloseKey(row);
    ValkeyModule_FreeString(ctx, row_name);
    return held;
}

/* Reply [id, payload, attempt, fence] for recorded lease i, held. */
static void reply_lease(ValkeyModuleCtx *ctx, Bytes base, const Recorded *r, size_t i) {
    ValkeyModuleString *row_name = derived_key(ctx, base, "job:", r->ids[i]);
    ValkeyModuleKey *row = ValkeyModule_OpenKey(ctx, row_name, VALKEYMODULE_READ);
    ValkeyModuleString *payload = NULL;
    ValkeyModule_HashGet(row, VALKEYMODULE_HASH_CFIELDS, ROW_PAYLOAD, &payload, NULL);
    ValkeyModule_ReplyWithArray(ctx, 4);
    ValkeyModule_ReplyWithString(ctx, r->ids[i]);
    if (payload) {
        ValkeyModule_ReplyWithString(ctx, payload);
        ValkeyModule_FreeString(ctx, payload);
    } else {
        ValkeyModule_ReplyWithStringBuffer(ctx, "", 0);
    }
    ValkeyModule_ReplyWithLongLong(ctx, row_int_field(ctx, row, ROW_ATTEMPTS, 0));
    ValkeyModule_ReplyWithLongLong(ctx, r->fences[i]);
    ValkeyModule_CloseKey(row);
    ValkeyModule_FreeString(ctx, row_name);
}

/* The leases recorded that are still held, as an array (settle's jobs), or (single, claim) the
 * first of them, null when none is. */
void reply_recorded(ValkeyModuleCtx *ctx, Bytes base, ValkeyModuleKey *active, const Recorded *r, int single) {
    int *held = ValkeyModule_Alloc((r->n + 1) * sizeof *held);
    long n = 0;
    for (size_t i = 0; i < r->n; i++) n += held[i] = still_held(ctx, base, active, r, i);
    if (single && n == 0) ValkeyModule_ReplyWithNull(ctx);
    else if (!single) ValkeyModule_ReplyWithArray(ctx, n);
    for (size_t i = 0; i < r->n; i++) {
        if (!held[i]) continue;
        reply_lease(ctx, base, r, i);
        if (single) break;
    }
    ValkeyModule_Free(held);
}
