/* trim_dead.c: EMQ.TRIM_DEAD, dead jobs kept within the queue's bounds (twin of trim_dead.lua).
 * The bounds are <base>deadconf's max_count and max_age_ms (absent: the defaults; 0: no bound of
 * that kind); each job trimmed leaves dead and its row and ended key are deleted, as purge.lua
 * deletes them, every derived key checked before anything is written. */
#include <stdio.h>

#include "trafikey.h"

/* DEAD_BOUNDS of echomq/engine/transitions.py: 10,000 jobs, 180 days. */
#define DEAD_MAX_COUNT_DEFAULT 10000LL
#define DEAD_MAX_AGE_MS_DEFAULT 15552000000LL

static const char *const bound_fields[2] = {"max_count", "max_age_ms"};
static const long long bound_defaults[2] = {DEAD_MAX_COUNT_DEFAULT, DEAD_MAX_AGE_MS_DEFAULT};

/* The bounds read off deadconf (open, absent or a hash). 0 after writing the EMQNUM error naming
 * the first field that is not an integer from 0 into err. */
static int read_bounds(ValkeyModuleCtx *ctx, ValkeyModuleKey *deadconf, long long bounds[2], char *err, size_t cap) {
    for (int i = 0; i < 2; i++) {
        bounds[i] = bound_defaults[i];
        if (ValkeyModule_KeyType(deadconf) == VALKEYMODULE_KEYTYPE_EMPTY) continue;
        ValkeyModuleString *v = NULL;
        ValkeyModule_HashGet(deadconf, VALKEYMODULE_HASH_CFIELDS, bound_fields[i], &v, NULL);
        if (v == NULL) continue;
        Bytes b = bytes_of(v);
        int ok = emq_parse_int(b.p, b.n, 0, &bounds[i]);
        ValkeyModule_FreeString(ctx, v);
        if (!ok) {
            char name[32];
            snprintf(name, sizeof name, "deadconf %s", bound_fields[i]);
            emq_number_error(err, cap, name, 0);
            return 0;
        }
    }
    return 1;
}

/* The oldest dead jobs, at most limit, while dead holds more than max_count or the job died at
 * now - max_age_ms or before; their ids into *out (n of them, the caller frees them). */
static size_t over_bounds(ValkeyModuleCtx *ctx, ValkeyModuleKey *dead, long long now, long long limit, const long long bounds[2],
                          ValkeyModuleString ***out) {
    long long over = bounds[0] > 0 ? (long long)ValkeyModule_ValueLength(dead) - bounds[0] : 0;
    ValkeyModuleString **ids = NULL;
    size_t n = 0, cap = 0;
    if (ValkeyModule_ZsetFirstInScoreRange(dead, VALKEYMODULE_NEGATIVE_INFINITE, VALKEYMODULE_POSITIVE_INFINITE, 0,
                                           0) == VALKEYMODULE_OK) {
        while (!ValkeyModule_ZsetRangeEndReached(dead) && (long long)n < limit) {
            double score;
            ValkeyModuleString *member = ValkeyModule_ZsetRangeCurrentElement(dead, &score);
            if (member == NULL) break;
            int aged = bounds[1] > 0 && score <= (double)(now - bounds[1]);
            if ((long long)n + 1 > over && !aged) {
                ValkeyModule_FreeString(ctx, member);
                break;
            }
            if (n == cap) {
                cap = cap ? cap * 2 : 16;
                ids = ValkeyModule_Realloc(ids, cap * sizeof *ids);
            }
            ids[n++] = member;
            if (!ValkeyModule_ZsetRangeNext(dead)) break;
        }
        ValkeyModule_ZsetRangeStop(dead);
    }
    *out = ids;
    return n;
}

/* purge.lua's checks of one job: its row readable and writable by the caller and not on another
 * node (of any type: it is deleted), its ended key checked. NULL or the error. */
static const char *check_trimmed(ValkeyModuleCtx *ctx, Acl *acl, Bytes base, ValkeyModuleString *id) {
    const char *err = check_named_key(ctx, acl, base, "job:", id, KEYTYPE_ANY, NULL);
    return err ? err : check_named_key(ctx, acl, base, "ended:", id, VALKEYMODULE_KEYTYPE_LIST, NULL);
}

/* DEL of a derived key when it is there (an absent key: no event, nothing replicated). */
static void del_if_present(ValkeyModuleCtx *ctx, Bytes base, const char *mid, ValkeyModuleString *id) {
    ValkeyModuleString *name = derived_key(ctx, base, mid, id);
    ValkeyModuleKey *key = ValkeyModule_OpenKey(ctx, name, VALKEYMODULE_READ | VALKEYMODULE_WRITE);
    if (ValkeyModule_KeyType(key) != VALKEYMODULE_KEYTYPE_EMPTY) fx_del(ctx, key, name);
    ValkeyModule_CloseKey(key);
    ValkeyModule_FreeString(ctx, name);
}

/* EMQ.TRIM_DEAD 2 <base>dead <base>deadconf <now> <limit:1>
 * Twin of trim_dead.lua. :trimmed | EMQARITY EMQKEYS EMQNUM WRONGTYPE NOPERM TRYAGAIN. */
int tx_trim_dead(ValkeyModuleCtx *ctx, Call *call, ValkeyModuleKey **k) {
    long long now = call->num[EMQ_TRIM_DEAD_ARG_NOW], limit = call->num[EMQ_TRIM_DEAD_ARG_LIMIT];
    ValkeyModuleKey *dead = k[EMQ_TRIM_DEAD_KEY_DEAD];
    long long bounds[2];
    char err[128];
    if (!read_bounds(ctx, k[EMQ_TRIM_DEAD_KEY_DEADCONF], bounds, err, sizeof err)) return reply_error(ctx, err);

    ValkeyModuleString **ids = NULL;
    size_t n = over_bounds(ctx, dead, now, limit, bounds, &ids);
    Acl acl = {ctx, NULL, 0};
    const char *fail = NULL;
    for (size_t i = 0; i < n && fail == NULL; i++) fail = check_trimmed(ctx, &acl, call->base, ids[i]);
    acl_release(&acl);
    if (fail == NULL) {
        EventSink ev = event_sink(call, k);
        for (size_t i = 0; i < n; i++) {
            long long attempt = ev_attempts_of(ctx, &ev, call->base, ids[i]);
            fx_zrem(ctx, dead, call->keys[EMQ_TRIM_DEAD_KEY_DEAD], ids[i]);
            del_if_present(ctx, call->base, "job:", ids[i]);
            del_if_present(ctx, call->base, "ended:", ids[i]);
            ev_emit(ctx, &ev, &(Event){.kind = "purged", .id = ids[i], .attempt = attempt});
        }
    }
    for (size_t i = 0; i < n; i++) ValkeyModule_FreeString(ctx, ids[i]);
    ValkeyModule_Free(ids);
    if (fail) return reply_error(ctx, fail);
    return ValkeyModule_ReplyWithLongLong(ctx, (long long)n);
}
