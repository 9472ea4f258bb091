/* queue_limits.c: queue-wide limits of a flat queue, the twin of include/queue_limits.lua.
 * <base>queueconf (derived) holds the knobs `concurrency`, `rate`, `window_ms` (each an integer
 * from 1; absent or anything else: no limit, a window of 1000 ms) and the state the claims keep:
 * `window` ("<start> <claims>", the rate's current window) and `held` (present while the last
 * claim left active at the concurrency limit with jobs waiting). Claim and settle's claim part
 * read it (queue_limits, limited_take, note_queue_limits); a lease leaving active while the
 * queue is held leaves a wake token (check_queue_slot, release_queue_slot, called from the lane
 * bookkeeping every settlement and recover already run). Over its rate with jobs waiting, the
 * queue's window opening waits in <base>throttled under the member "*" (no group is so named), so
 * a parked consumer's bound learns it as it learns a throttled group's. Writes through effects.c. */
#include <string.h>

#include "trafikey.h"

#define QUEUE_WINDOW_MS 1000

static ValkeyModuleKey *open_named(ValkeyModuleCtx *ctx, Bytes base, const char *suffix, ValkeyModuleString **name) {
    *name = derived_key(ctx, base, suffix, NULL);
    return ValkeyModule_OpenKey(ctx, *name, VALKEYMODULE_READ | VALKEYMODULE_WRITE);
}

static void close_named(ValkeyModuleCtx *ctx, ValkeyModuleKey *key, ValkeyModuleString *name) {
    ValkeyModule_CloseKey(key);
    ValkeyModule_FreeString(ctx, name);
}

/* A field of the hash (NULL when absent or the key is not a hash); the caller frees it. */
static ValkeyModuleString *conf_field(ValkeyModuleKey *conf, const char *field) {
    ValkeyModuleString *v = NULL;
    if (ValkeyModule_KeyType(conf) == VALKEYMODULE_KEYTYPE_HASH) hash_get1(conf, field, &v);
    return v;
}

/* int_arg(v, 1) of a knob: 1 when it holds an integer from 1 (*out set), else 0. */
static int conf_knob(ValkeyModuleCtx *ctx, ValkeyModuleKey *conf, const char *field, long long *out) {
    ValkeyModuleString *v = conf_field(conf, field);
    if (v == NULL) return 0;
    Bytes b = bytes_of(v);
    int ok = emq_parse_int(b.p, b.n, 1, out);
    ValkeyModule_FreeString(ctx, v);
    return ok;
}

/* "<start> <count>", each 1 to 15 digits (the script's '^(%d+) (%d+)$', at most 15 digits). */
static int parse_window(const char *p, size_t n, long long *start, long long *count) {
    const char *space = memchr(p, ' ', n);
    if (space == NULL) return 0;
    size_t first = (size_t)(space - p);
    return emq_parse_int(p, first, 0, start) && emq_parse_int(space + 1, n - first - 1, 0, count);
}

/* <base>queueconf checked as check_key checks a derived key (the caller's ACL, then its type, an
 * absent one whether its slot moves away), opened once: NULL and *conf open (the caller closes it
 * with close_named), or the error to reply (nothing left open). */
static const char *open_conf(ValkeyModuleCtx *ctx, Acl *acl, Bytes base, ValkeyModuleKey **conf,
                             ValkeyModuleString **name) {
    *name = derived_key(ctx, base, "queueconf", NULL);
    const char *err = NULL;
    if (!acl_may_access(acl, *name)) {
        err = EMQ_ERR_PERM;
    } else {
        *conf = ValkeyModule_OpenKey(ctx, *name, VALKEYMODULE_READ | VALKEYMODULE_WRITE);
        int t = ValkeyModule_KeyType(*conf);
        if (t == VALKEYMODULE_KEYTYPE_EMPTY && moved_away(ctx, *name, base)) err = EMQ_ERR_MOVING;
        else if (t != VALKEYMODULE_KEYTYPE_EMPTY && t != VALKEYMODULE_KEYTYPE_HASH) err = EMQ_ERR_TYPE;
        if (err) ValkeyModule_CloseKey(*conf);
    }
    if (err) ValkeyModule_FreeString(ctx, *name);
    return err;
}

const char *queue_limits(ValkeyModuleCtx *ctx, Acl *acl, Bytes base, long long now, QueueLimits *ql) {
    memset(ql, 0, sizeof *ql);
    ql->window_ms = QUEUE_WINDOW_MS;
    ql->start = now;
    ValkeyModuleString *name;
    ValkeyModuleKey *conf;
    const char *err = open_conf(ctx, acl, base, &conf, &name);
    if (err) return err;
    ql->absent = ValkeyModule_KeyType(conf) == VALKEYMODULE_KEYTYPE_EMPTY;
    if (ql->absent) { /* no limits, nothing held: nothing more to read */
        close_named(ctx, conf, name);
        return NULL;
    }
    ql->has_concurrency = conf_knob(ctx, conf, "concurrency", &ql->concurrency);
    ql->has_rate = conf_knob(ctx, conf, "rate", &ql->rate);
    long long window_ms;
    if (conf_knob(ctx, conf, "window_ms", &window_ms)) ql->window_ms = window_ms;
    if (ql->has_rate) {
        err = check_named_key(ctx, acl, base, "throttled", NULL, VALKEYMODULE_KEYTYPE_ZSET, NULL);
        ValkeyModuleString *w = err ? NULL : conf_field(conf, "window");
        if (w) {
            Bytes b = bytes_of(w);
            long long start, count;
            if (parse_window(b.p, b.n, &start, &count) && now < start + ql->window_ms) {
                ql->start = start;
                ql->count = count;
            }
            ValkeyModule_FreeString(ctx, w);
        }
    }
    close_named(ctx, conf, name);
    return err;
}

long long limited_take(const QueueLimits *ql, ValkeyModuleKey *active, long long planned) {
    long long take = planned;
    if (ql->has_concurrency) {
        long long room = ql->concurrency - (long long)ValkeyModule_ValueLength(active);
        if (room < 0) room = 0;
        if (room < take) take = room;
    }
    if (ql->has_rate) {
        long long room = ql->rate - ql->count;
        if (room < 0) room = 0;
        if (room < take) take = room;
    }
    return take;
}

void note_queue_limits(ValkeyModuleCtx *ctx, Bytes base, const QueueLimits *ql, ValkeyModuleKey *active,
                       ValkeyModuleKey *pending, long long taken) {
    if (ql->absent) return;
    ValkeyModuleString *name;
    ValkeyModuleKey *conf = open_named(ctx, base, "queueconf", &name);
    ValkeyModuleString *was = conf_field(conf, "held");
    if (!ql->has_concurrency && !ql->has_rate && was == NULL) {
        close_named(ctx, conf, name);
        return;
    }
    int waiting = ValkeyModule_ValueLength(pending) > 0;
    int held = ql->has_concurrency && waiting && (long long)ValkeyModule_ValueLength(active) >= ql->concurrency;
    if (held && was == NULL) {
        ValkeyModuleString *one = ValkeyModule_CreateString(ctx, "1", 1);
        fx_hset1(ctx, conf, name, "held", one);
        ValkeyModule_FreeString(ctx, one);
    }
    if (was != NULL && !held) fx_hdel(ctx, conf, name, "held");
    if (was) ValkeyModule_FreeString(ctx, was);
    long long count = ql->count + taken;
    if (ql->has_rate && taken > 0) {
        char text[48];
        size_t n = decimal(ql->start, text);
        text[n++] = ' ';
        n += decimal(count, text + n);
        ValkeyModuleString *window = ValkeyModule_CreateString(ctx, text, n);
        fx_hset1(ctx, conf, name, "window", window);
        ValkeyModule_FreeString(ctx, window);
    }
    close_named(ctx, conf, name);
    if (!ql->has_rate) return;
    ValkeyModuleString *tname;
    ValkeyModuleKey *throttled = open_named(ctx, base, "throttled", &tname);
    ValkeyModuleString *member = ValkeyModule_CreateString(ctx, "*", 1);
    double opens;
    int present = ValkeyModule_KeyType(throttled) == VALKEYMODULE_KEYTYPE_ZSET &&
                  ValkeyModule_ZsetScore(throttled, member, &opens) == VALKEYMODULE_OK;
    if (waiting && count >= ql->rate) {
        double at = (double)(ql->start + ql->window_ms);
        if (!present || opens != at) fx_zadd(ctx, throttled, tname, at, member);
    } else if (present) {
        fx_zrem(ctx, throttled, tname, member);
    }
    ValkeyModule_FreeString(ctx, member);
    close_named(ctx, throttled, tname);
}

/* Whether the queue is held (queueconf's `held`) as the first lease leaving active in the running
 * call found it: -1 until then. Only a claim writes `held`, and no call releases a lease after its
 * claim part, so the answer holds for every lease the call releases; queue_slot_reset clears it
 * before each call (trafikey.c). */
static int held_in_call = -1;

void queue_slot_reset(void) {
    held_in_call = -1;
}

/* Whether the open queueconf holds `held`. */
static int conf_held(ValkeyModuleCtx *ctx, ValkeyModuleKey *conf) {
    ValkeyModuleString *v = conf_field(conf, "held");
    if (v == NULL) return 0;
    ValkeyModule_FreeString(ctx, v);
    return 1;
}

const char *check_queue_slot(ValkeyModuleCtx *ctx, Acl *acl, Bytes base) {
    if (held_in_call >= 0) return NULL; /* checked for an earlier lease of this call */
    ValkeyModuleString *name;
    ValkeyModuleKey *conf;
    const char *err = open_conf(ctx, acl, base, &conf, &name);
    if (err) return err;
    int held = conf_held(ctx, conf);
    close_named(ctx, conf, name);
    if (held) err = check_named_key(ctx, acl, base, "wake", NULL, VALKEYMODULE_KEYTYPE_LIST, NULL);
    if (!err) held_in_call = held;
    return err;
}

void release_queue_slot(ValkeyModuleCtx *ctx, Bytes base, const LaneRing *ring) {
    int held = held_in_call;
    if (held < 0) {
        ValkeyModuleString *name;
        ValkeyModuleKey *conf = open_named(ctx, base, "queueconf", &name);
        held = conf_held(ctx, conf);
        close_named(ctx, conf, name);
    }
    if (!held) return;
    if (ring && ring->wake) {
        fx_wake(ctx, ring->wake, ring->wake_name, 1);
        return;
    }
    ValkeyModuleString *name;
    ValkeyModuleKey *wake = open_named(ctx, base, "wake", &name);
    fx_wake(ctx, wake, name, 1);
    close_named(ctx, wake, name);
}
