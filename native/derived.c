/* derived.c: the keys a transition derives itself (a job row read off a zset or named by an
 * item, a lane named by a row). The server checks the declared keys before the command runs; these
 * it cannot see, so each is checked here as the prelude checks it: the caller's ACL, a slot moving
 * between cluster nodes, the key's type. Also the reads of a row and of the fence counter. */
#include <string.h>

#include "trafikey.h"

/* base + mid + tail as a new string (a derived key: a row, a lane); tail NULL: base + mid. */
ValkeyModuleString *derived_key(ValkeyModuleCtx *ctx, Bytes base, const char *mid,
                                const ValkeyModuleString *tail) {
    size_t mlen = strlen(mid);
    Bytes t = tail ? bytes_of(tail) : (Bytes){"", 0};
    char *buf = ValkeyModule_Alloc(base.n + mlen + t.n + 1);
    memcpy(buf, base.p, base.n);
    memcpy(buf + base.n, mid, mlen);
    memcpy(buf + base.n + mlen, t.p, t.n);
    ValkeyModuleString *key = ValkeyModule_CreateString(ctx, buf, base.n + mlen + t.n);
    ValkeyModule_Free(buf);
    return key;
}

/* ---- The caller's ACL ------------------------------------------------------------------------ */

/* may_access of the prelude is redis.acl_check_cmd('HINCRBY', key, 'attempts', '1'): the caller's
 * user must be allowed the command HINCRBY and read+write on the key. The same check runs here
 * through ACLCheckCommandPermissions on the same argument list. The user is fetched on first use,
 * so a call that touches no derived key pays nothing; a call without a user (the primary link, the
 * AOF) may access everything, as the script engine lets a user-less client. */
int acl_may_access(Acl *acl, ValkeyModuleString *key) {
    if (!acl->resolved) {
        acl->resolved = 1;
        int flags = ValkeyModule_GetContextFlags(acl->ctx);
        int userless = (flags & (VALKEYMODULE_CTX_FLAGS_REPLICATED | VALKEYMODULE_CTX_FLAGS_LOADING)) ||
                       ValkeyModule_GetClientId(acl->ctx) == VALKEYMODULE_AOF_CLIENT_ID;
        if (!userless) {
            ValkeyModuleString *name = ValkeyModule_GetCurrentUserName(acl->ctx);
            acl->user = ValkeyModule_GetModuleUserFromUserName(name);
            ValkeyModule_FreeString(acl->ctx, name);
        }
    }
    if (acl->user == NULL) return 1;
    ValkeyModuleString *probe[4] = {s_hincrby, key, s_attempts, s_one};
    return ValkeyModule_ACLCheckCommandPermissions(acl->user, probe, 4) == VALKEYMODULE_OK;
}

void acl_release(Acl *acl) {
    if (acl->user) ValkeyModule_FreeModuleUser(acl->user);
    acl->user = NULL;
}

/* ---- The cluster's slot ---------------------------------------------------------------------- */

/* In a cluster, a derived key that is absent here may be on another node while its slot moves:
 * gone with the keys already migrated (this node MIGRATING), or not migrated yet (IMPORTING, the
 * caller sent ASKING). The module then refuses the call rather than take the job for a ghost. The
 * server answers that question: ValkeyModule_Call runs its cluster check (the caller's ASKING
 * copied), which refuses a command naming several keys of a moving slot unless all are present.
 * So the probe names the absent key and a second key of the queue's slot, the base (the script
 * names KEYS[1]). Asked only of absent keys, only in cluster mode. */
int moved_away(ValkeyModuleCtx *ctx, ValkeyModuleString *key, Bytes base) {
    if (!(ValkeyModule_GetContextFlags(ctx) & VALKEYMODULE_CTX_FLAGS_CLUSTER)) return 0;
    ValkeyModuleCallReply *reply = ValkeyModule_Call(ctx, "EXISTS", "sb", key, base.p, base.n);
    if (reply == NULL) return 1;
    ValkeyModule_FreeCallReply(reply);
    return 0;
}

/* ---- Checking a derived key ------------------------------------------------------------------ */

/* The one check of a key the command derives itself, in the prelude's order (check_derived of
 * derived.lua): the caller's ACL on it (NOPERM); then its type, the key opened for reading and
 * closed; absent, whether its slot moves away (TRYAGAIN); present and not of type (WRONGTYPE;
 * KEYTYPE_ANY refuses no type). found, when not NULL, gets the type seen (EMPTY when refused
 * first). NULL, or the error to reply. The name is the caller's, kept for its writes:
 *     err = check_key(ctx, acl, base, it->lane_key, VALKEYMODULE_KEYTYPE_LIST, NULL); */
const char *check_key(ValkeyModuleCtx *ctx, Acl *acl, Bytes base, ValkeyModuleString *name, int type,
                      int *found) {
    if (found) *found = VALKEYMODULE_KEYTYPE_EMPTY;
    if (!acl_may_access(acl, name)) return EMQ_ERR_PERM;
    ValkeyModuleKey *key = ValkeyModule_OpenKey(ctx, name, VALKEYMODULE_READ);
    int t = ValkeyModule_KeyType(key);
    ValkeyModule_CloseKey(key);
    if (found) *found = t;
    if (t == VALKEYMODULE_KEYTYPE_EMPTY && moved_away(ctx, name, base)) return EMQ_ERR_MOVING;
    if (t != VALKEYMODULE_KEYTYPE_EMPTY && type != KEYTYPE_ANY && t != type) return EMQ_ERR_TYPE;
    return NULL;
}

/* check_key of base + mid + tail (tail NULL: base + mid), the name made and freed here:
 *     err = check_named_key(ctx, acl, base, "job:", id, KEYTYPE_ANY, &row_type); */
const char *check_named_key(ValkeyModuleCtx *ctx, Acl *acl, Bytes base, const char *mid,
                            const ValkeyModuleString *tail, int type, int *found) {
    ValkeyModuleString *name = derived_key(ctx, base, mid, tail);
    const char *err = check_key(ctx, acl, base, name, type, found);
    ValkeyModule_FreeString(ctx, name);
    return err;
}

/* check_row of the prelude: an item's row, absent or a hash. */
const char *check_row(ValkeyModuleCtx *ctx, Acl *acl, Bytes base, ValkeyModuleString *row_name) {
    return check_key(ctx, acl, base, row_name, VALKEYMODULE_KEYTYPE_HASH, NULL);
}

/* check_ended of the prelude: a job's ended key, <base>ended:<id>, absent or a list. */
const char *check_ended(ValkeyModuleCtx *ctx, Acl *acl, Bytes base, ValkeyModuleString *ended) {
    return check_key(ctx, acl, base, ended, VALKEYMODULE_KEYTYPE_LIST, NULL);
}

/* check_lane_keys of the prelude: a group's two lane keys, its list lane_key (<base>lane:<group>,
 * made by the caller) then its prio zset <base>prio:<group>, each absent or of its type. */
const char *check_lane_keys(ValkeyModuleCtx *ctx, Acl *acl, Bytes base, ValkeyModuleString *group,
                            ValkeyModuleString *lane_key) {
    const char *err = check_key(ctx, acl, base, lane_key, VALKEYMODULE_KEYTYPE_LIST, NULL);
    return err ? err : check_named_key(ctx, acl, base, "prio:", group, VALKEYMODULE_KEYTYPE_ZSET, NULL);
}

/* ---- Reading a row and the fence counter ----------------------------------------------------- */

/* int_field of the prelude on a row's field read by row_get (one of the four one-letter fields
 * falls back to its earlier name): an absent or non-integer field counts as the fallback. */
long long row_int_field(ValkeyModuleCtx *ctx, ValkeyModuleKey *row, const char *field,
                        long long fallback) {
    ValkeyModuleString *v;
    row_get(row, field, &v);
    if (v == NULL) return fallback;
    long long out;
    Bytes b = bytes_of(v);
    int ok = emq_parse_int(b.p, b.n, 0, &out);
    ValkeyModule_FreeString(ctx, v);
    return ok ? out : fallback;
}

/* count_field of the prelude: a row field counted on with HINCRBY (a waiting job's `waits`). 1 with
 * *out its value (absent: 0) when it is an integer from 0 in canonical decimal (no leading zero),
 * else 0: the caller refuses the call before it writes (waits_error). */
int row_count_field(ValkeyModuleCtx *ctx, ValkeyModuleKey *row, const char *field, long long *out) {
    ValkeyModuleString *v;
    *out = 0;
    hash_get1(row, field, &v);
    if (v == NULL) return 1;
    Bytes b = bytes_of(v);
    int ok = emq_parse_int(b.p, b.n, 0, out) && (b.n == 1 || b.p[0] != '0');
    ValkeyModule_FreeString(ctx, v);
    return ok;
}

/* waits_error of the prelude: EMQNUM naming `waits`. */
const char *waits_error(void) {
    static char text[96];
    if (text[0] == '\0') emq_number_error(text, sizeof text, "waits", 0);
    return text;
}

/* row_priority of the prelude: the row's priority field, read as the argument is; absent or bad
 * counts as 0. */
long long row_priority(ValkeyModuleCtx *ctx, ValkeyModuleKey *row) {
    ValkeyModuleString *v;
    hash_get1(row, "priority", &v);
    if (v == NULL) return 0;
    long long out;
    Bytes b = bytes_of(v);
    int ok = emq_parse_priority(b.p, b.n, &out);
    ValkeyModule_FreeString(ctx, v);
    return ok ? out : 0;
}

/* is_current_lease of the prelude: id in active, the row exists, its fence equals fence. */
int is_current_lease(ValkeyModuleCtx *ctx, ValkeyModuleKey *active, ValkeyModuleKey *row,
                     ValkeyModuleString *id, long long fence) {
    double score;
    if (ValkeyModule_ZsetScore(active, id, &score) != VALKEYMODULE_OK) return 0;
    if (ValkeyModule_KeyType(row) == VALKEYMODULE_KEYTYPE_EMPTY) return 0;
    return row_int_field(ctx, row, ROW_FENCE, 0) == fence;
}

/* Whether the row (open, any type) is a hash holding field (read by row_get: has_payload of the
 * prelude for ROW_PAYLOAD). */
int row_has(ValkeyModuleCtx *ctx, ValkeyModuleKey *row, const char *field) {
    ValkeyModuleString *v;
    if (ValkeyModule_KeyType(row) != VALKEYMODULE_KEYTYPE_HASH) return 0;
    row_get(row, field, &v);
    if (v == NULL) return 0;
    ValkeyModule_FreeString(ctx, v);
    return 1;
}

/* Whether the row (open, any type) is a hash holding field a or field b: one read of both. */
int row_has_either(ValkeyModuleCtx *ctx, ValkeyModuleKey *row, const char *a, const char *b) {
    ValkeyModuleString *va = NULL, *vb = NULL;
    if (ValkeyModule_KeyType(row) != VALKEYMODULE_KEYTYPE_HASH) return 0;
    ValkeyModule_HashGet(row, VALKEYMODULE_HASH_NONE, field_name(a), &va, field_name(b), &vb, NULL);
    if (va) ValkeyModule_FreeString(ctx, va);
    if (vb) ValkeyModule_FreeString(ctx, vb);
    return va != NULL || vb != NULL;
}

/* cancelled_at of the prelude: the row is a cancelled tombstone (no payload, the cancel mark) at
 * fence, as a flagged lease's settlement leaves it. */
int cancelled_at(ValkeyModuleCtx *ctx, ValkeyModuleKey *row, long long fence) {
    if (ValkeyModule_KeyType(row) != VALKEYMODULE_KEYTYPE_HASH) return 0;
    if (row_int_field(ctx, row, ROW_FENCE, 0) != fence) return 0;
    return !row_has(ctx, row, ROW_PAYLOAD) && row_has(ctx, row, "cancelled");
}

/* extended of the prelude: an extend of a current lease answers CANCELLING when a cancel flagged
 * its row (the lease is extended all the same), else EXTENDED. */
const char *extended(ValkeyModuleCtx *ctx, ValkeyModuleKey *row) {
    ValkeyModuleString *flag;
    hash_get1(row, "cancel", &flag);
    if (flag == NULL) return "EXTENDED";
    ValkeyModule_FreeString(ctx, flag);
    return "CANCELLING";
}

/* replayed of the prelude: what a lease that is not current answers when its settlement went
 * through already (docs/PROTOCOL.md, Replays). A cancelled tombstone at fence: CANCELLED. error NULL: an ack, ACKED when the row is a
 * tombstone (no payload, expiring) at fence. Else a retry: the row at fence, its payload kept and its error
 * exactly error, DEAD while the id is in dead, else RETRYING. STALE otherwise. Reads only. */
const char *replayed(ValkeyModuleCtx *ctx, ValkeyModuleKey *row, long long fence, ValkeyModuleString *error,
                     ValkeyModuleKey *dead, ValkeyModuleString *id) {
    if (cancelled_at(ctx, row, fence)) return "CANCELLED";
    if (ValkeyModule_KeyType(row) == VALKEYMODULE_KEYTYPE_EMPTY) return "STALE";
    if (row_int_field(ctx, row, ROW_FENCE, 0) != fence) return "STALE";
    ValkeyModuleString *kept = NULL;
    hash_get1(row, "error", &kept);
    int has_payload = row_has(ctx, row, ROW_PAYLOAD), same = 0;
    if (kept != NULL && error != NULL) {
        Bytes a = bytes_of(kept), b = bytes_of(error);
        same = a.n == b.n && (a.n == 0 || memcmp(a.p, b.p, a.n) == 0);
    }
    if (kept != NULL) ValkeyModule_FreeString(ctx, kept);
    if (error == NULL) return has_payload || ValkeyModule_GetAbsExpire(row) < 0 ? "STALE" : "ACKED";
    if (!has_payload || !same) return "STALE";
    double score;
    return ValkeyModule_ZsetScore(dead, id, &score) == VALKEYMODULE_OK ? "DEAD" : "RETRYING";
}

/* fence_counter of the prelude: the value of the queue's fence counter (absent: 0); 0 when it
 * holds anything but an integer from 0 to EMQ_FENCE_MAX. The key is open (as name) and a string.
 * The value is read by the server's own GET, as the script reads it: a direct read (StringDMA)
 * turns an int-encoded string into a raw one, which a claim that leases nothing would leave so. */
int fence_counter(ValkeyModuleCtx *ctx, ValkeyModuleKey *key, ValkeyModuleString *name, long long *out) {
    *out = 0;
    if (ValkeyModule_KeyType(key) == VALKEYMODULE_KEYTYPE_EMPTY) return 1;
    size_t len = 0;
    ValkeyModuleCallReply *reply = ValkeyModule_Call(ctx, "GET", "s", name);
    const char *p = reply ? ValkeyModule_CallReplyStringPtr(reply, &len) : NULL;
    int ok = p != NULL && emq_parse_int(p, len, 0, out) && *out <= EMQ_FENCE_MAX;
    if (reply) ValkeyModule_FreeCallReply(reply);
    return ok;
}
