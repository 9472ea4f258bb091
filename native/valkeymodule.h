/* valkeymodule.h: the part of the Valkey module API (API version 1) that trafikey uses, and nothing
 * more. Written for this project from the API reference; it is not a copy of the server's header.
 *
 * How the API reaches a module: the server passes ValkeyModule_OnLoad a context whose first word
 * is a pointer to its GetApi function; GetApi("ValkeyModule_<name>", &ptr) fills each function
 * pointer below (Valkey also exports every name as "RedisModule_<name>" for old modules).
 * TRAFIKEY_API lists each function once; the pointers and ValkeyModule_Init are generated from it.
 *
 * Every file of the module includes this header; exactly one (trafikey.c) defines TRAFIKEY_API_DEFINE
 * before it, and so holds the pointers and ValkeyModule_Init. The pointers are hidden from the
 * shared object's exported symbols. */
#ifndef TRAFIKEY_VALKEYMODULE_H
#define TRAFIKEY_VALKEYMODULE_H

#include <stddef.h>
#include <stdint.h>

/* ---- Status and mode constants ---------------------------------------------------------------- */
#define VALKEYMODULE_OK 0
#define VALKEYMODULE_ERR 1
#define VALKEYMODULE_APIVER_1 1

#define VALKEYMODULE_READ (1 << 0)
#define VALKEYMODULE_WRITE (1 << 1)

#define VALKEYMODULE_LIST_HEAD 0
#define VALKEYMODULE_LIST_TAIL 1

/* ValkeyModule_KeyType results. */
#define VALKEYMODULE_KEYTYPE_EMPTY 0
#define VALKEYMODULE_KEYTYPE_STRING 1
#define VALKEYMODULE_KEYTYPE_LIST 2
#define VALKEYMODULE_KEYTYPE_HASH 3
#define VALKEYMODULE_KEYTYPE_SET 4
#define VALKEYMODULE_KEYTYPE_ZSET 5
#define VALKEYMODULE_KEYTYPE_MODULE 6
#define VALKEYMODULE_KEYTYPE_STREAM 7

/* ValkeyModule_StreamAdd: the server assigns the id, as `*` in XADD. */
#define VALKEYMODULE_STREAM_ADD_AUTOID (1 << 0)
/* ValkeyModule_StreamTrimByLength: whole nodes only, as `MAXLEN ~` in XADD. */
#define VALKEYMODULE_STREAM_TRIM_APPROX (1 << 0)

/* ValkeyModule_ZsetAdd output flags. */
#define VALKEYMODULE_ZADD_ADDED (1 << 2)
#define VALKEYMODULE_ZADD_UPDATED (1 << 3)
#define VALKEYMODULE_ZADD_NOP (1 << 4)

/* ValkeyModule_HashGet / HashSet flags, and the value that deletes a field in HashSet. */
#define VALKEYMODULE_HASH_NONE 0
#define VALKEYMODULE_HASH_CFIELDS (1 << 2)
#define VALKEYMODULE_HASH_DELETE ((ValkeyModuleString *)(long)1)

/* ValkeyModule_GetContextFlags: the server runs in cluster mode. */
#define VALKEYMODULE_CTX_FLAGS_CLUSTER (1 << 5)
/* ValkeyModule_GetContextFlags bits that mean "no ACL user behind this call". */
#define VALKEYMODULE_CTX_FLAGS_REPLICATED (1 << 12)
#define VALKEYMODULE_CTX_FLAGS_LOADING (1 << 13)

/* Keyspace notification classes (the g, $, l, h, z of notify-keyspace-events). */
#define VALKEYMODULE_NOTIFY_GENERIC (1 << 2)
#define VALKEYMODULE_NOTIFY_STRING (1 << 3)
#define VALKEYMODULE_NOTIFY_LIST (1 << 4)
#define VALKEYMODULE_NOTIFY_HASH (1 << 6)
#define VALKEYMODULE_NOTIFY_ZSET (1 << 7)
#define VALKEYMODULE_NOTIFY_STREAM (1 << 10)

/* ValkeyModule_SetModuleOptions: the module signals modified keys itself (WATCH parity). */
#define VALKEYMODULE_OPTION_NO_IMPLICIT_SIGNAL_MODIFIED (1 << 1)

#define VALKEYMODULE_POSITIVE_INFINITE (1.0 / 0.0)
#define VALKEYMODULE_NEGATIVE_INFINITE (-1.0 / 0.0)

/* The AOF loading client's id. */
#define VALKEYMODULE_AOF_CLIENT_ID UINT64_MAX

/* ---- Opaque handles ---------------------------------------------------------------------------- */
typedef struct ValkeyModuleCtx ValkeyModuleCtx;
typedef struct ValkeyModuleKey ValkeyModuleKey;
typedef struct ValkeyModuleString ValkeyModuleString;
typedef struct ValkeyModuleUser ValkeyModuleUser;
typedef struct ValkeyModuleCommand ValkeyModuleCommand;
typedef struct ValkeyModuleCallReply ValkeyModuleCallReply;

/* A stream entry's id, <ms>-<seq>. */
typedef struct ValkeyModuleStreamID {
    uint64_t ms;
    uint64_t seq;
} ValkeyModuleStreamID;

typedef long long mstime_t;
typedef long long ustime_t;

typedef int (*ValkeyModuleCmdFunc)(ValkeyModuleCtx *ctx, ValkeyModuleString **argv, int argc);

/* ---- Command info (ValkeyModule_SetCommandInfo), info version 1 -------------------------------- */
/* Key-spec flags. */
#define VALKEYMODULE_CMD_KEY_RO (1ULL << 0)
#define VALKEYMODULE_CMD_KEY_RW (1ULL << 1)
#define VALKEYMODULE_CMD_KEY_OW (1ULL << 2)
#define VALKEYMODULE_CMD_KEY_RM (1ULL << 3)
#define VALKEYMODULE_CMD_KEY_ACCESS (1ULL << 4)
#define VALKEYMODULE_CMD_KEY_UPDATE (1ULL << 5)
#define VALKEYMODULE_CMD_KEY_INSERT (1ULL << 6)
#define VALKEYMODULE_CMD_KEY_DELETE (1ULL << 7)

typedef enum {
    VALKEYMODULE_KSPEC_BS_INVALID = 0, /* ends the key-spec array */
    VALKEYMODULE_KSPEC_BS_UNKNOWN,
    VALKEYMODULE_KSPEC_BS_INDEX,
    VALKEYMODULE_KSPEC_BS_KEYWORD
} ValkeyModuleKeySpecBeginSearchType;

typedef enum {
    VALKEYMODULE_KSPEC_FK_OMITTED = 0,
    VALKEYMODULE_KSPEC_FK_UNKNOWN,
    VALKEYMODULE_KSPEC_FK_RANGE,
    VALKEYMODULE_KSPEC_FK_KEYNUM
} ValkeyModuleKeySpecFindKeysType;

typedef enum {
    VALKEYMODULE_ARG_TYPE_STRING,
    VALKEYMODULE_ARG_TYPE_INTEGER,
    VALKEYMODULE_ARG_TYPE_DOUBLE,
    VALKEYMODULE_ARG_TYPE_KEY,
    VALKEYMODULE_ARG_TYPE_PATTERN,
    VALKEYMODULE_ARG_TYPE_UNIX_TIME,
    VALKEYMODULE_ARG_TYPE_PURE_TOKEN,
    VALKEYMODULE_ARG_TYPE_ONEOF,
    VALKEYMODULE_ARG_TYPE_BLOCK
} ValkeyModuleCommandArgType;

/* Declared only for its size, which the info version carries; trafikey passes no args. */
typedef struct ValkeyModuleCommandArg {
    const char *name;
    ValkeyModuleCommandArgType type;
    int key_spec_index;
    const char *token;
    const char *summary;
    const char *since;
    int flags;
    const char *deprecated_since;
    struct ValkeyModuleCommandArg *subargs;
    const char *display_text;
} ValkeyModuleCommandArg;

typedef struct {
    const char *since;
    const char *changes;
} ValkeyModuleCommandHistoryEntry;

typedef struct {
    const char *notes;
    uint64_t flags; /* VALKEYMODULE_CMD_KEY_* */
    ValkeyModuleKeySpecBeginSearchType begin_search_type;
    union {
        struct {
            int pos;
        } index;
        struct {
            const char *keyword;
            int startfrom;
        } keyword;
    } bs;
    ValkeyModuleKeySpecFindKeysType find_keys_type;
    union {
        struct {
            int lastkey;
            int keystep;
            int limit;
        } range;
        struct {
            int keynumidx;
            int firstkey;
            int keystep;
        } keynum;
    } fk;
} ValkeyModuleCommandKeySpec;

typedef struct {
    int version;
    size_t sizeof_historyentry;
    size_t sizeof_keyspec;
    size_t sizeof_arg;
} ValkeyModuleCommandInfoVersion;

static const ValkeyModuleCommandInfoVersion trafikey_command_info_version = {
    .version = 1,
    .sizeof_historyentry = sizeof(ValkeyModuleCommandHistoryEntry),
    .sizeof_keyspec = sizeof(ValkeyModuleCommandKeySpec),
    .sizeof_arg = sizeof(ValkeyModuleCommandArg),
};
#define VALKEYMODULE_COMMAND_INFO_VERSION (&trafikey_command_info_version)

typedef struct {
    const ValkeyModuleCommandInfoVersion *version;
    const char *summary;
    const char *complexity;
    const char *since;
    ValkeyModuleCommandHistoryEntry *history;
    const char *tips;
    int arity; /* -N: at least N, the command name included */
    ValkeyModuleCommandKeySpec *key_specs; /* ended by an all-zero entry */
    ValkeyModuleCommandArg *args;
} ValkeyModuleCommandInfo;

/* ---- The functions: X(return type, name, parameter list) ----------------------------------------- */
#define TRAFIKEY_API(X)                                                                                \
    /* registration */                                                                             \
    X(void, SetModuleAttribs, (ValkeyModuleCtx * ctx, const char *name, int ver, int apiver))      \
    X(int, IsModuleNameBusy, (const char *name))                                                   \
    X(int, CreateCommand, (ValkeyModuleCtx * ctx, const char *name, ValkeyModuleCmdFunc cmdfunc,   \
                           const char *strflags, int firstkey, int lastkey, int keystep))          \
    X(ValkeyModuleCommand *, GetCommand, (ValkeyModuleCtx * ctx, const char *name))                \
    X(int, SetCommandInfo, (ValkeyModuleCommand * command, const ValkeyModuleCommandInfo *info))   \
    X(void, SetModuleOptions, (ValkeyModuleCtx * ctx, int options))                                \
    /* memory */                                                                                   \
    X(void *, Alloc, (size_t bytes))                                                               \
    X(void *, Realloc, (void *ptr, size_t bytes))                                                  \
    X(void, Free, (void *ptr))                                                                     \
    /* strings */                                                                                  \
    X(ValkeyModuleString *, CreateString, (ValkeyModuleCtx * ctx, const char *ptr, size_t len))   \
    X(void, FreeString, (ValkeyModuleCtx * ctx, ValkeyModuleString *str))                         \
    X(const char *, StringPtrLen, (const ValkeyModuleString *str, size_t *len))                   \
    X(int, StringToLongLong, (const ValkeyModuleString *str, long long *ll))                      \
    /* replies */                                                                                  \
    X(int, ReplyWithError, (ValkeyModuleCtx * ctx, const char *err))                              \
    X(int, ReplyWithSimpleString, (ValkeyModuleCtx * ctx, const char *msg))                       \
    X(int, ReplyWithLongLong, (ValkeyModuleCtx * ctx, long long ll))                              \
    X(int, ReplyWithArray, (ValkeyModuleCtx * ctx, long len))                                     \
    X(int, ReplyWithString, (ValkeyModuleCtx * ctx, ValkeyModuleString *str))                     \
    X(int, ReplyWithStringBuffer, (ValkeyModuleCtx * ctx, const char *buf, size_t len))           \
    X(int, ReplyWithNull, (ValkeyModuleCtx * ctx))                                                \
    /* keys */                                                                                     \
    X(ValkeyModuleKey *, OpenKey, (ValkeyModuleCtx * ctx, ValkeyModuleString *keyname, int mode)) \
    X(void, CloseKey, (ValkeyModuleKey * key))                                                     \
    X(int, KeyType, (ValkeyModuleKey * key))                                                       \
    X(size_t, ValueLength, (ValkeyModuleKey * key))                                                \
    X(int, DeleteKey, (ValkeyModuleKey * key))                                                     \
    X(int, StringSet, (ValkeyModuleKey * key, ValkeyModuleString *str))                            \
    X(char *, StringDMA, (ValkeyModuleKey * key, size_t *len, int mode))                           \
    X(int, SetExpire, (ValkeyModuleKey * key, mstime_t expire))                                    \
    X(mstime_t, GetAbsExpire, (ValkeyModuleKey * key))                                             \
    X(int, ListPush, (ValkeyModuleKey * key, int where, ValkeyModuleString *ele))                  \
    X(int, HashGet, (ValkeyModuleKey * key, int flags, ...))                                       \
    X(int, HashSet, (ValkeyModuleKey * key, int flags, ...))                                       \
    X(int, ZsetAdd, (ValkeyModuleKey * key, double score, ValkeyModuleString *ele, int *flagsptr)) \
    X(int, ZsetScore, (ValkeyModuleKey * key, ValkeyModuleString *ele, double *score))             \
    X(int, ZsetRem, (ValkeyModuleKey * key, ValkeyModuleString *ele, int *deleted))                \
    X(int, ZsetFirstInScoreRange, (ValkeyModuleKey * key, double min, double max, int minex,       \
                                   int maxex))                                                     \
    X(ValkeyModuleString *, ZsetRangeCurrentElement, (ValkeyModuleKey * key, double *score))       \
    X(int, ZsetRangeNext, (ValkeyModuleKey * key))                                                 \
    X(int, ZsetRangeEndReached, (ValkeyModuleKey * key))                                           \
    X(void, ZsetRangeStop, (ValkeyModuleKey * key))                                                \
    X(int, StreamAdd, (ValkeyModuleKey * key, int flags, ValkeyModuleStreamID *id,                 \
                       ValkeyModuleString **argv, int64_t numfields))                              \
    X(long long, StreamTrimByLength, (ValkeyModuleKey * key, int flags, long long length))         \
    /* effects: replication, notifications, WATCH */                                              \
    X(int, Replicate, (ValkeyModuleCtx * ctx, const char *cmdname, const char *fmt, ...))          \
    X(int, NotifyKeyspaceEvent, (ValkeyModuleCtx * ctx, int type, const char *event,               \
                                 ValkeyModuleString *key))                                         \
    X(int, SignalModifiedKey, (ValkeyModuleCtx * ctx, ValkeyModuleString *keyname))                \
    /* clock, context, ACL */                                                                      \
    X(ustime_t, CachedMicroseconds, (void))                                                        \
    X(int, GetContextFlags, (ValkeyModuleCtx * ctx))                                               \
    X(unsigned long long, GetClientId, (ValkeyModuleCtx * ctx))                                    \
    X(ValkeyModuleString *, GetCurrentUserName, (ValkeyModuleCtx * ctx))                           \
    X(ValkeyModuleUser *, GetModuleUserFromUserName, (ValkeyModuleString * name))                  \
    X(int, FreeModuleUser, (ValkeyModuleUser * user))                                              \
    X(int, ACLCheckCommandPermissions, (ValkeyModuleUser * user, ValkeyModuleString **argv,        \
                                        int argc))                                                 \
    /* key positions (getkeys-api) and the one command call, for cluster slot checks */            \
    X(int, IsKeysPositionRequest, (ValkeyModuleCtx * ctx))                                         \
    X(void, KeyAtPosWithFlags, (ValkeyModuleCtx * ctx, int pos, int flags))                        \
    X(ValkeyModuleCallReply *, Call, (ValkeyModuleCtx * ctx, const char *cmdname, const char *fmt, \
                                      ...))                                                        \
    X(void, FreeCallReply, (ValkeyModuleCallReply * reply))                                        \
    X(const char *, CallReplyStringPtr, (ValkeyModuleCallReply * reply, size_t * len))          \
    X(long long, CallReplyInteger, (ValkeyModuleCallReply * reply))

#ifdef TRAFIKEY_API_DEFINE
#define TRAFIKEY_API_POINTER(ret, name, params) __attribute__((visibility("hidden"))) ret(*ValkeyModule_##name) params;
#else
#define TRAFIKEY_API_POINTER(ret, name, params) extern __attribute__((visibility("hidden"))) ret(*ValkeyModule_##name) params;
#endif
TRAFIKEY_API(TRAFIKEY_API_POINTER)
#undef TRAFIKEY_API_POINTER

#ifdef TRAFIKEY_API_DEFINE
static int (*ValkeyModule_GetApi)(const char *name, void *funcptr);

/* Fills every pointer above; VALKEYMODULE_ERR when the server lacks one of them or the name is
 * taken by another module. */
static int ValkeyModule_Init(ValkeyModuleCtx *ctx, const char *name, int ver, int apiver) {
    void *getapi = ((void **)ctx)[0];
    ValkeyModule_GetApi = (int (*)(const char *, void *))(uintptr_t)getapi;
#define TRAFIKEY_API_FETCH(ret, fname, params)                                                        \
    if (ValkeyModule_GetApi("ValkeyModule_" #fname, (void *)&ValkeyModule_##fname) != VALKEYMODULE_OK) \
        return VALKEYMODULE_ERR;
    TRAFIKEY_API(TRAFIKEY_API_FETCH)
#undef TRAFIKEY_API_FETCH
    if (ValkeyModule_IsModuleNameBusy(name)) return VALKEYMODULE_ERR;
    ValkeyModule_SetModuleAttribs(ctx, name, ver, apiver);
    return VALKEYMODULE_OK;
}
#endif

#endif
