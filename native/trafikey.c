/* trafikey: the native executor of echomq, a Valkey module.
 *
 * Each command is the twin of one script in echomq/lua/ and follows docs/PROTOCOL.md: the same keys
 * and arguments (`EMQ.<VERB> numkeys key... arg...`, the layout of EVALSHA), the same validation
 * order, byte-identical replies under RESP2 and RESP3, and the same resulting keyspace for every
 * argument list. Where this file and the Lua differ, the Lua is the reference.
 *
 * Replication style, for every command: EFFECTS. Each write is replicated with
 * ValkeyModule_Replicate as the plain command the Lua twin would have run (HSET, HDEL, DEL,
 * PEXPIREAT with the absolute expiry, ZADD, ZREM, RPUSH, LPUSH, SET) with literal values, and only
 * when it changed something; the server wraps one call's effects in MULTI/EXEC. A replica or an
 * AOF without the module reaches the same keyspace. Never ReplicateVerbatim: `now = *` reads a
 * clock. The fence counter a claim takes is replicated as `SET <base>fence <value>`, the value the
 * lease was given, never as INCR: replaying it cannot count twice or drift from the rows' fences.
 *
 * Every effect also fires the keyspace event the twin's command fires, and signals the key as
 * modified only when it was (the module opts out of the implicit signal on CloseKey), so WATCH
 * and client-side caching see what they would see with the scripts.
 *
 * Handlers run: numkeys and shape -> id -> keys -> integers and now -> open keys and check their
 * types -> derived keys (ACL, type, ghosts) -> mutate (each effect replicates itself) -> reply. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "emq_core.h"
#define EMQ_PROTOCOL_DEFINE
#include "protocol.h"
#include "valkeymodule.h"

#define TRAFIKEY_VERSION 1
/* "job:" + the longest id the kind gate admits. */
#define ROW_SUFFIX_MAX (4 + EMQ_ID_KIND_LEN + EMQ_ID_REST_MAX)

/* Strings made once at load: the arguments of the ACL probe and the wake token. */
static ValkeyModuleString *s_hincrby, *s_attempts, *s_one, *s_zero;

/* ---- Small helpers ------------------------------------------------------------------------------ */

typedef struct {
    const char *p;
    size_t n;
} Bytes;

static Bytes bytes_of(const ValkeyModuleString *s) {
    Bytes b;
    b.p = ValkeyModule_StringPtrLen(s, &b.n);
    return b;
}

static int reply_error(ValkeyModuleCtx *ctx, const char *err) {
    ValkeyModule_ReplyWithError(ctx, err);
    return VALKEYMODULE_OK;
}

/* base + mid + tail as a new string (a derived key: a row or a lane). */
static ValkeyModuleString *derived_key(ValkeyModuleCtx *ctx, Bytes base, const char *mid,
                                       const ValkeyModuleString *tail) {
    size_t mlen = strlen(mid);
    Bytes t = bytes_of(tail);
    char *buf = ValkeyModule_Alloc(base.n + mlen + t.n + 1);
    memcpy(buf, base.p, base.n);
    memcpy(buf + base.n, mid, mlen);
    memcpy(buf + base.n + mlen, t.p, t.n);
    ValkeyModuleString *key = ValkeyModule_CreateString(ctx, buf, base.n + mlen + t.n);
    ValkeyModule_Free(buf);
    return key;
}

/* A non-negative or negative integer in canonical decimal, without snprintf (it is on every
 * write path). buf must hold 21 bytes; returns the length. */
static size_t decimal(long long v, char *buf) {
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

/* A growable array of strings the handler owns (ids read off a zset). */
typedef struct {
    ValkeyModuleString **v;
    size_t n, cap;
} StrList;

static void strlist_push(StrList *l, ValkeyModuleString *s) {
    if (l->n == l->cap) {
        l->cap = l->cap ? l->cap * 2 : 8;
        l->v = ValkeyModule_Realloc(l->v, l->cap * sizeof *l->v);
    }
    l->v[l->n++] = s;
}

static void strlist_free(ValkeyModuleCtx *ctx, StrList *l) {
    for (size_t i = 0; i < l->n; i++) ValkeyModule_FreeString(ctx, l->v[i]);
    ValkeyModule_Free(l->v);
    l->v = NULL;
    l->n = l->cap = 0;
}

/* ---- Key positions ------------------------------------------------------------------------------ */

/* The flags every declared key carries, in the key spec and in getkeys answers alike. */
#define DECLARED_KEY_FLAGS (VALKEYMODULE_CMD_KEY_RW | VALKEYMODULE_CMD_KEY_ACCESS | VALKEYMODULE_CMD_KEY_UPDATE)

/* numkeys as the server reads EVALSHA's when it looks for the keys (evalGetKeys: atoi, so leading
 * blanks, a sign, leading zeros and trailing bytes pass), for ACL, COMMAND GETKEYS and the
 * cluster's slot check alike: the key spec's strict read refuses " 3" and the server falls back to
 * this callback. 0 when there are no keys to report: numkeys below 1 or above the arguments. The
 * handler reads numkeys strictly (split_numkeys), as EVALSHA's handler does. */
static int declared_key_count(ValkeyModuleString **argv, int argc) {
    if (argc < 2) return 0;
    int numkeys = atoi(ValkeyModule_StringPtrLen(argv[1], NULL));
    return numkeys < 1 || numkeys > argc - 2 ? 0 : numkeys;
}

/* Answers a getkeys request (cluster redirection, COMMAND GETKEYS, ACL): the numkeys keys after
 * argv[1], as EVALSHA declares its own. */
static int report_keys(ValkeyModuleCtx *ctx, ValkeyModuleString **argv, int argc) {
    int numkeys = declared_key_count(argv, argc);
    for (int i = 0; i < numkeys; i++) ValkeyModule_KeyAtPosWithFlags(ctx, 2 + i, DECLARED_KEY_FLAGS);
    return VALKEYMODULE_OK;
}

/* ---- Validation steps, in the order of docs/PROTOCOL.md -------------------------------------- */

/* One call after its fixed arguments passed steps 1-4: the declared keys and the arguments (views
 * into argv), the queue's base (a view into the first key) and the integer and now arguments read,
 * by position. */
typedef struct {
    const EmqCommandSpec *spec;
    ValkeyModuleString **keys;
    int nkeys;
    ValkeyModuleString **args;
    int nargs;
    Bytes base;
    long long num[EMQ_ARGS_MAX];
} Call;

/* numkeys exactly as EVALSHA's handler parses it (the server's own errors); sets the keys and the
 * arguments of call. Returns 0 after replying with the error. */
static int split_numkeys(ValkeyModuleCtx *ctx, ValkeyModuleString **argv, int argc, Call *call) {
    long long numkeys;
    if (argc < 2) {
        reply_error(ctx, EMQ_ERR_NUMKEYS_BIG); /* unreachable: registered with arity -2 */
        return 0;
    }
    if (ValkeyModule_StringToLongLong(argv[1], &numkeys) != VALKEYMODULE_OK) {
        reply_error(ctx, EMQ_ERR_NUMKEYS_INT);
        return 0;
    }
    if (numkeys > argc - 2) {
        reply_error(ctx, EMQ_ERR_NUMKEYS_BIG);
        return 0;
    }
    if (numkeys < 0) {
        reply_error(ctx, EMQ_ERR_NUMKEYS_NEG);
        return 0;
    }
    call->keys = argv + 2;
    call->nkeys = (int)numkeys;
    call->args = argv + 2 + numkeys;
    call->nargs = argc - 2 - (int)numkeys;
    return 1;
}

/* Step 1, the shape (EMQARITY): the table's keys and arguments (a command taking a list: at least
 * its fixed arguments). Returns 0 after replying with the error. */
static int check_shape(ValkeyModuleCtx *ctx, const Call *call) {
    const EmqCommandSpec *spec = call->spec;
    int args_ok = spec->nforms ? call->nargs >= spec->nargs : call->nargs == spec->nargs;
    if (call->nkeys == spec->nkeys && args_ok) return 1;
    char buf[128];
    if (spec->nforms) emq_variadic_arity_error(buf, sizeof buf, spec->verb, spec->nkeys, spec->nargs);
    else emq_arity_error(buf, sizeof buf, spec->verb, spec->nkeys, spec->nargs);
    reply_error(ctx, buf);
    return 0;
}

/* Step 2, the gates: the id argument (EMQKIND), then a group argument (EMQLANE). NULL or the
 * error. */
static const char *check_gates(const Call *call) {
    for (int i = 0; i < call->spec->nargs; i++) {
        Bytes b = bytes_of(call->args[i]);
        if (call->spec->args[i].kind == EMQ_ARG_ID && !emq_id_ok(b.p, b.n)) return EMQ_ERR_KIND;
    }
    for (int i = 0; i < call->spec->nargs; i++) {
        Bytes b = bytes_of(call->args[i]);
        if (call->spec->args[i].kind == EMQ_ARG_GROUP && !emq_lane_ok(b.p, b.n)) return EMQ_ERR_LANE;
    }
    return NULL;
}

/* A declared key's suffix after the base: the table's, followed by its argument for a derived one
 * ("job:" + id, written into room of ROW_SUFFIX_MAX bytes). */
static Bytes key_suffix(const Call *call, int i, char *room) {
    const EmqKeySpec *key = &call->spec->keys[i];
    Bytes out = {key->suffix, key->len};
    if (key->from_arg < 0) return out;
    Bytes tail = bytes_of(call->args[key->from_arg]);
    memcpy(room, key->suffix, key->len);
    memcpy(room + key->len, tail.p, tail.n);
    out.p = room;
    out.n = key->len + tail.n;
    return out;
}

/* Step 3, keys_base of the prelude: the first key ends with its suffix and every other key is
 * exactly base + its suffix. Sets call->base (a view into the first key); 0 when the keys are not
 * one queue's. The gates ran first, so a derived suffix fits its room. */
static int keys_base(Call *call) {
    char room[ROW_SUFFIX_MAX];
    Bytes first = bytes_of(call->keys[0]), suffix = key_suffix(call, 0, room);
    size_t blen;
    if (!emq_split_base(first.p, first.n, suffix.p, suffix.n, &blen)) return 0;
    for (int i = 1; i < call->nkeys; i++) {
        Bytes k = bytes_of(call->keys[i]);
        suffix = key_suffix(call, i, room);
        if (!emq_is_base_plus(k.p, k.n, first.p, blen, suffix.p, suffix.n)) return 0;
    }
    call->base.p = first.p;
    call->base.n = blen;
    return 1;
}

static int parse_int(const ValkeyModuleString *s, long long min, long long *out) {
    Bytes b = bytes_of(s);
    return emq_parse_int(b.p, b.n, min, out);
}

/* now: "*" is the cached clock of this command (what TIME gives a script), in ms. */
static int parse_now(const ValkeyModuleString *s, long long *out) {
    Bytes b = bytes_of(s);
    int r = emq_parse_now(b.p, b.n, out);
    if (r == 2) *out = ValkeyModule_CachedMicroseconds() / 1000;
    return r != 0;
}

/* One integer or now argument, of spec: 0 after writing its EMQNUM error into err. */
static int parse_number(const EmqArgSpec *spec, const ValkeyModuleString *s, long long *out, char *err,
                        size_t cap) {
    if (spec->kind == EMQ_ARG_NOW) {
        if (parse_now(s, out)) return 1;
        snprintf(err, cap, "%s", EMQ_ERR_NOW);
        return 0;
    }
    if (spec->kind != EMQ_ARG_INT || parse_int(s, spec->min, out)) return 1;
    emq_number_error(err, cap, spec->name, spec->min);
    return 0;
}

/* Steps 1-4 for the fixed arguments of the command spec: numkeys and shape, the gates, the keys,
 * the integers and now in argument order. Returns 0 after replying with the error. */
static int check_call(ValkeyModuleCtx *ctx, ValkeyModuleString **argv, int argc, const EmqCommandSpec *spec,
                      Call *call) {
    call->spec = spec;
    if (!split_numkeys(ctx, argv, argc, call) || !check_shape(ctx, call)) return 0;
    const char *gate = check_gates(call);
    if (gate) {
        reply_error(ctx, gate);
        return 0;
    }
    if (!keys_base(call)) {
        reply_error(ctx, EMQ_ERR_KEYS);
        return 0;
    }
    char err[128];
    for (int i = 0; i < spec->nargs; i++) {
        call->num[i] = 0;
        if (!parse_number(&spec->args[i], call->args[i], &call->num[i], err, sizeof err)) {
            reply_error(ctx, err);
            return 0;
        }
    }
    return 1;
}

static void close_keys(ValkeyModuleKey **keys, int n) {
    for (int i = 0; i < n; i++) ValkeyModule_CloseKey(keys[i]);
}

/* Step 5, types_ok of the prelude: opens the declared keys in order, each absent or of the table's
 * type. Stops at the first bad key, as the script does, closing what it opened; returns 0 then. */
static int open_typed(ValkeyModuleCtx *ctx, const Call *call, ValkeyModuleKey **out) {
    for (int i = 0; i < call->nkeys; i++) {
        out[i] = ValkeyModule_OpenKey(ctx, call->keys[i], VALKEYMODULE_READ | VALKEYMODULE_WRITE);
        int t = ValkeyModule_KeyType(out[i]);
        if (t != VALKEYMODULE_KEYTYPE_EMPTY && t != call->spec->keys[i].type) {
            close_keys(out, i + 1);
            return 0;
        }
    }
    return 1;
}

/* ---- Derived keys: the caller's ACL ------------------------------------------------------------- */

/* may_access of the prelude is redis.acl_check_cmd('HINCRBY', key, 'attempts', '1'): the caller's
 * user must be allowed the command HINCRBY and read+write on the key. The same check runs here
 * through ACLCheckCommandPermissions on the same argument list. The user is fetched on first use,
 * so a call that touches no derived key pays nothing; a call without a user (the primary link, the
 * AOF) may access everything, as the script engine lets a user-less client. */
typedef struct {
    ValkeyModuleCtx *ctx;
    ValkeyModuleUser *user;
    int resolved;
} Acl;

static int acl_may_access(Acl *acl, ValkeyModuleString *key) {
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

static void acl_release(Acl *acl) {
    if (acl->user) ValkeyModule_FreeModuleUser(acl->user);
    acl->user = NULL;
}

/* ---- Derived keys: the cluster's slot ------------------------------------------------------------ */

/* In a cluster, a derived key that is absent here may be on another node while its slot moves:
 * gone with the keys already migrated (this node MIGRATING), or not migrated yet (IMPORTING, the
 * caller sent ASKING). The module then refuses the call rather than take the job for a ghost. The
 * server answers that question: ValkeyModule_Call runs its cluster check (the caller's ASKING
 * copied), which refuses a command naming several keys of a moving slot unless all are present.
 * So the probe names the absent key and a second key of the queue's slot, the base (the script
 * names KEYS[1]). Asked only of absent keys, only in cluster mode. */
static int moved_away(ValkeyModuleCtx *ctx, ValkeyModuleString *key, Bytes base) {
    if (!(ValkeyModule_GetContextFlags(ctx) & VALKEYMODULE_CTX_FLAGS_CLUSTER)) return 0;
    ValkeyModuleCallReply *reply = ValkeyModule_Call(ctx, "EXISTS", "sb", key, base.p, base.n);
    if (reply == NULL) return 1;
    ValkeyModule_FreeCallReply(reply);
    return 0;
}

/* ---- Reading a row -------------------------------------------------------------------------------- */

/* int_field of the prelude: an absent or non-integer field counts as the fallback. */
static long long row_int_field(ValkeyModuleCtx *ctx, ValkeyModuleKey *row, const char *field,
                               long long fallback) {
    ValkeyModuleString *v = NULL;
    ValkeyModule_HashGet(row, VALKEYMODULE_HASH_CFIELDS, field, &v, NULL);
    if (v == NULL) return fallback;
    long long out;
    Bytes b = bytes_of(v);
    int ok = emq_parse_int(b.p, b.n, 0, &out);
    ValkeyModule_FreeString(ctx, v);
    return ok ? out : fallback;
}

/* is_current_lease of the prelude: id in active, the row exists, its fence equals fence. */
static int is_current_lease(ValkeyModuleCtx *ctx, ValkeyModuleKey *active, ValkeyModuleKey *row,
                            ValkeyModuleString *id, long long fence) {
    double score;
    if (ValkeyModule_ZsetScore(active, id, &score) != VALKEYMODULE_OK) return 0;
    if (ValkeyModule_KeyType(row) == VALKEYMODULE_KEYTYPE_EMPTY) return 0;
    return row_int_field(ctx, row, "fence", 0) == fence;
}

/* fence_counter of the prelude: the value of the queue's fence counter (absent: 0); 0 when it
 * holds anything but an integer from 0 to EMQ_FENCE_MAX. The key is open and a string. */
static int fence_counter(ValkeyModuleKey *key, long long *out) {
    *out = 0;
    if (ValkeyModule_KeyType(key) == VALKEYMODULE_KEYTYPE_EMPTY) return 1;
    size_t len;
    const char *p = ValkeyModule_StringDMA(key, &len, VALKEYMODULE_READ);
    return p != NULL && emq_parse_int(p, len, 0, out) && *out <= EMQ_FENCE_MAX;
}

/* ---- Effects: one function per command the twin runs ------------------------------------------- */

static void touched(ValkeyModuleCtx *ctx, int type, const char *event, ValkeyModuleString *keyname) {
    ValkeyModule_NotifyKeyspaceEvent(ctx, type, event, keyname);
    ValkeyModule_SignalModifiedKey(ctx, keyname);
}

/* ZADD key score member: an event and a replica command only when the member was added or its
 * score changed, as zaddCommand. */
static void fx_zadd(ValkeyModuleCtx *ctx, ValkeyModuleKey *key, ValkeyModuleString *keyname,
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
static void fx_zrem(ValkeyModuleCtx *ctx, ValkeyModuleKey *key, ValkeyModuleString *keyname,
                    ValkeyModuleString *member) {
    int deleted = 0;
    ValkeyModule_ZsetRem(key, member, &deleted);
    if (!deleted) return;
    ValkeyModule_NotifyKeyspaceEvent(ctx, VALKEYMODULE_NOTIFY_ZSET, "zrem", keyname);
    if (ValkeyModule_KeyType(key) == VALKEYMODULE_KEYTYPE_EMPTY)
        ValkeyModule_NotifyKeyspaceEvent(ctx, VALKEYMODULE_NOTIFY_GENERIC, "del", keyname);
    ValkeyModule_SignalModifiedKey(ctx, keyname);
    ValkeyModule_Replicate(ctx, "ZREM", "ss", keyname, member);
}

/* LPUSH / RPUSH key element. */
static void fx_push(ValkeyModuleCtx *ctx, ValkeyModuleKey *key, ValkeyModuleString *keyname,
                    int where, ValkeyModuleString *element) {
    ValkeyModule_ListPush(key, where, element);
    int head = where == VALKEYMODULE_LIST_HEAD;
    touched(ctx, VALKEYMODULE_NOTIFY_LIST, head ? "lpush" : "rpush", keyname);
    ValkeyModule_Replicate(ctx, head ? "LPUSH" : "RPUSH", "ss", keyname, element);
}

/* HSET key field value (one field). HSET always fires, changed or not. */
static void fx_hset1(ValkeyModuleCtx *ctx, ValkeyModuleKey *key, ValkeyModuleString *keyname,
                     const char *field, ValkeyModuleString *value) {
    ValkeyModule_HashSet(key, VALKEYMODULE_HASH_CFIELDS, field, value, NULL);
    touched(ctx, VALKEYMODULE_NOTIFY_HASH, "hset", keyname);
    ValkeyModule_Replicate(ctx, "HSET", "scs", keyname, field, value);
}

/* SET key value (a string, its TTL dropped as SET drops it). */
static void fx_set(ValkeyModuleCtx *ctx, ValkeyModuleKey *key, ValkeyModuleString *keyname,
                   ValkeyModuleString *value) {
    ValkeyModule_StringSet(key, value);
    touched(ctx, VALKEYMODULE_NOTIFY_STRING, "set", keyname);
    ValkeyModule_Replicate(ctx, "SET", "ss", keyname, value);
}

/* DEL key (the caller knows it exists). */
static void fx_del(ValkeyModuleCtx *ctx, ValkeyModuleKey *key, ValkeyModuleString *keyname) {
    ValkeyModule_DeleteKey(key);
    touched(ctx, VALKEYMODULE_NOTIFY_GENERIC, "del", keyname);
    ValkeyModule_Replicate(ctx, "DEL", "s", keyname);
}

/* HDEL key field: "hdel" when the field was there, then "del" when the hash is gone. */
static void fx_hdel(ValkeyModuleCtx *ctx, ValkeyModuleKey *key, ValkeyModuleString *keyname,
                    const char *field) {
    int deleted = ValkeyModule_HashSet(key, VALKEYMODULE_HASH_CFIELDS, field, VALKEYMODULE_HASH_DELETE,
                                       NULL);
    if (deleted <= 0) return;
    ValkeyModule_NotifyKeyspaceEvent(ctx, VALKEYMODULE_NOTIFY_HASH, "hdel", keyname);
    if (ValkeyModule_KeyType(key) == VALKEYMODULE_KEYTYPE_EMPTY)
        ValkeyModule_NotifyKeyspaceEvent(ctx, VALKEYMODULE_NOTIFY_GENERIC, "del", keyname);
    ValkeyModule_SignalModifiedKey(ctx, keyname);
    ValkeyModule_Replicate(ctx, "HDEL", "sc", keyname, field);
}

/* PEXPIRE key ms (ms >= 1): a no-op on a missing key; replicated as PEXPIREAT, as the server does. */
static void fx_pexpire(ValkeyModuleCtx *ctx, ValkeyModuleKey *key, ValkeyModuleString *keyname,
                       long long ms) {
    if (ValkeyModule_KeyType(key) == VALKEYMODULE_KEYTYPE_EMPTY) return;
    ValkeyModule_SetExpire(key, ms);
    touched(ctx, VALKEYMODULE_NOTIFY_GENERIC, "expire", keyname);
    ValkeyModule_Replicate(ctx, "PEXPIREAT", "sl", keyname, (long long)ValkeyModule_GetAbsExpire(key));
}

/* wake of the prelude: up to n tokens, never more than EMQ_WAKE_CAP in the list; one RPUSH each. */
static void fx_wake(ValkeyModuleCtx *ctx, ValkeyModuleKey *key, ValkeyModuleString *keyname,
                    long long n) {
    long long room = EMQ_WAKE_CAP - (long long)ValkeyModule_ValueLength(key);
    if (n > room) n = room;
    for (long long i = 0; i < n; i++) fx_push(ctx, key, keyname, VALKEYMODULE_LIST_TAIL, s_one);
}

/* lease of the prelude: count the attempt, take the next fence (SET fence), write both to the row
 * in one HSET, put the id in active until deadline. */
static void fx_lease(ValkeyModuleCtx *ctx, ValkeyModuleKey *row, ValkeyModuleString *row_name,
                     ValkeyModuleString *id, ValkeyModuleKey *active, ValkeyModuleString *active_name,
                     ValkeyModuleKey *fence_key, ValkeyModuleString *fence_name, long long last_fence,
                     long long deadline, long long *attempt, long long *fence) {
    *attempt = row_int_field(ctx, row, "attempts", 0) + 1;
    *fence = last_fence + 1;
    char num[24];
    ValkeyModuleString *attempt_str = ValkeyModule_CreateString(ctx, num, decimal(*attempt, num));
    ValkeyModuleString *fence_str = ValkeyModule_CreateString(ctx, num, decimal(*fence, num));
    fx_set(ctx, fence_key, fence_name, fence_str);
    ValkeyModule_HashSet(row, VALKEYMODULE_HASH_CFIELDS, "attempts", attempt_str, "fence", fence_str, NULL);
    touched(ctx, VALKEYMODULE_NOTIFY_HASH, "hset", row_name);
    ValkeyModule_Replicate(ctx, "HSET", "scscs", row_name, "attempts", attempt_str, "fence", fence_str);
    fx_zadd(ctx, active, active_name, (double)deadline, id);
    ValkeyModule_FreeString(ctx, attempt_str);
    ValkeyModule_FreeString(ctx, fence_str);
}

/* finish_ack of the prelude, on a current lease: leave active; the row becomes a tombstone for
 * retention_ms (0: deleted). HDEL may empty the hash (a row of payload only): then it is gone and
 * PEXPIRE a no-op. */
static const char *finish_ack(ValkeyModuleCtx *ctx, ValkeyModuleKey *active, ValkeyModuleString *active_name,
                              ValkeyModuleKey *row, ValkeyModuleString *row_name, ValkeyModuleString *id,
                              long long retention_ms) {
    fx_zrem(ctx, active, active_name, id);
    if (retention_ms == 0) {
        fx_del(ctx, row, row_name);
    } else {
        fx_hdel(ctx, row, row_name, "payload");
        fx_pexpire(ctx, row, row_name, retention_ms);
    }
    return "ACKED";
}

/* The declared keys retry writes besides the row: active, delayed, dead (open, and their names). */
typedef struct {
    ValkeyModuleKey *active, *delayed, *dead;
    ValkeyModuleString *active_name, *delayed_name, *dead_name;
} RetryKeys;

/* finish_retry of the prelude, on a current lease: leave active, record the error, go dead when
 * the row's attempts reach max_attempts, else wait in delayed until now + delay_ms. */
static const char *finish_retry(ValkeyModuleCtx *ctx, const RetryKeys *rk, ValkeyModuleKey *row,
                                ValkeyModuleString *row_name, ValkeyModuleString *id,
                                ValkeyModuleString *error, long long delay_ms, long long max_attempts,
                                long long now) {
    fx_zrem(ctx, rk->active, rk->active_name, id);
    fx_hset1(ctx, row, row_name, "error", error);
    if (row_int_field(ctx, row, "attempts", 0) >= max_attempts) {
        fx_zadd(ctx, rk->dead, rk->dead_name, (double)now, id);
        return "DEAD";
    }
    fx_zadd(ctx, rk->delayed, rk->delayed_name, (double)(now + delay_ms), id);
    return "RETRYING";
}

/* ---- Claiming: claim's walk and lease, shared with settle --------------------------------------- */

/* The declared keys a claim writes: pending, active, the fence counter (open, and their names). */
typedef struct {
    ValkeyModuleKey *pending, *active, *fence;
    ValkeyModuleString *pending_name, *active_name, *fence_name;
} ClaimKeys;

/* plan_claims of the prelude: walk pending from its lowest entry for up to count live rows (to
 * lease) and the ghosts met on the way (to drop), checking every row before anything is written.
 * NULL, or the error to reply. */
static const char *plan_claims(ValkeyModuleCtx *ctx, Acl *acl, Bytes base, ValkeyModuleKey *pending,
                               long long count, StrList *claims, StrList *ghosts) {
    const char *err = NULL;
    if (count == 0 || ValkeyModule_ZsetFirstInScoreRange(pending, VALKEYMODULE_NEGATIVE_INFINITE,
                                                         VALKEYMODULE_POSITIVE_INFINITE, 0, 0) != VALKEYMODULE_OK)
        return NULL;
    while (!ValkeyModule_ZsetRangeEndReached(pending) && (long long)claims->n < count) {
        double score;
        ValkeyModuleString *member = ValkeyModule_ZsetRangeCurrentElement(pending, &score);
        if (member == NULL) break;
        ValkeyModuleString *name = derived_key(ctx, base, "job:", member);
        int t = VALKEYMODULE_KEYTYPE_EMPTY;
        if (!acl_may_access(acl, name)) {
            err = EMQ_ERR_PERM;
        } else {
            ValkeyModuleKey *row = ValkeyModule_OpenKey(ctx, name, VALKEYMODULE_READ);
            t = ValkeyModule_KeyType(row);
            ValkeyModule_CloseKey(row);
            if (t == VALKEYMODULE_KEYTYPE_EMPTY && moved_away(ctx, name, base)) err = EMQ_ERR_MOVING;
        }
        ValkeyModule_FreeString(ctx, name);
        if (err) {
            ValkeyModule_FreeString(ctx, member);
            break;
        }
        strlist_push(t == VALKEYMODULE_KEYTYPE_HASH ? claims : ghosts, member);
        if (!ValkeyModule_ZsetRangeNext(pending)) break;
    }
    ValkeyModule_ZsetRangeStop(pending);
    return err;
}

/* Lease one planned job as claim does and reply [id, payload, attempt, fence]. */
static void claim_planned(ValkeyModuleCtx *ctx, Bytes base, const ClaimKeys *ck, ValkeyModuleString *id,
                          long long *last_fence, long long deadline) {
    ValkeyModuleString *row_name = derived_key(ctx, base, "job:", id);
    ValkeyModuleKey *row = ValkeyModule_OpenKey(ctx, row_name, VALKEYMODULE_READ | VALKEYMODULE_WRITE);
    fx_zrem(ctx, ck->pending, ck->pending_name, id);
    long long attempt, fence;
    fx_lease(ctx, row, row_name, id, ck->active, ck->active_name, ck->fence, ck->fence_name, *last_fence,
             deadline, &attempt, &fence);
    *last_fence = fence;
    ValkeyModuleString *payload = NULL;
    ValkeyModule_HashGet(row, VALKEYMODULE_HASH_CFIELDS, "payload", &payload, NULL);
    ValkeyModule_ReplyWithArray(ctx, 4);
    ValkeyModule_ReplyWithString(ctx, id);
    if (payload) {
        ValkeyModule_ReplyWithString(ctx, payload);
        ValkeyModule_FreeString(ctx, payload);
    } else {
        ValkeyModule_ReplyWithStringBuffer(ctx, "", 0);
    }
    ValkeyModule_ReplyWithLongLong(ctx, attempt);
    ValkeyModule_ReplyWithLongLong(ctx, fence);
    ValkeyModule_CloseKey(row);
    ValkeyModule_FreeString(ctx, row_name);
}

/* ---- The commands --------------------------------------------------------------------------------- */

/* EMQ.ENQUEUE 3 <base>job:<id> <base>pending <base>wake <id> <payload> <now>
 * Twin of enqueue.lua. +ENQUEUED | +DUPLICATE | EMQARITY EMQKIND EMQKEYS EMQNUM WRONGTYPE. */
static int emq_enqueue(ValkeyModuleCtx *ctx, ValkeyModuleString **argv, int argc) {
    if (ValkeyModule_IsKeysPositionRequest(ctx)) return report_keys(ctx, argv, argc);
    Call call;
    if (!check_call(ctx, argv, argc, &emq_commands[EMQ_CMD_ENQUEUE], &call)) return VALKEYMODULE_OK;
    ValkeyModuleString *id = call.args[EMQ_ENQUEUE_ARG_ID], *payload = call.args[EMQ_ENQUEUE_ARG_PAYLOAD];
    long long now = call.num[EMQ_ENQUEUE_ARG_NOW];
    ValkeyModuleKey *k[EMQ_ENQUEUE_NUMKEYS];
    if (!open_typed(ctx, &call, k)) return reply_error(ctx, EMQ_ERR_TYPE);
    ValkeyModuleKey *row = k[0], *pending = k[1], *wake = k[2];

    if (ValkeyModule_KeyType(row) != VALKEYMODULE_KEYTYPE_EMPTY) {
        close_keys(k, 3);
        return ValkeyModule_ReplyWithSimpleString(ctx, "DUPLICATE");
    }
    char num[32];
    size_t nlen = decimal(now, num);
    ValkeyModuleString *enqueued_at = ValkeyModule_CreateString(ctx, num, nlen);
    ValkeyModule_HashSet(row, VALKEYMODULE_HASH_CFIELDS, "payload", payload, "attempts", s_zero,
                         "enqueued_at", enqueued_at, NULL);
    touched(ctx, VALKEYMODULE_NOTIFY_HASH, "hset", call.keys[0]);
    ValkeyModule_Replicate(ctx, "HSET", "scscscs", call.keys[0], "payload", payload, "attempts", s_zero,
                           "enqueued_at", enqueued_at);
    fx_zadd(ctx, pending, call.keys[1], (double)now, id);
    fx_wake(ctx, wake, call.keys[2], 1);
    ValkeyModule_FreeString(ctx, enqueued_at);
    close_keys(k, 3);
    return ValkeyModule_ReplyWithSimpleString(ctx, "ENQUEUED");
}

/* EMQ.CLAIM 3 <base>pending <base>active <base>fence <lease_ms> <now>
 * Twin of claim.lua. *4 id payload :attempt :fence | null | EMQARITY EMQKEYS EMQNUM WRONGTYPE
 * EMQFENCE NOPERM TRYAGAIN.
 * Walks pending from its lowest entry (plan_claims for one job); ghosts met on the way are dropped
 * once the walk is over. */
static int emq_claim(ValkeyModuleCtx *ctx, ValkeyModuleString **argv, int argc) {
    if (ValkeyModule_IsKeysPositionRequest(ctx)) return report_keys(ctx, argv, argc);
    Call call;
    if (!check_call(ctx, argv, argc, &emq_commands[EMQ_CMD_CLAIM], &call)) return VALKEYMODULE_OK;
    Bytes base = call.base;
    long long lease_ms = call.num[EMQ_CLAIM_ARG_LEASE_MS], now = call.num[EMQ_CLAIM_ARG_NOW];
    ValkeyModuleKey *k[EMQ_CLAIM_NUMKEYS];
    if (!open_typed(ctx, &call, k)) return reply_error(ctx, EMQ_ERR_TYPE);
    ValkeyModuleKey *pending = k[0], *active = k[1], *fence_key = k[2];
    long long last_fence;
    if (!fence_counter(fence_key, &last_fence)) {
        close_keys(k, 3);
        return reply_error(ctx, EMQ_ERR_FENCE);
    }

    /* Find the first live job: every derived row is checked before anything is written. */
    Acl acl = {ctx, NULL, 0};
    StrList claims = {0}, ghosts = {0};
    const char *err = plan_claims(ctx, &acl, base, pending, 1, &claims, &ghosts);
    acl_release(&acl);
    if (err) {
        strlist_free(ctx, &claims);
        strlist_free(ctx, &ghosts);
        close_keys(k, 3);
        return reply_error(ctx, err);
    }
    for (size_t i = 0; i < ghosts.n; i++) fx_zrem(ctx, pending, call.keys[0], ghosts.v[i]);
    if (claims.n == 0) {
        ValkeyModule_ReplyWithNull(ctx);
    } else {
        ClaimKeys ck = {pending, active, fence_key, call.keys[0], call.keys[1], call.keys[2]};
        claim_planned(ctx, base, &ck, claims.v[0], &last_fence, now + lease_ms);
    }
    strlist_free(ctx, &claims);
    strlist_free(ctx, &ghosts);
    close_keys(k, 3);
    return VALKEYMODULE_OK;
}

/* EMQ.ACK 2 <base>active <base>job:<id> <id> <fence> <retention_ms>
 * Twin of ack.lua. +ACKED | +STALE | EMQARITY EMQKIND EMQKEYS EMQNUM WRONGTYPE. */
static int emq_ack(ValkeyModuleCtx *ctx, ValkeyModuleString **argv, int argc) {
    if (ValkeyModule_IsKeysPositionRequest(ctx)) return report_keys(ctx, argv, argc);
    Call call;
    if (!check_call(ctx, argv, argc, &emq_commands[EMQ_CMD_ACK], &call)) return VALKEYMODULE_OK;
    ValkeyModuleString *id = call.args[EMQ_ACK_ARG_ID];
    long long fence = call.num[EMQ_ACK_ARG_FENCE], retention_ms = call.num[EMQ_ACK_ARG_RETENTION_MS];
    ValkeyModuleKey *k[EMQ_ACK_NUMKEYS];
    if (!open_typed(ctx, &call, k)) return reply_error(ctx, EMQ_ERR_TYPE);
    ValkeyModuleKey *active = k[0], *row = k[1];

    if (!is_current_lease(ctx, active, row, id, fence)) {
        close_keys(k, 2);
        return ValkeyModule_ReplyWithSimpleString(ctx, "STALE");
    }
    const char *verdict = finish_ack(ctx, active, call.keys[0], row, call.keys[1], id, retention_ms);
    close_keys(k, 2);
    return ValkeyModule_ReplyWithSimpleString(ctx, verdict);
}

/* EMQ.RETRY 4 <base>active <base>delayed <base>dead <base>job:<id>
 *            <id> <fence> <delay_ms> <max_attempts> <error> <now>
 * Twin of retry.lua. +RETRYING | +DEAD | +STALE | EMQARITY EMQKIND EMQKEYS EMQNUM WRONGTYPE. */
static int emq_retry(ValkeyModuleCtx *ctx, ValkeyModuleString **argv, int argc) {
    if (ValkeyModule_IsKeysPositionRequest(ctx)) return report_keys(ctx, argv, argc);
    Call call;
    if (!check_call(ctx, argv, argc, &emq_commands[EMQ_CMD_RETRY], &call)) return VALKEYMODULE_OK;
    ValkeyModuleString *id = call.args[EMQ_RETRY_ARG_ID], *error = call.args[EMQ_RETRY_ARG_ERROR];
    long long fence = call.num[EMQ_RETRY_ARG_FENCE], delay_ms = call.num[EMQ_RETRY_ARG_DELAY_MS],
              max_attempts = call.num[EMQ_RETRY_ARG_MAX_ATTEMPTS], now = call.num[EMQ_RETRY_ARG_NOW];
    ValkeyModuleKey *k[EMQ_RETRY_NUMKEYS];
    if (!open_typed(ctx, &call, k)) return reply_error(ctx, EMQ_ERR_TYPE);
    ValkeyModuleKey *active = k[0], *delayed = k[1], *dead = k[2], *row = k[3];

    if (!is_current_lease(ctx, active, row, id, fence)) {
        close_keys(k, 4);
        return ValkeyModule_ReplyWithSimpleString(ctx, "STALE");
    }
    RetryKeys rk = {active, delayed, dead, call.keys[0], call.keys[1], call.keys[2]};
    const char *verdict = finish_retry(ctx, &rk, row, call.keys[3], id, error, delay_ms, max_attempts, now);
    close_keys(k, 4);
    return ValkeyModule_ReplyWithSimpleString(ctx, verdict);
}

/* EMQ.EXTEND 2 <base>active <base>job:<id> <id> <fence> <lease_ms> <now>
 * Twin of extend.lua. +EXTENDED | +STALE | EMQARITY EMQKIND EMQKEYS EMQNUM WRONGTYPE. */
static int emq_extend(ValkeyModuleCtx *ctx, ValkeyModuleString **argv, int argc) {
    if (ValkeyModule_IsKeysPositionRequest(ctx)) return report_keys(ctx, argv, argc);
    Call call;
    if (!check_call(ctx, argv, argc, &emq_commands[EMQ_CMD_EXTEND], &call)) return VALKEYMODULE_OK;
    ValkeyModuleString *id = call.args[EMQ_EXTEND_ARG_ID];
    long long fence = call.num[EMQ_EXTEND_ARG_FENCE], lease_ms = call.num[EMQ_EXTEND_ARG_LEASE_MS],
              now = call.num[EMQ_EXTEND_ARG_NOW];
    ValkeyModuleKey *k[EMQ_EXTEND_NUMKEYS];
    if (!open_typed(ctx, &call, k)) return reply_error(ctx, EMQ_ERR_TYPE);
    ValkeyModuleKey *active = k[0], *row = k[1];

    if (!is_current_lease(ctx, active, row, id, fence)) {
        close_keys(k, 2);
        return ValkeyModule_ReplyWithSimpleString(ctx, "STALE");
    }
    fx_zadd(ctx, active, call.keys[0], (double)(now + lease_ms), id);
    close_keys(k, 2);
    return ValkeyModule_ReplyWithSimpleString(ctx, "EXTENDED");
}

/* ---- Batches: settle and extend_many ------------------------------------------------------------ */

/* What an item of EMQ.SETTLE does to its lease (a pair of EMQ.EXTEND_MANY is an OP_ACK-shaped
 * id and fence). */
enum { OP_ACK, OP_RETRY, OP_RELEASE };

/* One element of a batch: an item of EMQ.SETTLE (ack, retry or release) or a pair of
 * EMQ.EXTEND_MANY. */
typedef struct {
    int op;
    ValkeyModuleString *id, *error; /* views into argv */
    long long fence, delay_ms, max_attempts;
    ValkeyModuleString *row_name; /* owned, set once the shapes are all checked */
    ValkeyModuleString *lane, *lane_key; /* owned: a release item's lane, when its row has one */
} Item;

static void items_free(ValkeyModuleCtx *ctx, Item *items, size_t n) {
    for (size_t i = 0; i < n; i++) {
        if (items[i].row_name) ValkeyModule_FreeString(ctx, items[i].row_name);
        if (items[i].lane) ValkeyModule_FreeString(ctx, items[i].lane);
        if (items[i].lane_key) ValkeyModule_FreeString(ctx, items[i].lane_key);
    }
    ValkeyModule_Free(items);
}

static int arg_is(const ValkeyModuleString *s, const char *word) {
    Bytes b = bytes_of(s);
    return b.n == strlen(word) && memcmp(b.p, word, b.n) == 0;
}

/* The list of EMQ.SETTLE from args[first], in order: each item's op and width, id, fence,
 * delay_ms, max_attempts. Returns the count parsed, or -1 with the error written into err. */
static long long parse_settle_items(const Call *call, int first, Item *items, char *err, size_t cap) {
    long long n = 0;
    for (int i = first; i < call->nargs; n++) {
        ValkeyModuleString **a = call->args + i;
        int op = arg_is(a[0], "ack") ? OP_ACK : arg_is(a[0], "retry") ? OP_RETRY
                                                : arg_is(a[0], "release") ? OP_RELEASE : -1;
        int width = op == OP_RETRY ? 6 : 3;
        if (op < 0 || i + width > call->nargs) {
            emq_item_error(err, cap, n + 1, EMQ_SETTLE_ITEM);
            return -1;
        }
        Item *it = &items[n];
        *it = (Item){op, a[1], NULL, 0, 0, 0, NULL, NULL, NULL};
        Bytes id = bytes_of(a[1]);
        if (!emq_id_ok(id.p, id.n)) {
            snprintf(err, cap, "%s", EMQ_ERR_KIND);
            return -1;
        }
        if (!parse_int(a[2], 1, &it->fence)) {
            emq_number_error(err, cap, "fence", 1);
            return -1;
        }
        if (op == OP_RETRY) {
            if (!parse_int(a[3], 0, &it->delay_ms)) {
                emq_number_error(err, cap, "delay_ms", 0);
                return -1;
            }
            if (!parse_int(a[4], 1, &it->max_attempts)) {
                emq_number_error(err, cap, "max_attempts", 1);
                return -1;
            }
            it->error = a[5];
        }
        i += width;
    }
    return n;
}

/* The pairs of EMQ.EXTEND_MANY from args[first]: each pair's width, id, fence, in order. */
static long long parse_pairs(const Call *call, int first, Item *items, char *err, size_t cap) {
    long long n = 0;
    for (int i = first; i < call->nargs; i += 2, n++) {
        if (i + 2 > call->nargs) {
            emq_item_error(err, cap, n + 1, EMQ_EXTEND_ITEM);
            return -1;
        }
        items[n] = (Item){OP_ACK, call->args[i], NULL, 0, 0, 0, NULL, NULL, NULL};
        Bytes id = bytes_of(call->args[i]);
        if (!emq_id_ok(id.p, id.n)) {
            snprintf(err, cap, "%s", EMQ_ERR_KIND);
            return -1;
        }
        if (!parse_int(call->args[i + 1], 1, &items[n].fence)) {
            emq_number_error(err, cap, "fence", 1);
            return -1;
        }
    }
    return n;
}

/* check_row of the prelude: an item's row readable and writable by the caller, absent or a hash,
 * not on another node. NULL, or the error to reply. */
static const char *check_row(ValkeyModuleCtx *ctx, Acl *acl, ValkeyModuleString *row_name, Bytes base) {
    if (!acl_may_access(acl, row_name)) return EMQ_ERR_PERM;
    ValkeyModuleKey *row = ValkeyModule_OpenKey(ctx, row_name, VALKEYMODULE_READ);
    int t = ValkeyModule_KeyType(row);
    ValkeyModule_CloseKey(row);
    if (t == VALKEYMODULE_KEYTYPE_EMPTY && moved_away(ctx, row_name, base)) return EMQ_ERR_MOVING;
    if (t != VALKEYMODULE_KEYTYPE_EMPTY && t != VALKEYMODULE_KEYTYPE_HASH) return EMQ_ERR_TYPE;
    return NULL;
}

/* Every item's row derived and checked, in order, before anything is written. */
static const char *check_rows(ValkeyModuleCtx *ctx, Acl *acl, Bytes base, Item *items, long long n) {
    for (long long i = 0; i < n; i++) {
        items[i].row_name = derived_key(ctx, base, "job:", items[i].id);
        const char *err = check_row(ctx, acl, items[i].row_name, base);
        if (err) return err;
    }
    return NULL;
}

static const char *check_lane(ValkeyModuleCtx *ctx, Acl *acl, Bytes base, ValkeyModuleString *lane_key);

/* plan_release_lane of settle.lua: a release item's row that has a lane gets its lane key
 * checked as recover checks it. NULL, or the error to reply. */
static const char *plan_release_lane(ValkeyModuleCtx *ctx, Acl *acl, Bytes base, Item *it) {
    ValkeyModuleKey *row = ValkeyModule_OpenKey(ctx, it->row_name, VALKEYMODULE_READ);
    if (ValkeyModule_KeyType(row) == VALKEYMODULE_KEYTYPE_HASH)
        ValkeyModule_HashGet(row, VALKEYMODULE_HASH_CFIELDS, "lane", &it->lane, NULL);
    ValkeyModule_CloseKey(row);
    if (it->lane == NULL) return NULL;
    it->lane_key = derived_key(ctx, base, "lane:", it->lane);
    return check_lane(ctx, acl, base, it->lane_key);
}

/* check_rows for EMQ.SETTLE: each item's row, and a release item's lane, in item order. */
static const char *check_settle_rows(ValkeyModuleCtx *ctx, Acl *acl, Bytes base, Item *items, long long n) {
    for (long long i = 0; i < n; i++) {
        items[i].row_name = derived_key(ctx, base, "job:", items[i].id);
        const char *err = check_row(ctx, acl, items[i].row_name, base);
        if (!err && items[i].op == OP_RELEASE) err = plan_release_lane(ctx, acl, base, &items[i]);
        if (err) return err;
    }
    return NULL;
}

/* The declared keys of EMQ.SETTLE, open, and their names, in protocol order. */
typedef struct {
    ValkeyModuleKey **k;
    ValkeyModuleString **names;
} SettleKeys;

enum { SK_ACTIVE, SK_DELAYED, SK_DEAD, SK_PENDING, SK_FENCE, SK_RING, SK_WAKE, SK_COUNT };

/* finish_release of settle.lua, on a current lease: leave active, uncount the attempt (never
 * below 0), back where recover puts an expired lease (a flat job to pending at its enqueued_at, a
 * lane job to its lane's head, the group joining the ring if the lane was empty), a wake token. */
static const char *finish_release(ValkeyModuleCtx *ctx, const SettleKeys *sk, ValkeyModuleKey *row,
                                  const Item *it, long long now) {
    fx_zrem(ctx, sk->k[SK_ACTIVE], sk->names[SK_ACTIVE], it->id);
    long long attempts = row_int_field(ctx, row, "attempts", 0);
    char num[24];
    ValkeyModuleString *uncounted = ValkeyModule_CreateString(ctx, num, decimal(attempts > 0 ? attempts - 1 : 0, num));
    fx_hset1(ctx, row, it->row_name, "attempts", uncounted);
    ValkeyModule_FreeString(ctx, uncounted);
    if (it->lane) {
        ValkeyModuleKey *lane = ValkeyModule_OpenKey(ctx, it->lane_key, VALKEYMODULE_READ | VALKEYMODULE_WRITE);
        if (ValkeyModule_ValueLength(lane) == 0)
            fx_push(ctx, sk->k[SK_RING], sk->names[SK_RING], VALKEYMODULE_LIST_TAIL, it->lane);
        fx_push(ctx, lane, it->lane_key, VALKEYMODULE_LIST_HEAD, it->id);
        ValkeyModule_CloseKey(lane);
    } else {
        double at = (double)row_int_field(ctx, row, "enqueued_at", now);
        fx_zadd(ctx, sk->k[SK_PENDING], sk->names[SK_PENDING], at, it->id);
    }
    fx_wake(ctx, sk->k[SK_WAKE], sk->names[SK_WAKE], 1);
    return "RELEASED";
}

/* Settle one item: its verdict, the effects of ack, retry or release on a current lease. */
static const char *settle_item(ValkeyModuleCtx *ctx, const SettleKeys *sk, const Item *it,
                               long long retention_ms, long long now) {
    ValkeyModuleKey *row = ValkeyModule_OpenKey(ctx, it->row_name, VALKEYMODULE_READ | VALKEYMODULE_WRITE);
    RetryKeys rk = {sk->k[SK_ACTIVE], sk->k[SK_DELAYED], sk->k[SK_DEAD],
                    sk->names[SK_ACTIVE], sk->names[SK_DELAYED], sk->names[SK_DEAD]};
    /* Not the current lease (or one settled earlier in this batch): STALE, nothing changes. */
    const char *verdict = "STALE";
    if (is_current_lease(ctx, rk.active, row, it->id, it->fence)) {
        if (it->op == OP_RETRY)
            verdict = finish_retry(ctx, &rk, row, it->row_name, it->id, it->error, it->delay_ms,
                                   it->max_attempts, now);
        else if (it->op == OP_RELEASE)
            verdict = finish_release(ctx, sk, row, it, now);
        else
            verdict = finish_ack(ctx, rk.active, rk.active_name, row, it->row_name, it->id, retention_ms);
    }
    ValkeyModule_CloseKey(row);
    return verdict;
}

/* EMQ.SETTLE 7 <base>active <base>delayed <base>dead <base>pending <base>fence <base>ring <base>wake
 *             <now> <retention_ms> <lease_ms> <count> [ack <id> <fence> | release <id> <fence> |
 *             retry <id> <fence> <delay_ms> <max_attempts> <error>]...
 * Twin of settle.lua. *2 [+verdict...] [[id payload :attempt :fence]...] | EMQARITY EMQKEYS EMQNUM
 * EMQITEM EMQKIND WRONGTYPE EMQFENCE NOPERM TRYAGAIN.
 * Items are applied in order, then up to count jobs leased; everything is checked first. */
static int emq_settle(ValkeyModuleCtx *ctx, ValkeyModuleString **argv, int argc) {
    if (ValkeyModule_IsKeysPositionRequest(ctx)) return report_keys(ctx, argv, argc);
    Call call;
    if (!check_call(ctx, argv, argc, &emq_commands[EMQ_CMD_SETTLE], &call)) return VALKEYMODULE_OK;
    Bytes base = call.base;
    long long now = call.num[EMQ_SETTLE_ARG_NOW], retention_ms = call.num[EMQ_SETTLE_ARG_RETENTION_MS],
              lease_ms = call.num[EMQ_SETTLE_ARG_LEASE_MS], count = call.num[EMQ_SETTLE_ARG_COUNT];
    char err[256];
    Item *items = ValkeyModule_Alloc(((size_t)(call.nargs - 4) / 3 + 1) * sizeof *items);
    long long n = parse_settle_items(&call, 4, items, err, sizeof err);
    if (n < 0) {
        items_free(ctx, items, 0);
        return reply_error(ctx, err);
    }
    ValkeyModuleKey *k[EMQ_SETTLE_NUMKEYS];
    if (!open_typed(ctx, &call, k)) {
        items_free(ctx, items, (size_t)n);
        return reply_error(ctx, EMQ_ERR_TYPE);
    }
    long long last_fence = 0;
    const char *fail = NULL;
    if (count > 0 && !fence_counter(k[4], &last_fence)) fail = EMQ_ERR_FENCE;
    Acl acl = {ctx, NULL, 0};
    StrList claims = {0}, ghosts = {0};
    if (!fail) fail = check_settle_rows(ctx, &acl, base, items, n);
    if (!fail) fail = plan_claims(ctx, &acl, base, k[3], count, &claims, &ghosts);
    /* Each lease takes the next fence: a batch the counter cannot number to its end is refused. */
    if (!fail && last_fence + (long long)claims.n > EMQ_INT_MAX) fail = EMQ_ERR_FENCE;
    acl_release(&acl);
    if (fail) {
        strlist_free(ctx, &claims);
        strlist_free(ctx, &ghosts);
        items_free(ctx, items, (size_t)n);
        close_keys(k, SK_COUNT);
        return reply_error(ctx, fail);
    }

    SettleKeys sk = {k, call.keys};
    ValkeyModule_ReplyWithArray(ctx, 2);
    ValkeyModule_ReplyWithArray(ctx, n);
    for (long long i = 0; i < n; i++)
        ValkeyModule_ReplyWithSimpleString(ctx, settle_item(ctx, &sk, &items[i], retention_ms, now));
    for (size_t i = 0; i < ghosts.n; i++) fx_zrem(ctx, k[3], call.keys[3], ghosts.v[i]);
    ClaimKeys ck = {k[3], k[0], k[4], call.keys[3], call.keys[0], call.keys[4]};
    ValkeyModule_ReplyWithArray(ctx, (long)claims.n);
    for (size_t i = 0; i < claims.n; i++) claim_planned(ctx, base, &ck, claims.v[i], &last_fence, now + lease_ms);

    strlist_free(ctx, &claims);
    strlist_free(ctx, &ghosts);
    items_free(ctx, items, (size_t)n);
    close_keys(k, SK_COUNT);
    return VALKEYMODULE_OK;
}

/* EMQ.EXTEND_MANY 1 <base>active <lease_ms> <now> [<id> <fence>]...
 * Twin of extend_many.lua. *N +EXTENDED|+STALE | EMQARITY EMQKEYS EMQNUM EMQITEM EMQKIND WRONGTYPE
 * NOPERM TRYAGAIN. */
static int emq_extend_many(ValkeyModuleCtx *ctx, ValkeyModuleString **argv, int argc) {
    if (ValkeyModule_IsKeysPositionRequest(ctx)) return report_keys(ctx, argv, argc);
    Call call;
    if (!check_call(ctx, argv, argc, &emq_commands[EMQ_CMD_EXTEND_MANY], &call)) return VALKEYMODULE_OK;
    Bytes base = call.base;
    long long lease_ms = call.num[EMQ_EXTEND_MANY_ARG_LEASE_MS], now = call.num[EMQ_EXTEND_MANY_ARG_NOW];
    char err[128];
    Item *items = ValkeyModule_Alloc(((size_t)(call.nargs - 2) / 2 + 1) * sizeof *items);
    long long n = parse_pairs(&call, 2, items, err, sizeof err);
    if (n < 0) {
        items_free(ctx, items, 0);
        return reply_error(ctx, err);
    }
    ValkeyModuleKey *k[EMQ_EXTEND_MANY_NUMKEYS];
    if (!open_typed(ctx, &call, k)) {
        items_free(ctx, items, (size_t)n);
        return reply_error(ctx, EMQ_ERR_TYPE);
    }
    Acl acl = {ctx, NULL, 0};
    const char *fail = check_rows(ctx, &acl, base, items, n);
    acl_release(&acl);
    if (fail) {
        items_free(ctx, items, (size_t)n);
        close_keys(k, 1);
        return reply_error(ctx, fail);
    }
    ValkeyModule_ReplyWithArray(ctx, n);
    for (long long i = 0; i < n; i++) {
        ValkeyModuleKey *row = ValkeyModule_OpenKey(ctx, items[i].row_name, VALKEYMODULE_READ);
        int current = is_current_lease(ctx, k[0], row, items[i].id, items[i].fence);
        ValkeyModule_CloseKey(row);
        if (current) fx_zadd(ctx, k[0], call.keys[0], (double)(now + lease_ms), items[i].id);
        ValkeyModule_ReplyWithSimpleString(ctx, current ? "EXTENDED" : "STALE");
    }
    items_free(ctx, items, (size_t)n);
    close_keys(k, 1);
    return VALKEYMODULE_OK;
}

/* One due entry of recover/promote, and its plan (plan_moves of the prelude). */
typedef struct {
    ValkeyModuleString *id;
    double score;                /* where a flat job lands in pending */
    int live;                    /* 0: a ghost, dropped from the source zset */
    long long spent;             /* recover: > 0, the attempts of a job that goes dead */
    ValkeyModuleString *lane;    /* the row's lane field, or NULL for a flat job (or a spent one) */
    ValkeyModuleString *lane_key;
} Move;

static void moves_free(ValkeyModuleCtx *ctx, Move *moves, size_t n) {
    for (size_t i = 0; i < n; i++) {
        ValkeyModule_FreeString(ctx, moves[i].id);
        if (moves[i].lane) ValkeyModule_FreeString(ctx, moves[i].lane);
        if (moves[i].lane_key) ValkeyModule_FreeString(ctx, moves[i].lane_key);
    }
    ValkeyModule_Free(moves);
}

/* A lane key a job goes back to: checked (ACL, slot, type). NULL or the error. */
static const char *check_lane(ValkeyModuleCtx *ctx, Acl *acl, Bytes base, ValkeyModuleString *lane_key) {
    if (!acl_may_access(acl, lane_key)) return EMQ_ERR_PERM;
    ValkeyModuleKey *lane = ValkeyModule_OpenKey(ctx, lane_key, VALKEYMODULE_READ);
    int t = ValkeyModule_KeyType(lane);
    ValkeyModule_CloseKey(lane);
    if (t == VALKEYMODULE_KEYTYPE_EMPTY && moved_away(ctx, lane_key, base)) return EMQ_ERR_MOVING;
    if (t != VALKEYMODULE_KEYTYPE_EMPTY && t != VALKEYMODULE_KEYTYPE_LIST) return EMQ_ERR_TYPE;
    return NULL;
}

/* The lane of a live job to be put back: its key checked. NULL or the error. */
static const char *plan_lane(ValkeyModuleCtx *ctx, Acl *acl, Bytes base, Move *m) {
    m->lane_key = derived_key(ctx, base, "lane:", m->lane);
    return check_lane(ctx, acl, base, m->lane_key);
}

/* First pass: sort the due entries into live moves and ghosts, checking every derived key (ACL,
 * the lane's type) before anything is written. recover: a job whose attempts reach max_attempts
 * is spent (it goes dead; its lane is not looked at), a flat job's score is its enqueued_at, or
 * now; promote (max_attempts 0): its due time. Returns NULL on success, else the error to reply. */
static const char *plan_moves(ValkeyModuleCtx *ctx, Bytes base, Move *moves, size_t n, int recover,
                              long long now, long long max_attempts) {
    Acl acl = {ctx, NULL, 0};
    const char *err = NULL;
    for (size_t i = 0; i < n && err == NULL; i++) {
        Move *m = &moves[i];
        ValkeyModuleString *row_name = derived_key(ctx, base, "job:", m->id);
        if (!acl_may_access(&acl, row_name)) {
            err = EMQ_ERR_PERM;
        } else {
            ValkeyModuleKey *row = ValkeyModule_OpenKey(ctx, row_name, VALKEYMODULE_READ);
            int row_type = ValkeyModule_KeyType(row);
            if (row_type == VALKEYMODULE_KEYTYPE_EMPTY && moved_away(ctx, row_name, base)) {
                err = EMQ_ERR_MOVING;
            } else if (row_type == VALKEYMODULE_KEYTYPE_HASH) {
                m->live = 1;
                long long attempts = max_attempts > 0 ? row_int_field(ctx, row, "attempts", 0) : 0;
                if (max_attempts > 0 && attempts >= max_attempts) {
                    m->spent = attempts;
                } else {
                    ValkeyModule_HashGet(row, VALKEYMODULE_HASH_CFIELDS, "lane", &m->lane, NULL);
                    if (m->lane) err = plan_lane(ctx, &acl, base, m);
                    else if (recover) m->score = (double)row_int_field(ctx, row, "enqueued_at", now);
                }
            }
            ValkeyModule_CloseKey(row);
        }
        ValkeyModule_FreeString(ctx, row_name);
    }
    acl_release(&acl);
    return err;
}

/* Second pass, one live move: leave the source zset, then pending or the lane (the group joins
 * the ring's tail when its lane was empty: push_lane of the prelude). */
static void apply_move(ValkeyModuleCtx *ctx, const Move *m, ValkeyModuleKey **k, const Call *call,
                       int lane_end) {
    fx_zrem(ctx, k[0], call->keys[0], m->id);
    if (m->lane) {
        ValkeyModuleKey *lane = ValkeyModule_OpenKey(ctx, m->lane_key, VALKEYMODULE_READ | VALKEYMODULE_WRITE);
        if (ValkeyModule_ValueLength(lane) == 0)
            fx_push(ctx, k[2], call->keys[2], VALKEYMODULE_LIST_TAIL, m->lane);
        fx_push(ctx, lane, m->lane_key, lane_end, m->id);
        ValkeyModule_CloseKey(lane);
    } else {
        fx_zadd(ctx, k[1], call->keys[1], m->score, m->id);
    }
}

/* recover, a spent job: leave active, record why, go dead at now (retry's dead path; the lane, if
 * any, is left as it is). */
static void apply_death(ValkeyModuleCtx *ctx, Bytes base, const Move *m, ValkeyModuleKey **k,
                        const Call *call, long long now) {
    fx_zrem(ctx, k[0], call->keys[0], m->id);
    ValkeyModuleString *row_name = derived_key(ctx, base, "job:", m->id);
    ValkeyModuleKey *row = ValkeyModule_OpenKey(ctx, row_name, VALKEYMODULE_READ | VALKEYMODULE_WRITE);
    char text[96];
    int len = snprintf(text, sizeof text, "lease expired during attempt %lld: the worker was lost", m->spent);
    ValkeyModuleString *error = ValkeyModule_CreateString(ctx, text, (size_t)len);
    fx_hset1(ctx, row, row_name, "error", error);
    ValkeyModule_FreeString(ctx, error);
    ValkeyModule_CloseKey(row);
    ValkeyModule_FreeString(ctx, row_name);
    fx_zadd(ctx, k[4], call->keys[4], (double)now, m->id);
}

/* recover and promote share their shape: take the source zset's entries with score <= now, lowest
 * first, at most limit; drop ghosts; move the live ones (recover: a spent one to dead); leave a
 * wake token per job put back to run. Replies the live jobs taken. */
static int move_due(ValkeyModuleCtx *ctx, ValkeyModuleString **argv, int argc, int recover) {
    Call call;
    if (!check_call(ctx, argv, argc, &emq_commands[recover ? EMQ_CMD_RECOVER : EMQ_CMD_PROMOTE], &call))
        return VALKEYMODULE_OK;
    int nkeys = call.nkeys;
    Bytes base = call.base;
    /* recover and promote share their leading arguments: now, limit. */
    long long now = call.num[EMQ_RECOVER_ARG_NOW], limit = call.num[EMQ_RECOVER_ARG_LIMIT];
    long long max_attempts = recover ? call.num[EMQ_RECOVER_ARG_MAX_ATTEMPTS] : 0;
    ValkeyModuleKey *k[EMQ_KEYS_MAX];
    if (!open_typed(ctx, &call, k)) return reply_error(ctx, EMQ_ERR_TYPE);
    ValkeyModuleKey *source = k[0], *wake = k[3];

    /* ZRANGEBYSCORE source -inf now WITHSCORES LIMIT 0 limit */
    Move *moves = NULL;
    size_t n = 0, cap = 0;
    if (ValkeyModule_ZsetFirstInScoreRange(source, VALKEYMODULE_NEGATIVE_INFINITE, (double)now, 0, 0) ==
        VALKEYMODULE_OK) {
        while (!ValkeyModule_ZsetRangeEndReached(source) && (long long)n < limit) {
            double score;
            ValkeyModuleString *member = ValkeyModule_ZsetRangeCurrentElement(source, &score);
            if (member == NULL) break;
            if (n == cap) {
                cap = cap ? cap * 2 : 16;
                moves = ValkeyModule_Realloc(moves, cap * sizeof *moves);
            }
            moves[n++] = (Move){member, score, 0, 0, NULL, NULL};
            if (!ValkeyModule_ZsetRangeNext(source)) break;
        }
        ValkeyModule_ZsetRangeStop(source);
    }

    const char *err = plan_moves(ctx, base, moves, n, recover, now, max_attempts);
    if (err) {
        moves_free(ctx, moves, n);
        close_keys(k, nkeys);
        return reply_error(ctx, err);
    }

    long long taken = 0, back = 0;
    for (size_t i = 0; i < n; i++) {
        if (!moves[i].live) fx_zrem(ctx, source, call.keys[0], moves[i].id);
        else taken++;
    }
    /* recover pushes lane jobs at the head, latest deadline first, so a lane keeps their order. */
    for (size_t j = 0; j < n; j++) {
        const Move *m = &moves[recover ? n - 1 - j : j];
        if (!m->live) continue;
        if (m->spent) {
            apply_death(ctx, base, m, k, &call, now);
        } else {
            apply_move(ctx, m, k, &call, recover ? VALKEYMODULE_LIST_HEAD : VALKEYMODULE_LIST_TAIL);
            back++;
        }
    }
    fx_wake(ctx, wake, call.keys[3], back);

    moves_free(ctx, moves, n);
    close_keys(k, nkeys);
    return ValkeyModule_ReplyWithLongLong(ctx, taken);
}

/* EMQ.RECOVER 5 <base>active <base>pending <base>ring <base>wake <base>dead <now> <limit> <max_attempts>
 * Twin of recover.lua. :taken (back to run or dead) | EMQARITY EMQKEYS EMQNUM WRONGTYPE NOPERM TRYAGAIN. */
static int emq_recover(ValkeyModuleCtx *ctx, ValkeyModuleString **argv, int argc) {
    if (ValkeyModule_IsKeysPositionRequest(ctx)) return report_keys(ctx, argv, argc);
    return move_due(ctx, argv, argc, 1);
}

/* EMQ.PROMOTE 4 <base>delayed <base>pending <base>ring <base>wake <now> <limit>
 * Twin of promote.lua. :moved | EMQARITY EMQKEYS EMQNUM WRONGTYPE NOPERM. */
static int emq_promote(ValkeyModuleCtx *ctx, ValkeyModuleString **argv, int argc) {
    if (ValkeyModule_IsKeysPositionRequest(ctx)) return report_keys(ctx, argv, argc);
    return move_due(ctx, argv, argc, 0);
}

/* ---- Registration --------------------------------------------------------------------------------- */

/* Like EVAL's: the keys are the numkeys arguments after argv[1]; used as EVAL declares them. */
static ValkeyModuleCommandKeySpec keynum_specs[] = {
    {.notes = "numkeys keys follow numkeys, as with EVALSHA; each may be read and written",
     .flags = DECLARED_KEY_FLAGS,
     .begin_search_type = VALKEYMODULE_KSPEC_BS_INDEX,
     .bs.index.pos = 1,
     .find_keys_type = VALKEYMODULE_KSPEC_FK_KEYNUM,
     .fk.keynum = {.keynumidx = 0, .firstkey = 1, .keystep = 1}},
    {0}};

/* The handler of each command of the table (protocol.h), by its index there. */
static const ValkeyModuleCmdFunc handlers[EMQ_COMMAND_COUNT] = {
    [EMQ_CMD_ENQUEUE] = emq_enqueue, [EMQ_CMD_CLAIM] = emq_claim,
    [EMQ_CMD_ACK] = emq_ack,         [EMQ_CMD_RETRY] = emq_retry,
    [EMQ_CMD_EXTEND] = emq_extend,   [EMQ_CMD_SETTLE] = emq_settle,
    [EMQ_CMD_EXTEND_MANY] = emq_extend_many, [EMQ_CMD_RECOVER] = emq_recover,
    [EMQ_CMD_PROMOTE] = emq_promote,
};

/* Registers every command of the table: its name (lower-case, as the server's arity error quotes
 * it), flags ("fast" only where the work is O(1) or O(log N); only admitting work is "deny-oom",
 * so a full server refuses new jobs but can still drain), summary, complexity and arity. */
static int register_commands(ValkeyModuleCtx *ctx) {
    for (int i = 0; i < EMQ_COMMAND_COUNT; i++) {
        const EmqCommandSpec *spec = &emq_commands[i];
        if (ValkeyModule_CreateCommand(ctx, spec->name, handlers[i], spec->flags, 0, 0, 0) != VALKEYMODULE_OK)
            return VALKEYMODULE_ERR;
        ValkeyModuleCommand *command = ValkeyModule_GetCommand(ctx, spec->name);
        if (command == NULL) return VALKEYMODULE_ERR;
        ValkeyModuleCommandInfo info = {
            .version = VALKEYMODULE_COMMAND_INFO_VERSION,
            .summary = spec->summary,
            .complexity = spec->complexity,
            .since = "1.0.0",
            .arity = spec->arity,
            .key_specs = keynum_specs,
        };
        if (ValkeyModule_SetCommandInfo(command, &info) != VALKEYMODULE_OK) return VALKEYMODULE_ERR;
    }
    return VALKEYMODULE_OK;
}

int ValkeyModule_OnLoad(ValkeyModuleCtx *ctx, ValkeyModuleString **argv, int argc) {
    (void)argv;
    (void)argc;
    if (ValkeyModule_Init(ctx, "trafikey", TRAFIKEY_VERSION, VALKEYMODULE_APIVER_1) != VALKEYMODULE_OK)
        return VALKEYMODULE_ERR;
    ValkeyModule_SetModuleOptions(ctx, VALKEYMODULE_OPTION_NO_IMPLICIT_SIGNAL_MODIFIED);

    s_hincrby = ValkeyModule_CreateString(NULL, "HINCRBY", 7);
    s_attempts = ValkeyModule_CreateString(NULL, "attempts", 8);
    s_one = ValkeyModule_CreateString(NULL, "1", 1);
    s_zero = ValkeyModule_CreateString(NULL, "0", 1);

    if (register_commands(ctx) != VALKEYMODULE_OK) return VALKEYMODULE_ERR;
    return VALKEYMODULE_OK;
}

int ValkeyModule_OnUnload(ValkeyModuleCtx *ctx) {
    (void)ctx;
    ValkeyModule_FreeString(NULL, s_hincrby);
    ValkeyModule_FreeString(NULL, s_attempts);
    ValkeyModule_FreeString(NULL, s_one);
    ValkeyModule_FreeString(NULL, s_zero);
    return VALKEYMODULE_OK;
}
