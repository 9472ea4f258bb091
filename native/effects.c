/* effects.c: every write a transition makes, one function per command its Lua twin runs. No other
 * file of the module writes a key, fires a keyspace event or replicates (tests/test_native_layout.py
 * checks the sources), so no write can skip its event, its signal or its replication.
 *
 * Replication style, for every command: EFFECTS. Each write is replicated with
 * ValkeyModule_Replicate as the plain command the Lua twin would have run (HSET, HDEL, HINCRBY,
 * DEL, PEXPIREAT with the absolute expiry, ZADD, ZREM, RPUSH, LPUSH, SET) with literal values, and only
 * when it changed something; the server wraps one call's effects in MULTI/EXEC. A replica or an
 * AOF without the module reaches the same keyspace. Never ReplicateVerbatim: `now = *` reads a
 * clock. The fence counter a claim takes is replicated as `SET <base>fence <value>`, the value the
 * lease was given, never as INCR: replaying it cannot count twice or drift from the rows' fences.
 *
 * Every effect also fires the keyspace event the twin's command fires, and signals the key as
 * modified only when it was (the module opts out of the implicit signal on CloseKey), so WATCH
 * and client-side caching see what they would see with the scripts. */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "trafikey.h"

/* A non-negative or negative integer in canonical decimal, without snprintf (it is on every
 * write path). buf must hold 21 bytes; returns the length. */
size_t decimal(long long v, char *buf) {
    char tmp[24];
    size_t n = 0;
    unsigned long long u = v < 0 ? 0ULL - (unsigned long long)v : (unsigned long long)v;
    do {
        tmp[n++] = (char)('0' + u % 10);
        u /= 10;
    } while (u);
    size_t len = 0;
    if (v < 0) buf[len++] = '-';
    while (n) buf[len++] = tmp[--n];
    return len;
}

/* A zset score as text ZADD parses back to the same double: integers in canonical decimal. */
static size_t score_text(double score, char *buf, size_t cap) {
    int n;
    if (score > -1e17 && score < 1e17 && score == (double)(long long)score) {
        return decimal((long long)score, buf);
    } else if (isinf(score)) {
        n = snprintf(buf, cap, score > 0 ? "inf" : "-inf");
    } else {
        n = snprintf(buf, cap, "%.17g", score);
    }
    return (size_t)n;
}

/* The event of a write and its modified-key signal. */
static void touched(ValkeyModuleCtx *ctx, int type, const char *event, ValkeyModuleString *keyname) {
    ValkeyModule_NotifyKeyspaceEvent(ctx, type, event, keyname);
    ValkeyModule_SignalModifiedKey(ctx, keyname);
}

/* An element removed from key: its event, then "del" when the key is gone (the module API deletes
 * an emptied zset or hash, as the server does), and the modified-key signal. */
static void removed_from(ValkeyModuleCtx *ctx, ValkeyModuleKey *key, int type, const char *event,
                         ValkeyModuleString *keyname) {
    ValkeyModule_NotifyKeyspaceEvent(ctx, type, event, keyname);
    if (ValkeyModule_KeyType(key) == VALKEYMODULE_KEYTYPE_EMPTY)
        ValkeyModule_NotifyKeyspaceEvent(ctx, VALKEYMODULE_NOTIFY_GENERIC, "del", keyname);
    ValkeyModule_SignalModifiedKey(ctx, keyname);
}

/* A field's name as a string: the one kept since load (fields.c), else a new one (*owned: the
 * caller frees it). */
static ValkeyModuleString *field_str(ValkeyModuleCtx *ctx, const char *field, int *owned) {
    ValkeyModuleString *kept = field_name(field);
    *owned = kept == NULL;
    return kept ? kept : ValkeyModule_CreateString(ctx, field, strlen(field));
}

static void field_done(ValkeyModuleCtx *ctx, ValkeyModuleString *name, int owned) {
    if (owned) ValkeyModule_FreeString(ctx, name);
}

/* ZADD key score member: an event and a replica command only when the member was added or its
 * score changed, as zaddCommand. */
void fx_zadd(ValkeyModuleCtx *ctx, ValkeyModuleKey *key, ValkeyModuleString *keyname,
             double score, ValkeyModuleString *member) {
    int flags = 0;
    ValkeyModule_ZsetAdd(key, score, member, &flags);
    if (!(flags & (VALKEYMODULE_ZADD_ADDED | VALKEYMODULE_ZADD_UPDATED))) return;
    touched(ctx, VALKEYMODULE_NOTIFY_ZSET, "zadd", keyname);
    char buf[64];
    size_t n = score_text(score, buf, sizeof buf);
    ValkeyModule_Replicate(ctx, "ZADD", "sbs", keyname, buf, n, member);
}

/* ZREM key member: "zrem", then "del" when the zset is gone (the module API deletes it). */
void fx_zrem(ValkeyModuleCtx *ctx, ValkeyModuleKey *key, ValkeyModuleString *keyname,
             ValkeyModuleString *member) {
    int deleted = 0;
    ValkeyModule_ZsetRem(key, member, &deleted);
    if (!deleted) return;
    removed_from(ctx, key, VALKEYMODULE_NOTIFY_ZSET, "zrem", keyname);
    ValkeyModule_Replicate(ctx, "ZREM", "ss", keyname, member);
}

/* LPUSH / RPUSH key element. */
void fx_push(ValkeyModuleCtx *ctx, ValkeyModuleKey *key, ValkeyModuleString *keyname,
             int where, ValkeyModuleString *element) {
    ValkeyModule_ListPush(key, where, element);
    int head = where == VALKEYMODULE_LIST_HEAD;
    touched(ctx, VALKEYMODULE_NOTIFY_LIST, head ? "lpush" : "rpush", keyname);
    ValkeyModule_Replicate(ctx, head ? "LPUSH" : "RPUSH", "ss", keyname, element);
}

/* HSET key field value (one field). HSET always fires, changed or not. */
void fx_hset1(ValkeyModuleCtx *ctx, ValkeyModuleKey *key, ValkeyModuleString *keyname,
              const char *field, ValkeyModuleString *value) {
    int owned;
    ValkeyModuleString *name = field_str(ctx, field, &owned);
    ValkeyModule_HashSet(key, VALKEYMODULE_HASH_NONE, name, value, NULL);
    touched(ctx, VALKEYMODULE_NOTIFY_HASH, "hset", keyname);
    ValkeyModule_Replicate(ctx, "HSET", "sss", keyname, name, value);
    field_done(ctx, name, owned);
}

/* HSET key field <v>, the field a string (a lane's group): fires "hset" whether it changed or not,
 * as HSET. */
void fx_hset_int(ValkeyModuleCtx *ctx, ValkeyModuleKey *key, ValkeyModuleString *keyname, ValkeyModuleString *field,
                 long long v) {
    char num[24];
    ValkeyModuleString *value = ValkeyModule_CreateString(ctx, num, decimal(v, num));
    ValkeyModule_HashSet(key, VALKEYMODULE_HASH_NONE, field, value, NULL);
    touched(ctx, VALKEYMODULE_NOTIFY_HASH, "hset", keyname);
    ValkeyModule_Replicate(ctx, "HSET", "sss", keyname, field, value);
    ValkeyModule_FreeString(ctx, value);
}

/* The row of a new job: payload, enqueue time now (no attempts: absent counts as 0 until the first
 * claim), then priority only when it is not 0, as one HSET, the enqueue scripts' own (new_row of
 * the prelude). */
void fx_new_row(ValkeyModuleCtx *ctx, ValkeyModuleKey *row, ValkeyModuleString *row_name,
                ValkeyModuleString *payload, long long now, long long priority) {
    char num[32], pnum[24];
    ValkeyModuleString *enqueued_at = ValkeyModule_CreateString(ctx, num, decimal(now, num));
    ValkeyModuleString *f_payload = field_name(ROW_PAYLOAD), *f_enqueued_at = field_name(ROW_ENQUEUED_AT);
    if (priority == 0) {
        ValkeyModule_HashSet(row, VALKEYMODULE_HASH_NONE, f_payload, payload, f_enqueued_at, enqueued_at, NULL);
        ValkeyModule_Replicate(ctx, "HSET", "sssss", row_name, f_payload, payload, f_enqueued_at, enqueued_at);
    } else {
        ValkeyModuleString *p = ValkeyModule_CreateString(ctx, pnum, decimal(priority, pnum));
        ValkeyModule_HashSet(row, VALKEYMODULE_HASH_NONE, f_payload, payload, f_enqueued_at, enqueued_at,
                             field_name("priority"), p, NULL);
        ValkeyModule_Replicate(ctx, "HSET", "sssssss", row_name, f_payload, payload, f_enqueued_at, enqueued_at,
                               field_name("priority"), p);
        ValkeyModule_FreeString(ctx, p);
    }
    touched(ctx, VALKEYMODULE_NOTIFY_HASH, "hset", row_name);
    ValkeyModule_FreeString(ctx, enqueued_at);
}

/* SET key <v> for a counter (a string, its TTL dropped as SET drops it), run by the server's own
 * SET through ValkeyModule_Call (not replicated by it: the effect is replicated here). So the value
 * is stored as the script's SET stores it (an integer encoding), and an existing key fires "set"
 * only: ValkeyModule_StringSet deletes the key and adds it again, firing "new" each time. The open
 * key would point at the value SET replaced: it is closed around the call and opened again. */
void fx_set_counter(ValkeyModuleCtx *ctx, ValkeyModuleKey **key, ValkeyModuleString *keyname, long long v) {
    char num[24];
    size_t n = decimal(v, num);
    ValkeyModule_CloseKey(*key);
    ValkeyModuleCallReply *reply = ValkeyModule_Call(ctx, "SET", "sb", keyname, num, n);
    *key = ValkeyModule_OpenKey(ctx, keyname, VALKEYMODULE_READ | VALKEYMODULE_WRITE);
    if (reply != NULL) {
        ValkeyModule_FreeCallReply(reply);
    } else { /* not expected (the call's keys were checked): the value is written all the same */
        ValkeyModuleString *value = ValkeyModule_CreateString(ctx, num, n);
        ValkeyModule_StringSet(*key, value);
        ValkeyModule_FreeString(ctx, value);
        touched(ctx, VALKEYMODULE_NOTIFY_STRING, "set", keyname);
    }
    ValkeyModule_Replicate(ctx, "SET", "sb", keyname, num, n);
}

/* DEL key (the caller knows it exists). */
void fx_del(ValkeyModuleCtx *ctx, ValkeyModuleKey *key, ValkeyModuleString *keyname) {
    ValkeyModule_DeleteKey(key);
    touched(ctx, VALKEYMODULE_NOTIFY_GENERIC, "del", keyname);
    ValkeyModule_Replicate(ctx, "DEL", "s", keyname);
}

/* HDEL key field: "hdel" when the field was there, then "del" when the hash is gone. */
void fx_hdel(ValkeyModuleCtx *ctx, ValkeyModuleKey *key, ValkeyModuleString *keyname,
             const char *field) {
    int owned;
    ValkeyModuleString *name = field_str(ctx, field, &owned);
    int deleted = ValkeyModule_HashSet(key, VALKEYMODULE_HASH_NONE, name, VALKEYMODULE_HASH_DELETE, NULL);
    if (deleted > 0) {
        removed_from(ctx, key, VALKEYMODULE_NOTIFY_HASH, "hdel", keyname);
        ValkeyModule_Replicate(ctx, "HDEL", "ss", keyname, name);
    }
    field_done(ctx, name, owned);
}

/* drop_payload of the prelude (include/rows.lua): the row's payload goes under either name, this
 * layout's or the earlier one's, so the row reads as a tombstone (the script's one HDEL of both). */
void fx_drop_payload(ValkeyModuleCtx *ctx, ValkeyModuleKey *row, ValkeyModuleString *row_name) {
    fx_hdel(ctx, row, row_name, ROW_PAYLOAD);
    if (ValkeyModule_KeyType(row) == VALKEYMODULE_KEYTYPE_HASH) fx_hdel(ctx, row, row_name, ROW_OLD_PAYLOAD);
}

/* HDEL key field, the field a string (a lane's group), on a key that may be of any type: "hdel"
 * when the hash held it, then "del" when the hash is gone. */
void fx_hdel_field(ValkeyModuleCtx *ctx, ValkeyModuleKey *key, ValkeyModuleString *keyname,
                   ValkeyModuleString *field) {
    if (ValkeyModule_KeyType(key) != VALKEYMODULE_KEYTYPE_HASH) return;
    if (ValkeyModule_HashSet(key, VALKEYMODULE_HASH_NONE, field, VALKEYMODULE_HASH_DELETE, NULL) <= 0) return;
    removed_from(ctx, key, VALKEYMODULE_NOTIFY_HASH, "hdel", keyname);
    ValkeyModule_Replicate(ctx, "HDEL", "ss", keyname, field);
}

/* PEXPIRE key ms (ms >= 1): a no-op on a missing key; replicated as PEXPIREAT, as the server does. */
void fx_pexpire(ValkeyModuleCtx *ctx, ValkeyModuleKey *key, ValkeyModuleString *keyname,
                long long ms) {
    if (ValkeyModule_KeyType(key) == VALKEYMODULE_KEYTYPE_EMPTY) return;
    ValkeyModule_SetExpire(key, ms);
    touched(ctx, VALKEYMODULE_NOTIFY_GENERIC, "expire", keyname);
    ValkeyModule_Replicate(ctx, "PEXPIREAT", "sl", keyname, (long long)ValkeyModule_GetAbsExpire(key));
}

/* wake of the prelude: up to n tokens, never more than EMQ_WAKE_CAP in the list; one RPUSH each. */
void fx_wake(ValkeyModuleCtx *ctx, ValkeyModuleKey *key, ValkeyModuleString *keyname,
             long long n) {
    long long room = EMQ_WAKE_CAP - (long long)ValkeyModule_ValueLength(key);
    if (n > room) n = room;
    for (long long i = 0; i < n; i++) fx_push(ctx, key, keyname, VALKEYMODULE_LIST_TAIL, s_one);
}

/* mark_ended of the prelude: the job's ended key holds one token (pushed when it holds none), which
 * wakes every client blocked on it; with retention_ms > 0 it expires with the tombstone. */
void fx_mark_ended(ValkeyModuleCtx *ctx, ValkeyModuleString *ended, long long retention_ms) {
    ValkeyModuleKey *key = ValkeyModule_OpenKey(ctx, ended, VALKEYMODULE_READ | VALKEYMODULE_WRITE);
    if (ValkeyModule_ValueLength(key) == 0) fx_push(ctx, key, ended, VALKEYMODULE_LIST_TAIL, s_one);
    if (retention_ms > 0) fx_pexpire(ctx, key, ended, retention_ms);
    ValkeyModule_CloseKey(key);
}

/* upgrade_row of the prelude (claims.lua): a row holding the earlier layout's payload gets p and t
 * from payload and enqueued_at unless they are set (one HSET, when either is), then loses the four
 * old names (one HDEL). Takes payload; returns the attempts to lease with (a, else attempts), or
 * NULL. */
static ValkeyModuleString *upgrade_row(ValkeyModuleCtx *ctx, ValkeyModuleKey *row, ValkeyModuleString *row_name,
                                       ValkeyModuleString *payload) {
    ValkeyModuleString *a, *p, *attempts, *enqueued_at, *t;
    hash_get1(row, ROW_ATTEMPTS, &a);
    hash_get1(row, ROW_PAYLOAD, &p);
    hash_get1(row, ROW_OLD_ATTEMPTS, &attempts);
    hash_get1(row, ROW_OLD_ENQUEUED_AT, &enqueued_at);
    hash_get1(row, ROW_ENQUEUED_AT, &t);
    const char *fields[2];
    ValkeyModuleString *field_values[2];
    size_t n = 0;
    if (p == NULL) fields[n] = ROW_PAYLOAD, field_values[n++] = payload;
    if (enqueued_at != NULL && t == NULL) fields[n] = ROW_ENQUEUED_AT, field_values[n++] = enqueued_at;
    if (n > 0) fx_hset_fields(ctx, row, row_name, fields, field_values, n);
    static const char *const old[] = {ROW_OLD_PAYLOAD, ROW_OLD_ATTEMPTS, ROW_OLD_ENQUEUED_AT, ROW_OLD_FENCE};
    fx_hdel_fields(ctx, row, row_name, old, sizeof old / sizeof old[0]);
    ValkeyModuleString *gone[] = {payload, p, enqueued_at, t};
    for (size_t i = 0; i < sizeof gone / sizeof gone[0]; i++)
        if (gone[i]) ValkeyModule_FreeString(ctx, gone[i]);
    if (a == NULL) return attempts;
    if (attempts) ValkeyModule_FreeString(ctx, attempts);
    return a;
}

/* The attempts a lease counts from: upgrade_row's on a row holding the earlier layout's payload,
 * else a (absent or not an integer: 0). */
static long long lease_attempts(ValkeyModuleCtx *ctx, ValkeyModuleKey *row, ValkeyModuleString *row_name) {
    ValkeyModuleString *old_payload, *attempts;
    hash_get1(row, ROW_OLD_PAYLOAD, &old_payload);
    if (old_payload) attempts = upgrade_row(ctx, row, row_name, old_payload);
    else hash_get1(row, ROW_ATTEMPTS, &attempts); /* a alone, as the script's HMGET reads it */
    if (attempts == NULL) return 0;
    long long out;
    Bytes b = bytes_of(attempts);
    int ok = emq_parse_int(b.p, b.n, 0, &out);
    ValkeyModule_FreeString(ctx, attempts);
    return ok ? out : 0;
}

/* lease of the prelude: count the attempt (upgrading a row of the earlier layout first), take the
 * next fence (SET fence; *fence_key is opened again), write both to the row in one HSET, put the
 * id in active until deadline. */
void fx_lease(ValkeyModuleCtx *ctx, ValkeyModuleKey *row, ValkeyModuleString *row_name,
              ValkeyModuleString *id, ValkeyModuleKey *active, ValkeyModuleString *active_name,
              ValkeyModuleKey **fence_key, ValkeyModuleString *fence_name, long long last_fence,
              long long deadline, long long *attempt, long long *fence) {
    *attempt = lease_attempts(ctx, row, row_name) + 1;
    *fence = last_fence + 1;
    char num[24];
    ValkeyModuleString *attempt_str = ValkeyModule_CreateString(ctx, num, decimal(*attempt, num));
    ValkeyModuleString *fence_str = ValkeyModule_CreateString(ctx, num, decimal(*fence, num));
    fx_set_counter(ctx, fence_key, fence_name, *fence);
    ValkeyModuleString *f_attempts = field_name(ROW_ATTEMPTS), *f_fence = field_name(ROW_FENCE);
    ValkeyModule_HashSet(row, VALKEYMODULE_HASH_NONE, f_attempts, attempt_str, f_fence, fence_str, NULL);
    touched(ctx, VALKEYMODULE_NOTIFY_HASH, "hset", row_name);
    ValkeyModule_Replicate(ctx, "HSET", "sssss", row_name, f_attempts, attempt_str, f_fence, fence_str);
    fx_zadd(ctx, active, active_name, (double)deadline, id);
    ValkeyModule_FreeString(ctx, attempt_str);
    ValkeyModule_FreeString(ctx, fence_str);
}

/* A claim's record (claimrecord.c): SET key '<id> <fence> ...' PX lease_ms for the n leases just
 * made, ids[i] fenced first_fence + i, run by the server's own SET as fx_set_counter runs it (the
 * script's events: "set", "expire"), replicated as SET ... PXAT with the absolute expiry. */
void fx_record(ValkeyModuleCtx *ctx, ValkeyModuleKey **key, ValkeyModuleString *keyname, ValkeyModuleString **ids,
               size_t n, long long first_fence, long long lease_ms) {
    size_t cap = 0;
    for (size_t i = 0; i < n; i++) cap += bytes_of(ids[i]).n + 23;
    char *buf = ValkeyModule_Alloc(cap + 1), num[24];
    size_t len = 0;
    for (size_t i = 0; i < n; i++) {
        Bytes id = bytes_of(ids[i]);
        if (i > 0) buf[len++] = ' ';
        memcpy(buf + len, id.p, id.n);
        len += id.n;
        buf[len++] = ' ';
        size_t m = decimal(first_fence + (long long)i, num);
        memcpy(buf + len, num, m);
        len += m;
    }
    ValkeyModule_CloseKey(*key);
    ValkeyModuleCallReply *reply = ValkeyModule_Call(ctx, "SET", "sbcl", keyname, buf, len, "PX", lease_ms);
    if (reply != NULL) ValkeyModule_FreeCallReply(reply);
    *key = ValkeyModule_OpenKey(ctx, keyname, VALKEYMODULE_READ | VALKEYMODULE_WRITE);
    ValkeyModule_Replicate(ctx, "SET", "sbcl", keyname, buf, len, "PXAT", (long long)ValkeyModule_GetAbsExpire(*key));
    ValkeyModule_Free(buf);
}

/* mark_cancel of the prelude: HSET row cancel <retention_ms> cancelled <now>, one HSET (one
 * "hset" event), as the script writes it. */
void fx_mark_cancel(ValkeyModuleCtx *ctx, ValkeyModuleKey *row, ValkeyModuleString *row_name, long long retention_ms,
                    long long now) {
    char a[24], b[24];
    ValkeyModuleString *kept = ValkeyModule_CreateString(ctx, a, decimal(retention_ms, a));
    ValkeyModuleString *at = ValkeyModule_CreateString(ctx, b, decimal(now, b));
    ValkeyModule_HashSet(row, VALKEYMODULE_HASH_CFIELDS, "cancel", kept, "cancelled", at, NULL);
    touched(ctx, VALKEYMODULE_NOTIFY_HASH, "hset", row_name);
    ValkeyModule_Replicate(ctx, "HSET", "scscs", row_name, "cancel", kept, "cancelled", at);
    ValkeyModule_FreeString(ctx, kept);
    ValkeyModule_FreeString(ctx, at);
}

/* LREM key 0 element, run by the server's own LREM as fx_set_counter runs SET (its events: "lrem",
 * then "del" when the list is gone), replicated only when it removed something, as the script's
 * LREM is. The caller holds no open handle on key. */
void fx_lrem(ValkeyModuleCtx *ctx, ValkeyModuleString *keyname, ValkeyModuleString *element) {
    ValkeyModuleCallReply *reply = ValkeyModule_Call(ctx, "LREM", "scs", keyname, "0", element);
    if (reply == NULL) return;
    long long removed = ValkeyModule_CallReplyInteger(reply); /* LREM's reply is an integer */
    ValkeyModule_FreeCallReply(reply);
    if (removed > 0) ValkeyModule_Replicate(ctx, "LREM", "scs", keyname, "0", element);
}

/* XADD key MAXLEN <maxlen> * <fields> (n strings, field/value pairs), run by the server's own XADD
 * as fx_lrem runs LREM (its events: "xadd", then "xtrim" when the exact trim removed an entry; a
 * client blocked in XREAD BLOCK on the key is served after the call, as after the script), then
 * replicated with the id it took, as the server propagates the script's XADD. The caller holds no
 * open handle on key. */
void fx_xadd_capped(ValkeyModuleCtx *ctx, ValkeyModuleString *keyname, const char *maxlen,
                    ValkeyModuleString **fields, size_t n) {
    ValkeyModuleCallReply *reply = ValkeyModule_Call(ctx, "XADD", "scccv", keyname, "MAXLEN", maxlen, "*", fields, n);
    if (reply == NULL) return;
    size_t len;
    const char *id = ValkeyModule_CallReplyStringPtr(reply, &len);
    if (id != NULL && len > 0) {
        ValkeyModuleString *id_name = ValkeyModule_CreateString(ctx, id, len);
        ValkeyModule_Replicate(ctx, "XADD", "sccsv", keyname, "MAXLEN", maxlen, id_name, fields, n);
        ValkeyModule_FreeString(ctx, id_name);
    }
    ValkeyModule_FreeCallReply(reply);
}

/* An entry id as XADD replies it, <ms>-<seq>. buf must hold 42 bytes; returns the length. */
static size_t stream_id_text(const ValkeyModuleStreamID *id, char *buf) {
    char tmp[24];
    size_t len = 0;
    for (int part = 0; part < 2; part++) {
        unsigned long long u = part == 0 ? id->ms : id->seq;
        size_t n = 0;
        do {
            tmp[n++] = (char)('0' + u % 10);
            u /= 10;
        } while (u);
        if (part == 1) buf[len++] = '-';
        while (n) buf[len++] = tmp[--n];
    }
    return len;
}

/* The most an approximate trim may be asked to remove for the module API's trim to remove what
 * XADD's would. XADD caps the work of `MAXLEN ~` at LIMIT = 100 * stream-node-max-entries, held
 * within [10000, 1000000] (0 is taken as 10000); ValkeyModule_StreamTrimByLength uses
 * 100 * stream-node-max-entries unclamped (0: no cap). The two differ only when both are at least
 * 10000, so a trim of at most 10000 entries is the same under any configuration. */
#define EMQ_EVENTS_TRIM_SAME_UPTO 10000

/* XADD key MAXLEN ~ <EMQ_EVENTS_MAXLEN> * <fields> (events.c builds the fields), as the server's
 * xaddCommand does it, on the handle the call holds open: the entry appended under an id of the
 * server's generator (the command's clock, as the script's XADD), "xadd", then the approximate trim
 * and "xtrim" when it removed something, then the modified-key signal. A stream created here is
 * signalled ready by the server as it adds the key, one that existed when the handle is closed
 * (the module API defers it to CloseKey): either way a client blocked in XREAD BLOCK on it is
 * served after the call, as after the script. A trim of more than EMQ_EVENTS_TRIM_SAME_UPTO entries
 * (a stream grown behind the queue's back) is left to the server's own XTRIM, whose work cap is
 * XADD's whatever the configuration; it fires its own "xtrim".
 * Replicated as the server propagates the script's XADD: the id it generated and MAXLEN = <the
 * length left> (t_stream.c rewrites `~ <count>` so whenever the trim is approximate), so a
 * replica or an AOF without the module holds the same entries under the same ids. An entry the
 * stream cannot take (its last id the largest there is) is skipped: PROTOCOL.md's known
 * differences. */
void fx_xadd(ValkeyModuleCtx *ctx, ValkeyModuleKey *key, ValkeyModuleString *keyname, ValkeyModuleString **fields,
             size_t n) {
    ValkeyModuleStreamID id;
    if (ValkeyModule_StreamAdd(key, VALKEYMODULE_STREAM_ADD_AUTOID, &id, fields, (int64_t)(n / 2)) !=
        VALKEYMODULE_OK)
        return;
    ValkeyModule_NotifyKeyspaceEvent(ctx, VALKEYMODULE_NOTIFY_STREAM, "xadd", keyname);
    long long length = (long long)ValkeyModule_ValueLength(key);
    if (length > EMQ_EVENTS_MAXLEN + EMQ_EVENTS_TRIM_SAME_UPTO) {
        char maxlen[24];
        ValkeyModuleCallReply *reply =
            ValkeyModule_Call(ctx, "XTRIM", "sccb", keyname, "MAXLEN", "~", maxlen, decimal(EMQ_EVENTS_MAXLEN, maxlen));
        if (reply != NULL) ValkeyModule_FreeCallReply(reply);
        length = (long long)ValkeyModule_ValueLength(key);
    } else if (length > EMQ_EVENTS_MAXLEN &&
               ValkeyModule_StreamTrimByLength(key, VALKEYMODULE_STREAM_TRIM_APPROX, EMQ_EVENTS_MAXLEN) > 0) {
        ValkeyModule_NotifyKeyspaceEvent(ctx, VALKEYMODULE_NOTIFY_STREAM, "xtrim", keyname);
        length = (long long)ValkeyModule_ValueLength(key);
    }
    ValkeyModule_SignalModifiedKey(ctx, keyname);
    char id_text[48];
    ValkeyModule_Replicate(ctx, "XADD", "scclbv", keyname, "MAXLEN", "=", length, id_text,
                           stream_id_text(&id, id_text), fields, n);
}

/* HSET key f1 v1 f2 v2 ... (n pairs) as one command: one "hset" event, one replicated HSET. */
void fx_hset_fields(ValkeyModuleCtx *ctx, ValkeyModuleKey *key, ValkeyModuleString *keyname, const char *const *fields,
                    ValkeyModuleString **values, size_t n) {
    ValkeyModuleString **argv = ValkeyModule_Alloc(2 * n * sizeof *argv);
    for (size_t i = 0; i < n; i++) {
        argv[2 * i] = ValkeyModule_CreateString(ctx, fields[i], strlen(fields[i]));
        argv[2 * i + 1] = values[i];
        ValkeyModule_HashSet(key, VALKEYMODULE_HASH_NONE, argv[2 * i], values[i], NULL);
    }
    touched(ctx, VALKEYMODULE_NOTIFY_HASH, "hset", keyname);
    ValkeyModule_Replicate(ctx, "HSET", "sv", keyname, argv, 2 * n);
    for (size_t i = 0; i < n; i++) ValkeyModule_FreeString(ctx, argv[2 * i]);
    ValkeyModule_Free(argv);
}

/* HDEL key f1 f2 ... as one command: "hdel" when any field was there (replicated with the fields
 * named, as the script's HDEL is), then "del" when the hash is gone. */
void fx_hdel_fields(ValkeyModuleCtx *ctx, ValkeyModuleKey *key, ValkeyModuleString *keyname, const char *const *fields,
                    size_t n) {
    if (ValkeyModule_KeyType(key) != VALKEYMODULE_KEYTYPE_HASH) return;
    int deleted = 0;
    ValkeyModuleString **argv = ValkeyModule_Alloc(n * sizeof *argv);
    for (size_t i = 0; i < n; i++) {
        argv[i] = ValkeyModule_CreateString(ctx, fields[i], strlen(fields[i]));
        if (ValkeyModule_KeyType(key) == VALKEYMODULE_KEYTYPE_HASH &&
            ValkeyModule_HashSet(key, VALKEYMODULE_HASH_NONE, argv[i], VALKEYMODULE_HASH_DELETE, NULL) > 0)
            deleted = 1;
    }
    if (deleted) {
        removed_from(ctx, key, VALKEYMODULE_NOTIFY_HASH, "hdel", keyname);
        ValkeyModule_Replicate(ctx, "HDEL", "sv", keyname, argv, n);
    }
    for (size_t i = 0; i < n; i++) ValkeyModule_FreeString(ctx, argv[i]);
    ValkeyModule_Free(argv);
}

/* HINCRBY key field delta: "hincrby", replicated as HINCRBY. The field absent counts as 0 (an
 * integer is there: the transition wrote it). Returns the new value. */
long long fx_hincrby(ValkeyModuleCtx *ctx, ValkeyModuleKey *key, ValkeyModuleString *keyname, const char *field,
                     long long delta) {
    long long v = row_int_field(ctx, key, field, 0) + delta;
    char num[24];
    ValkeyModuleString *value = ValkeyModule_CreateString(ctx, num, decimal(v, num));
    ValkeyModule_HashSet(key, VALKEYMODULE_HASH_CFIELDS, field, value, NULL);
    ValkeyModule_FreeString(ctx, value);
    touched(ctx, VALKEYMODULE_NOTIFY_HASH, "hincrby", keyname);
    ValkeyModule_Replicate(ctx, "HINCRBY", "scl", keyname, field, delta);
    return v;
}

/* new_row of the prelude with extra field/value pairs after its fields (enqueue_unique's dedupe
 * and dedupe_ms): one HSET of them all, in order, with one "hset" event, as the script writes it. */
void fx_new_row_with(ValkeyModuleCtx *ctx, ValkeyModuleKey *row, ValkeyModuleString *row_name,
                     ValkeyModuleString *payload, long long now, long long priority, const char *const *extra,
                     ValkeyModuleString **values, size_t nextra) {
    ValkeyModuleString *v[6 + 2 * 4 + 2];
    int owned[6 + 2 * 4 + 2] = {0};
    size_t n = 0;
    char num[24], pnum[24];
    static const char *const head[] = {ROW_PAYLOAD, ROW_ENQUEUED_AT};
    ValkeyModuleString *head_values[] = {payload, ValkeyModule_CreateString(ctx, num, decimal(now, num))};
    for (int i = 0; i < 2; i++) {
        v[n] = ValkeyModule_CreateString(ctx, head[i], strlen(head[i]));
        owned[n++] = 1;
        v[n] = head_values[i];
        owned[n++] = i == 1;
    }
    if (priority != 0) {
        v[n] = ValkeyModule_CreateString(ctx, "priority", 8);
        owned[n++] = 1;
        v[n] = ValkeyModule_CreateString(ctx, pnum, decimal(priority, pnum));
        owned[n++] = 1;
    }
    for (size_t i = 0; i < nextra && i < 4; i++) {
        v[n] = ValkeyModule_CreateString(ctx, extra[i], strlen(extra[i]));
        owned[n++] = 1;
        v[n] = values[i];
        owned[n++] = 0;
    }
    for (size_t i = 0; i < n; i += 2) ValkeyModule_HashSet(row, VALKEYMODULE_HASH_NONE, v[i], v[i + 1], NULL);
    touched(ctx, VALKEYMODULE_NOTIFY_HASH, "hset", row_name);
    ValkeyModule_Replicate(ctx, "HSET", "sv", row_name, v, n);
    for (size_t i = 0; i < n; i++)
        if (owned[i]) ValkeyModule_FreeString(ctx, v[i]);
}

/* SET key value, with PX px when px > 0, run by the server's own SET as fx_record runs it (its
 * events: "set", then "expire" with PX; the value stored as the script's SET stores it), and
 * replicated as SET key value [PXAT <the absolute expiry>]. The open key is closed around the
 * call and opened again. */
void fx_set_string(ValkeyModuleCtx *ctx, ValkeyModuleKey **key, ValkeyModuleString *keyname,
                   ValkeyModuleString *value, long long px) {
    ValkeyModule_CloseKey(*key);
    ValkeyModuleCallReply *reply = px > 0 ? ValkeyModule_Call(ctx, "SET", "sscl", keyname, value, "PX", px)
                                          : ValkeyModule_Call(ctx, "SET", "ss", keyname, value);
    if (reply != NULL) ValkeyModule_FreeCallReply(reply);
    *key = ValkeyModule_OpenKey(ctx, keyname, VALKEYMODULE_READ | VALKEYMODULE_WRITE);
    if (px > 0)
        ValkeyModule_Replicate(ctx, "SET", "sscl", keyname, value, "PXAT", (long long)ValkeyModule_GetAbsExpire(*key));
    else
        ValkeyModule_Replicate(ctx, "SET", "ss", keyname, value);
}
