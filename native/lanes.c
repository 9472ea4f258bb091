/* lanes.c: the lane bookkeeping the flat transitions share with the lane scripts (the lane part
 * of the includes). Lanes themselves are scripts only, but their leases are settled by ack, retry,
 * recover and settle, and their delayed jobs moved by promote, on either executor:
 *   - a lease of a lane job leaving active gives its group's slot back (release_lane_slot), and a
 *     group parked at its concurrency limit comes back to the ring when it is below it again;
 *   - a lane job going back to an empty lane joins the ring only when its group is not parked
 *     (push_lane); a group's jobs wait in two keys, the list <base>lane:<group> of its priority-0
 *     jobs and the zset <base>prio:<group> of its others, and its lane is empty when both are;
 *   - promote reopens the groups whose rate window has opened (reopen_lanes);
 *   - a lane that cancel empties leaves the ring without its being walked (leave_ring);
 *   - a paused queue leases nothing (claim, settle).
 * Keys: <base>laneconf, <base>leased, <base>parked, <base>throttled (derived from the base, as the
 * scripts derive them), <base>ring, <base>ringleft, <base>lane:<group>, <base>prio:<group>,
 * <base>paused. */
#include <string.h>

#include "trafikey.h"

#define PARKED_FULL 1
#define PARKED_RATE 2

/* An open key of the base, with its name. */
typedef struct {
    ValkeyModuleKey *key;
    ValkeyModuleString *name;
} Opened;

static Opened open_of(ValkeyModuleCtx *ctx, Bytes base, const char *suffix, const ValkeyModuleString *tail) {
    Opened o;
    o.name = derived_key(ctx, base, suffix, tail);
    o.key = ValkeyModule_OpenKey(ctx, o.name, VALKEYMODULE_READ | VALKEYMODULE_WRITE);
    return o;
}

static void close_of(ValkeyModuleCtx *ctx, Opened *o) {
    ValkeyModule_CloseKey(o->key);
    ValkeyModule_FreeString(ctx, o->name);
}

/* A hash field read as an integer from min (int_arg of the prelude); fallback when absent, not a
 * hash, or not such an integer. */
static long long hash_int(ValkeyModuleCtx *ctx, ValkeyModuleKey *key, ValkeyModuleString *field, long long min,
                          long long fallback) {
    if (ValkeyModule_KeyType(key) != VALKEYMODULE_KEYTYPE_HASH) return fallback;
    ValkeyModuleString *v = NULL;
    ValkeyModule_HashGet(key, VALKEYMODULE_HASH_NONE, field, &v, NULL);
    if (v == NULL) return fallback;
    long long out;
    Bytes b = bytes_of(v);
    int ok = emq_parse_int(b.p, b.n, min, &out);
    ValkeyModule_FreeString(ctx, v);
    return ok ? out : fallback;
}

/* lane_knob of the prelude: a group's knob, else the queue's default, else fallback. */
static long long lane_knob(ValkeyModuleCtx *ctx, Bytes base, ValkeyModuleString *group, const char *knob,
                           long long fallback) {
    Opened conf = open_of(ctx, base, "laneconf", NULL);
    size_t kn = strlen(knob);
    Bytes g = bytes_of(group);
    char *buf = ValkeyModule_Alloc(kn + 1 + g.n);
    memcpy(buf, knob, kn);
    buf[kn] = ':';
    memcpy(buf + kn + 1, g.p, g.n);
    ValkeyModuleString *own = ValkeyModule_CreateString(ctx, buf, kn + 1 + g.n);
    ValkeyModuleString *dflt = ValkeyModule_CreateString(ctx, knob, kn);
    ValkeyModule_Free(buf);
    long long v = fallback;
    if (ValkeyModule_KeyType(conf.key) == VALKEYMODULE_KEYTYPE_HASH) {
        ValkeyModuleString *raw = NULL;
        ValkeyModule_HashGet(conf.key, VALKEYMODULE_HASH_NONE, own, &raw, NULL);
        if (raw == NULL) ValkeyModule_HashGet(conf.key, VALKEYMODULE_HASH_NONE, dflt, &raw, NULL);
        if (raw) {
            Bytes b = bytes_of(raw);
            if (!emq_parse_int(b.p, b.n, 1, &v)) v = fallback;
            ValkeyModule_FreeString(ctx, raw);
        }
    }
    ValkeyModule_FreeString(ctx, own);
    ValkeyModule_FreeString(ctx, dflt);
    close_of(ctx, &conf);
    return v;
}

/* lane_nonempty of the prelude, negated: neither the group's list nor its prio zset holds a job (a
 * key of another type holds none). */
int lane_is_empty(ValkeyModuleCtx *ctx, Bytes base, ValkeyModuleString *group) {
    Opened lane = open_of(ctx, base, "lane:", group);
    int waiting = ValkeyModule_KeyType(lane.key) == VALKEYMODULE_KEYTYPE_LIST && ValkeyModule_ValueLength(lane.key) > 0;
    close_of(ctx, &lane);
    if (waiting) return 0;
    Opened prio = open_of(ctx, base, "prio:", group);
    waiting = ValkeyModule_KeyType(prio.key) == VALKEYMODULE_KEYTYPE_ZSET && ValkeyModule_ValueLength(prio.key) > 0;
    close_of(ctx, &prio);
    return !waiting;
}

/* set_parked of the prelude for a mask that only loses bits (a slot given back, a window
 * opened): the field set or deleted, the throttled entry dropped with the rate bit, and the group
 * back at the ring's tail when no bit is left and its lane holds jobs. */
static void lower_parked(ValkeyModuleCtx *ctx, Bytes base, const LaneRing *ring, Opened *parked,
                         ValkeyModuleString *group, long long was, long long mask) {
    if (mask == 0) fx_hdel_field(ctx, parked->key, parked->name, group);
    else fx_hset_int(ctx, parked->key, parked->name, group, mask);
    if ((was & PARKED_RATE) && !(mask & PARKED_RATE)) {
        Opened throttled = open_of(ctx, base, "throttled", NULL);
        if (ValkeyModule_KeyType(throttled.key) == VALKEYMODULE_KEYTYPE_ZSET)
            fx_zrem(ctx, throttled.key, throttled.name, group);
        close_of(ctx, &throttled);
    }
    if (was == 0 || mask != 0 || lane_is_empty(ctx, base, group)) return;
    if (ring) {
        fx_push(ctx, ring->key, ring->name, VALKEYMODULE_LIST_TAIL, group);
        return;
    }
    Opened own = open_of(ctx, base, "ring", NULL);
    fx_push(ctx, own.key, own.name, VALKEYMODULE_LIST_TAIL, group);
    close_of(ctx, &own);
}

void release_lane_slot(ValkeyModuleCtx *ctx, Bytes base, const LaneRing *ring, ValkeyModuleKey *row) {
    release_queue_slot(ctx, base, ring);
    ValkeyModuleString *group = NULL;
    if (ValkeyModule_KeyType(row) == VALKEYMODULE_KEYTYPE_HASH) hash_get1(row, "lane", &group);
    if (group == NULL) return;
    Opened leased = open_of(ctx, base, "leased", NULL);
    long long held = hash_int(ctx, leased.key, group, 0, 0) - 1;
    if (held <= 0) fx_hdel_field(ctx, leased.key, leased.name, group);
    else fx_hset_int(ctx, leased.key, leased.name, group, held);
    close_of(ctx, &leased);
    Opened parked = open_of(ctx, base, "parked", NULL);
    long long mask = hash_int(ctx, parked.key, group, 0, 0);
    if (mask & PARKED_FULL) {
        long long limit = lane_knob(ctx, base, group, "concurrency", 0);
        if (limit == 0 || held < limit) lower_parked(ctx, base, ring, &parked, group, mask, mask - PARKED_FULL);
    }
    close_of(ctx, &parked);
    ValkeyModule_FreeString(ctx, group);
}

/* push_lane of the prelude: a lane job back into its group's keys (both checked), the group joining
 * the ring's tail when its lane was empty and it is not parked; a priority-0 job at the list's
 * head or tail (where), another in the prio zset at its pending score of at. */
void push_lane(ValkeyModuleCtx *ctx, Bytes base, const LaneRing *ring, ValkeyModuleString *group,
               ValkeyModuleString *lane_key, ValkeyModuleString *id, int where, long long priority, long long at) {
    if (lane_is_empty(ctx, base, group) && !lane_parked(ctx, base, group))
        fx_push(ctx, ring->key, ring->name, VALKEYMODULE_LIST_TAIL, group);
    if (priority != 0) {
        Opened prio = open_of(ctx, base, "prio:", group);
        fx_zadd(ctx, prio.key, prio.name, (double)emq_pending_score(priority, at), id);
        close_of(ctx, &prio);
        return;
    }
    ValkeyModuleKey *lane = ValkeyModule_OpenKey(ctx, lane_key, VALKEYMODULE_READ | VALKEYMODULE_WRITE);
    fx_push(ctx, lane, lane_key, where, id);
    ValkeyModule_CloseKey(lane);
}

/* leave_ring of the prelude: the group leaves the ring without its being walked, its entry left
 * where it stands and counted in <base>ringleft (checked by the caller), which the lane claim
 * that meets it at the ring's head drops. */
void leave_ring(ValkeyModuleCtx *ctx, Bytes base, ValkeyModuleString *group) {
    Opened left = open_of(ctx, base, "ringleft", NULL);
    fx_hset_int(ctx, left.key, left.name, group, hash_int(ctx, left.key, group, 0, 0) + 1);
    close_of(ctx, &left);
}

int lane_parked(ValkeyModuleCtx *ctx, Bytes base, ValkeyModuleString *group) {
    Opened parked = open_of(ctx, base, "parked", NULL);
    ValkeyModuleString *bits = NULL;
    if (ValkeyModule_KeyType(parked.key) == VALKEYMODULE_KEYTYPE_HASH)
        ValkeyModule_HashGet(parked.key, VALKEYMODULE_HASH_NONE, group, &bits, NULL);
    close_of(ctx, &parked);
    if (bits == NULL) return 0;
    ValkeyModule_FreeString(ctx, bits);
    return 1;
}

/* queue_paused of the prelude: whether <base>paused exists, the flag checked as a derived key
 * (the caller's ACL, a slot that moves). NULL and *paused set, or the error to reply. */
const char *queue_paused(ValkeyModuleCtx *ctx, Acl *acl, Bytes base, int *paused) {
    int t;
    const char *err = check_named_key(ctx, acl, base, "paused", NULL, KEYTYPE_ANY, &t);
    *paused = t != VALKEYMODULE_KEYTYPE_EMPTY;
    return err;
}

/* due_lanes of the prelude: the groups of throttled due by now (at most limit), their lane keys
 * checked. Promote calls it before it writes anything. Fills *due (reopen_lanes frees it); NULL
 * or the error to reply. */
const char *due_lanes(ValkeyModuleCtx *ctx, Bytes base, long long now, long long limit, DueLanes *due) {
    *due = (DueLanes){NULL, 0};
    Opened throttled = open_of(ctx, base, "throttled", NULL);
    size_t cap = 0;
    if (ValkeyModule_KeyType(throttled.key) == VALKEYMODULE_KEYTYPE_ZSET &&
        ValkeyModule_ZsetFirstInScoreRange(throttled.key, VALKEYMODULE_NEGATIVE_INFINITE, (double)now, 0, 0) ==
            VALKEYMODULE_OK) {
        while (!ValkeyModule_ZsetRangeEndReached(throttled.key) && (long long)due->n < limit) {
            double score;
            ValkeyModuleString *member = ValkeyModule_ZsetRangeCurrentElement(throttled.key, &score);
            if (member == NULL) break;
            if (due->n == cap) {
                cap = cap ? cap * 2 : 16;
                due->groups = ValkeyModule_Realloc(due->groups, cap * sizeof *due->groups);
            }
            due->groups[due->n++] = member;
            if (!ValkeyModule_ZsetRangeNext(throttled.key)) break;
        }
        ValkeyModule_ZsetRangeStop(throttled.key);
    }
    close_of(ctx, &throttled);
    const char *err = NULL;
    Acl acl = {ctx, NULL, 0};
    for (size_t i = 0; i < due->n && err == NULL; i++) {
        ValkeyModuleString *name = derived_key(ctx, base, "lane:", due->groups[i]);
        err = check_lane_keys(ctx, &acl, base, due->groups[i], name);
        ValkeyModule_FreeString(ctx, name);
    }
    acl_release(&acl);
    if (err) due_lanes_free(ctx, due);
    return err;
}

void due_lanes_free(ValkeyModuleCtx *ctx, DueLanes *due) {
    for (size_t i = 0; i < due->n; i++) ValkeyModule_FreeString(ctx, due->groups[i]);
    ValkeyModule_Free(due->groups);
    *due = (DueLanes){NULL, 0};
}

/* reopen_lanes of the prelude: the groups of due_lanes come back: each leaves throttled, loses
 * its rate bit and, with no bit left and jobs in its lane, joins the ring's tail. Frees *due;
 * returns how many. */
long long reopen_lanes(ValkeyModuleCtx *ctx, Bytes base, const LaneRing *ring, DueLanes *due) {
    long long n = (long long)due->n;
    if (n > 0) {
        Opened throttled = open_of(ctx, base, "throttled", NULL);
        Opened parked = open_of(ctx, base, "parked", NULL);
        for (size_t i = 0; i < due->n; i++) {
            fx_zrem(ctx, throttled.key, throttled.name, due->groups[i]);
            long long mask = hash_int(ctx, parked.key, due->groups[i], 0, 0);
            if (mask & PARKED_RATE) lower_parked(ctx, base, ring, &parked, due->groups[i], mask, mask - PARKED_RATE);
        }
        close_of(ctx, &parked);
        close_of(ctx, &throttled);
    }
    due_lanes_free(ctx, due);
    return n;
}

/* Whether a group is parked at its concurrency limit. */
static int parked_at_limit(ValkeyModuleCtx *ctx, Bytes base, ValkeyModuleString *group) {
    Opened parked = open_of(ctx, base, "parked", NULL);
    long long mask = hash_int(ctx, parked.key, group, 0, 0);
    close_of(ctx, &parked);
    return (mask & PARKED_FULL) != 0;
}

/* check_reopening of the prelude: the groups over their rate and the parked groups, which promote
 * reads and writes for the groups it reopens and the lane jobs it moves, checked as derived keys
 * before anything is written. NULL or the error. */
const char *check_reopening(ValkeyModuleCtx *ctx, Bytes base) {
    Acl acl = {ctx, NULL, 0};
    const char *err = check_named_key(ctx, &acl, base, "throttled", NULL, VALKEYMODULE_KEYTYPE_ZSET, NULL);
    if (err == NULL) err = check_named_key(ctx, &acl, base, "parked", NULL, VALKEYMODULE_KEYTYPE_HASH, NULL);
    acl_release(&acl);
    return err;
}

/* check_lane_bookkeeping of the prelude: the ring, the knobs, the leases held, the parked groups
 * and, when the group is parked at its limit (it may come back to the ring if its lane holds
 * jobs), the group's lane of a lane job's lease, checked as derived keys (ACL, slot, type) before
 * anything is written. NULL (also for a flat job), or the error to reply. */
const char *check_lane_bookkeeping(ValkeyModuleCtx *ctx, Acl *acl, Bytes base, ValkeyModuleKey *row) {
    static const struct {
        const char *suffix;
        int type;
    } keys[] = {{"ring", VALKEYMODULE_KEYTYPE_LIST},
                {"laneconf", VALKEYMODULE_KEYTYPE_HASH},
                {"leased", VALKEYMODULE_KEYTYPE_HASH},
                {"parked", VALKEYMODULE_KEYTYPE_HASH}};
    const char *err = check_queue_slot(ctx, acl, base);
    if (err) return err;
    ValkeyModuleString *group = NULL;
    if (ValkeyModule_KeyType(row) == VALKEYMODULE_KEYTYPE_HASH)
        ValkeyModule_HashGet(row, VALKEYMODULE_HASH_CFIELDS, "lane", &group, NULL);
    if (group == NULL) return NULL;
    for (size_t i = 0; i < sizeof keys / sizeof keys[0] && err == NULL; i++)
        err = check_named_key(ctx, acl, base, keys[i].suffix, NULL, keys[i].type, NULL);
    if (err == NULL && parked_at_limit(ctx, base, group)) {
        ValkeyModuleString *lane = derived_key(ctx, base, "lane:", group);
        err = check_lane_keys(ctx, acl, base, group, lane);
        ValkeyModule_FreeString(ctx, lane);
    }
    ValkeyModule_FreeString(ctx, group);
    return err;
}
