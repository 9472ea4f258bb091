/* dependents.c: the join, the twin of include/dependents.lua. What a job ending (done, dead or
 * cancelled) does to the jobs waiting on it (its row's `next`) and to its dedupe key (`dedupe`,
 * `dedupe_ms`), and the moves of a waiting job (released, fails, cancelled), shared by EMQ.AFTER
 * (after.c) and the end hook of every transition that ends a job.
 *
 * Plan, then apply, as the script does: a plan (join_new) walks the dependents reading only, on an
 * overlay of what it already planned (each waiting job's state, the ids appended to a `next`),
 * checking each derived key it meets once (ACL, a moving slot, the type: check_key), in the order
 * of docs/PROTOCOL.md "The end hook"; the first failed check is kept and decides the reply. The
 * caller applies the planned steps (join_apply) once every check of the call passed, in the order
 * they were planned, each write through effects.c. A key the call declared is written through the
 * call's own open handle (a second handle must not write it), any other one is opened for its
 * step and closed. */
#include <string.h>

#include "trafikey.h"

/* ---- A map from bytes to a pointer (open addressing) ----------------------------------------- */

typedef struct {
    char *key;
    size_t len;
    void *value;
} MapSlot;

typedef struct {
    MapSlot *slots;
    size_t cap, n;
} Map;

static unsigned long long hash_bytes(const char *p, size_t n) {
    unsigned long long h = 1469598103934665603ULL;
    for (size_t i = 0; i < n; i++) h = (h ^ (unsigned char)p[i]) * 1099511628211ULL;
    return h;
}

static MapSlot *map_find(Map *m, const char *p, size_t n) {
    if (m->cap == 0) return NULL;
    size_t i = (size_t)(hash_bytes(p, n) & (m->cap - 1));
    while (m->slots[i].key != NULL) {
        if (m->slots[i].len == n && memcmp(m->slots[i].key, p, n) == 0) return &m->slots[i];
        i = (i + 1) & (m->cap - 1);
    }
    return &m->slots[i];
}

static void *map_get(Map *m, Bytes k) {
    MapSlot *s = map_find(m, k.p, k.n);
    return s && s->key ? s->value : NULL;
}

static void map_put(Map *m, Bytes k, void *value) {
    if (2 * (m->n + 1) > m->cap) {
        Map grown = {ValkeyModule_Alloc((m->cap ? m->cap * 2 : 16) * sizeof(MapSlot)), m->cap ? m->cap * 2 : 16, 0};
        memset(grown.slots, 0, grown.cap * sizeof(MapSlot));
        for (size_t i = 0; i < m->cap; i++) {
            if (m->slots[i].key == NULL) continue;
            *map_find(&grown, m->slots[i].key, m->slots[i].len) = m->slots[i];
            grown.n++;
        }
        ValkeyModule_Free(m->slots);
        *m = grown;
    }
    MapSlot *s = map_find(m, k.p, k.n);
    if (s->key == NULL) {
        s->key = ValkeyModule_Alloc(k.n ? k.n : 1);
        memcpy(s->key, k.p, k.n);
        s->len = k.n;
        m->n++;
    }
    s->value = value;
}

static void map_free(Map *m, void (*free_value)(void *)) {
    for (size_t i = 0; i < m->cap; i++) {
        if (m->slots[i].key == NULL) continue;
        ValkeyModule_Free(m->slots[i].key);
        if (free_value) free_value(m->slots[i].value);
    }
    ValkeyModule_Free(m->slots);
    m->slots = NULL;
    m->cap = m->n = 0;
}

/* ---- The plan ---------------------------------------------------------------------------------- */

enum { POLICY_FAIL, POLICY_IGNORE, POLICY_CONTINUE };

/* The planned state of a job that may be waiting (waiter of the script). */
typedef struct {
    ValkeyModuleString *row;
    int waiting, hold, policy, waits_bad; /* waits_bad: its `waits` is not a count */
    long long waits;
} Waiter;

/* The ids a call appends to a job's `next`. */
typedef struct {
    ValkeyModuleString **v;
    size_t n, cap;
} Ids;

typedef enum { OP_DEDUPE, OP_DECR, OP_INCR, OP_LINK, OP_SEAL, OP_RELEASE, OP_FAIL, OP_CANCEL, OP_EXPIRE } Op;

typedef struct {
    Op op;
    ValkeyModuleString *id, *row, *key, *child, *error;
    long long ms, retention, at;
} Step;

struct Join {
    ValkeyModuleCtx *ctx;
    Acl acl;
    Bytes base;
    long long now;
    int has_now;
    const EventSink *ev;
    ValkeyModuleString **names; /* the call's declared keys, open in keys */
    ValkeyModuleKey **keys;
    int nkeys;
    Map checked, state, next_add;
    Step *steps;
    size_t nsteps, cap, applied;
    ValkeyModuleString **pool; /* every string the plan made, freed with it */
    size_t npool, pool_cap;
    const char *failure;
};

static ValkeyModuleString *pooled(Join *j, ValkeyModuleString *s) {
    if (j->npool == j->pool_cap) {
        j->pool_cap = j->pool_cap ? j->pool_cap * 2 : 16;
        j->pool = ValkeyModule_Realloc(j->pool, j->pool_cap * sizeof *j->pool);
    }
    j->pool[j->npool++] = s;
    return s;
}

/* A copy of s the plan keeps. */
static ValkeyModuleString *keep(Join *j, const ValkeyModuleString *s) {
    Bytes b = bytes_of(s);
    return pooled(j, ValkeyModule_CreateString(j->ctx, b.p, b.n));
}

static ValkeyModuleString *named(Join *j, const char *mid, const ValkeyModuleString *tail) {
    return pooled(j, derived_key(j->ctx, j->base, mid, tail));
}

Join *join_new(ValkeyModuleCtx *ctx, Bytes base, const EventSink *ev, int has_now, long long now,
               ValkeyModuleString **names, ValkeyModuleKey **keys, int nkeys) {
    Join *j = ValkeyModule_Alloc(sizeof *j);
    memset(j, 0, sizeof *j);
    j->ctx = ctx;
    j->acl = (Acl){ctx, NULL, 0};
    j->base = base;
    j->ev = ev;
    j->has_now = has_now;
    j->now = now;
    j->names = names;
    j->keys = keys;
    j->nkeys = nkeys;
    return j;
}

static void free_ids(void *p) {
    Ids *ids = p;
    ValkeyModule_Free(ids->v);
    ValkeyModule_Free(ids);
}

void join_free(Join *j) {
    if (j == NULL) return;
    acl_release(&j->acl);
    map_free(&j->checked, NULL);
    map_free(&j->state, ValkeyModule_Free);
    map_free(&j->next_add, free_ids);
    for (size_t i = 0; i < j->npool; i++) ValkeyModule_FreeString(j->ctx, j->pool[i]);
    ValkeyModule_Free(j->pool);
    ValkeyModule_Free(j->steps);
    ValkeyModule_Free(j);
}

const char *join_failure(const Join *j) {
    return j->failure;
}

static Step *add_step(Join *j, Op op) {
    if (j->nsteps == j->cap) {
        j->cap = j->cap ? j->cap * 2 : 8;
        j->steps = ValkeyModule_Realloc(j->steps, j->cap * sizeof *j->steps);
    }
    Step *s = &j->steps[j->nsteps++];
    memset(s, 0, sizeof *s);
    s->op = op;
    return s;
}

/* join_check of the script: a derived key checked once per call; the first failure is kept. */
static void join_check(Join *j, ValkeyModuleString *key, int type) {
    if (j->failure) return;
    Bytes b = bytes_of(key);
    if (map_get(&j->checked, b)) return;
    map_put(&j->checked, b, (void *)1);
    j->failure = check_key(j->ctx, &j->acl, j->base, key, type, NULL);
}

/* The call's open handle on name when it declared that key, else NULL. */
static ValkeyModuleKey *declared(Join *j, ValkeyModuleString *name) {
    Bytes b = bytes_of(name);
    for (int i = 0; i < j->nkeys; i++) {
        Bytes d = bytes_of(j->names[i]);
        if (d.n == b.n && memcmp(d.p, b.p, b.n) == 0) return j->keys[i];
    }
    return NULL;
}

/* A handle on name for one step (or a read): the declared one, else opened (*opened set: the
 * caller closes it with done_with). */
static ValkeyModuleKey *handle(Join *j, ValkeyModuleString *name, int mode, int *opened) {
    ValkeyModuleKey *key = declared(j, name);
    *opened = key == NULL;
    return key ? key : ValkeyModule_OpenKey(j->ctx, name, mode);
}

static void done_with(ValkeyModuleKey *key, int opened) {
    if (opened) ValkeyModule_CloseKey(key);
}

static int in_zset_named(Join *j, ValkeyModuleString *zset, ValkeyModuleString *member) {
    int opened;
    ValkeyModuleKey *key = handle(j, zset, VALKEYMODULE_READ, &opened);
    double score;
    int in = ValkeyModule_KeyType(key) == VALKEYMODULE_KEYTYPE_ZSET &&
             ValkeyModule_ZsetScore(key, member, &score) == VALKEYMODULE_OK;
    done_with(key, opened);
    return in;
}

/* A hash field of the open row, or NULL (absent row or field). The caller frees it. */
static ValkeyModuleString *field_of(ValkeyModuleKey *row, const char *field) {
    ValkeyModuleString *v = NULL;
    if (ValkeyModule_KeyType(row) == VALKEYMODULE_KEYTYPE_HASH)
        hash_get1(row, field, &v);
    return v;
}

static int bytes_are(ValkeyModuleString *s, const char *text) {
    Bytes b = bytes_of(s);
    return b.n == strlen(text) && memcmp(b.p, text, b.n) == 0;
}

static int policy_of(ValkeyModuleString *s) {
    if (s == NULL) return POLICY_FAIL;
    if (bytes_are(s, "ignore")) return POLICY_IGNORE;
    if (bytes_are(s, "continue")) return POLICY_CONTINUE;
    return POLICY_FAIL;
}

/* waiter of the script: the planned state of job d, its row checked first (a hash or absent); it
 * waits while in <base>waiting with its row present. Read once, then kept on the overlay. */
static Waiter *waiter(Join *j, ValkeyModuleString *d) {
    Waiter *s = map_get(&j->state, bytes_of(d));
    if (s) return s;
    ValkeyModuleString *row = named(j, "job:", d);
    join_check(j, row, VALKEYMODULE_KEYTYPE_HASH);
    s = ValkeyModule_Alloc(sizeof *s);
    memset(s, 0, sizeof *s);
    s->row = row;
    map_put(&j->state, bytes_of(d), s);
    if (j->failure) return s;
    ValkeyModuleString *waiting = named(j, "waiting", NULL);
    if (!in_zset_named(j, waiting, d)) return s;
    int opened;
    ValkeyModuleKey *key = handle(j, row, VALKEYMODULE_READ, &opened);
    if (ValkeyModule_KeyType(key) != VALKEYMODULE_KEYTYPE_EMPTY) {
        ValkeyModuleString *hold = field_of(key, "hold"), *policy = field_of(key, "policy");
        s->waiting = 1;
        s->waits_bad = !row_count_field(j->ctx, key, "waits", &s->waits);
        s->hold = hold != NULL;
        s->policy = policy_of(policy);
        if (hold) ValkeyModule_FreeString(j->ctx, hold);
        if (policy) ValkeyModule_FreeString(j->ctx, policy);
    }
    done_with(key, opened);
    return s;
}

/* The state of the job whose row the call holds (EMQ.AFTER's own), put on the overlay. */
void join_waiter(Join *j, ValkeyModuleString *id, ValkeyModuleString *row, long long waits, int hold,
                 ValkeyModuleString *policy) {
    Waiter *s = ValkeyModule_Alloc(sizeof *s);
    s->row = keep(j, row);
    s->waiting = 1;
    s->hold = hold;
    s->waits_bad = 0;
    s->waits = waits;
    s->policy = policy_of(policy);
    map_put(&j->state, bytes_of(id), s);
}

/* The job the call ends, put on the overlay as not waiting (EMQ.CANCEL's own). */
void join_ending(Join *j, ValkeyModuleString *id, ValkeyModuleString *row) {
    Waiter *s = ValkeyModule_Alloc(sizeof *s);
    memset(s, 0, sizeof *s);
    s->row = keep(j, row);
    map_put(&j->state, bytes_of(id), s);
}

/* The moves, each with the keys it derives, in this order. */
static void plan_release(Join *j, ValkeyModuleString *d, Waiter *s) {
    join_check(j, named(j, "pending", NULL), VALKEYMODULE_KEYTYPE_ZSET);
    join_check(j, named(j, "wake", NULL), VALKEYMODULE_KEYTYPE_LIST);
    s->waiting = 0;
    Step *st = add_step(j, OP_RELEASE);
    st->id = keep(j, d);
    st->row = s->row;
}

static void plan_fail(Join *j, ValkeyModuleString *d, Waiter *s, ValkeyModuleString *text) {
    join_check(j, named(j, "dead", NULL), VALKEYMODULE_KEYTYPE_ZSET);
    join_check(j, named(j, "ended:", d), VALKEYMODULE_KEYTYPE_LIST);
    s->waiting = 0;
    Step *st = add_step(j, OP_FAIL);
    st->id = keep(j, d);
    st->row = s->row;
    st->error = text;
}

static void plan_cancel(Join *j, ValkeyModuleString *d, Waiter *s, long long retention, long long at) {
    join_check(j, named(j, "ended:", d), VALKEYMODULE_KEYTYPE_LIST);
    s->waiting = 0;
    Step *st = add_step(j, OP_CANCEL);
    st->id = keep(j, d);
    st->row = s->row;
    st->retention = retention;
    st->at = at;
}

/* "parent <p> died: <err>" */
static ValkeyModuleString *died(Join *j, ValkeyModuleString *p, ValkeyModuleString *err) {
    Bytes a = bytes_of(p), e = err ? bytes_of(err) : (Bytes){"", 0};
    size_t n = 7 + a.n + 7 + e.n;
    char *buf = ValkeyModule_Alloc(n);
    memcpy(buf, "parent ", 7);
    memcpy(buf + 7, a.p, a.n);
    memcpy(buf + 7 + a.n, " died: ", 7);
    memcpy(buf + 14 + a.n, e.p, e.n);
    ValkeyModuleString *s = pooled(j, ValkeyModule_CreateString(j->ctx, buf, n));
    ValkeyModule_Free(buf);
    return s;
}

/* One job of the worklist: its id and row, how it ended, and what its dependents inherit. */
typedef struct {
    ValkeyModuleString *id, *row, *error;
    int outcome;
    long long retention, at;
} Work;

typedef struct {
    Work *v;
    size_t n, cap;
} Worklist;

static void work_push(Worklist *w, Work item) {
    if (w->n == w->cap) {
        w->cap = w->cap ? w->cap * 2 : 8;
        w->v = ValkeyModule_Realloc(w->v, w->cap * sizeof *w->v);
    }
    w->v[w->n++] = item;
}

/* The ids of a job's `next` (the field as read) and the ids this call appends after them, each a
 * string of the plan; the caller frees the array. */
static ValkeyModuleString **next_of(Join *j, ValkeyModuleString *id, ValkeyModuleString *field, size_t *n) {
    Ids *added = map_get(&j->next_add, bytes_of(id));
    size_t cap = (added ? added->n : 0) + 1, count = 0;
    Bytes f = field ? bytes_of(field) : (Bytes){"", 0};
    for (size_t i = 0; i < f.n; i++)
        if (f.p[i] != ' ' && (i == 0 || f.p[i - 1] == ' ')) cap++;
    ValkeyModuleString **ids = ValkeyModule_Alloc(cap * sizeof *ids);
    for (size_t i = 0; i < f.n;) {
        if (f.p[i] == ' ') {
            i++;
            continue;
        }
        size_t start = i;
        while (i < f.n && f.p[i] != ' ') i++;
        ids[count++] = pooled(j, ValkeyModule_CreateString(j->ctx, f.p + start, i - start));
    }
    for (size_t i = 0; added && i < added->n; i++) ids[count++] = added->v[i];
    *n = count;
    return ids;
}

/* plan_dependent of the script: one dependent d of a job that ended so. */
static void plan_dependent(Join *j, ValkeyModuleString *d, const Work *w, Worklist *work) {
    Waiter *s = waiter(j, d);
    if (j->failure || !s->waiting) return;
    if (w->outcome == JOIN_DEAD && s->policy == POLICY_CONTINUE) {
        plan_release(j, d, s);
    } else if (w->outcome == JOIN_DEAD && s->policy != POLICY_IGNORE) {
        ValkeyModuleString *text = died(j, w->id, w->error);
        plan_fail(j, d, s, text);
        work_push(work, (Work){keep(j, d), s->row, text, JOIN_DEAD, 0, 0});
    } else if (w->outcome == JOIN_CANCELLED) {
        plan_cancel(j, d, s, w->retention, w->at);
        work_push(work, (Work){keep(j, d), s->row, NULL, JOIN_CANCELLED, w->retention, w->at});
    } else { /* done, or dead under ignore */
        if (s->waits_bad) { /* not a count: refused before anything is written */
            j->failure = waits_error();
            return;
        }
        s->waits--;
        if (s->waits <= 0 && !s->hold) {
            plan_release(j, d, s);
        } else {
            Step *st = add_step(j, OP_DECR);
            st->id = keep(j, d);
            st->row = s->row;
        }
    }
}

/* plan_end of the script: a job's end (outcome JOIN_DONE, JOIN_DEAD with error, the text its
 * dependents' own error quotes, or JOIN_CANCELLED with the cancel mark they inherit) and the ends
 * it causes, as a worklist (breadth first, in `next` order). Each job's row is read as the call
 * found it (one read of next, dedupe, dedupe_ms). Returns the failure of a check, or NULL. */
const char *join_end(Join *j, ValkeyModuleString *id, ValkeyModuleString *row, int outcome,
                     ValkeyModuleString *error, long long retention, long long at) {
    if (j->failure) return j->failure;
    {   /* a job with no dependents and no dedupe key (most): that one read, nothing planned */
        int opened, quiet;
        ValkeyModuleKey *key = handle(j, row, VALKEYMODULE_READ, &opened);
        quiet = !row_has_either(j->ctx, key, "next", "dedupe");
        done_with(key, opened);
        if (quiet) return NULL;
    }
    Worklist work = {0};
    work_push(&work, (Work){keep(j, id), keep(j, row), error ? keep(j, error) : NULL, outcome, retention, at});
    for (size_t k = 0; k < work.n && !j->failure; k++) {
        Work w = work.v[k];
        ValkeyModuleString *next = NULL, *dedupe = NULL, *dedupe_ms = NULL;
        int opened;
        ValkeyModuleKey *key = handle(j, w.row, VALKEYMODULE_READ, &opened);
        if (ValkeyModule_KeyType(key) == VALKEYMODULE_KEYTYPE_HASH)
            ValkeyModule_HashGet(key, VALKEYMODULE_HASH_NONE, field_name("next"), &next, field_name("dedupe"), &dedupe,
                                 field_name("dedupe_ms"), &dedupe_ms, NULL);
        done_with(key, opened);
        if (dedupe) {
            Bytes suffix = bytes_of(dedupe);
            ValkeyModuleString *tail = ValkeyModule_CreateString(j->ctx, suffix.p, suffix.n);
            ValkeyModuleString *dkey = named(j, "", tail);
            ValkeyModule_FreeString(j->ctx, tail);
            join_check(j, dkey, VALKEYMODULE_KEYTYPE_STRING);
            Step *st = add_step(j, OP_DEDUPE);
            st->id = w.id;
            st->key = dkey;
            long long ms = 0;
            if (dedupe_ms) {
                Bytes b = bytes_of(dedupe_ms);
                if (!emq_parse_int(b.p, b.n, 0, &ms)) ms = 0;
            }
            st->ms = ms;
        }
        size_t n;
        ValkeyModuleString **ids = next_of(j, w.id, next, &n);
        if (n > 0) join_check(j, named(j, "waiting", NULL), VALKEYMODULE_KEYTYPE_ZSET);
        for (size_t i = 0; i < n && !j->failure; i++) plan_dependent(j, ids[i], &w, &work);
        ValkeyModule_Free(ids);
        if (next) ValkeyModule_FreeString(j->ctx, next);
        if (dedupe) ValkeyModule_FreeString(j->ctx, dedupe);
        if (dedupe_ms) ValkeyModule_FreeString(j->ctx, dedupe_ms);
    }
    ValkeyModule_Free(work.v);
    return j->failure;
}

/* plan_expire of the script: a pending job whose deadline a claim met leaves pending for dead with
 * the error "expired" (dead, its ended key and counts checked, in that order), then its end hook
 * as any dead job's. NULL, or the failure of a check. */
const char *join_expire(Join *j, ValkeyModuleString *id, ValkeyModuleString *row) {
    join_check(j, named(j, "dead", NULL), VALKEYMODULE_KEYTYPE_ZSET);
    join_check(j, named(j, "ended:", id), VALKEYMODULE_KEYTYPE_LIST);
    join_check(j, named(j, "counts", NULL), VALKEYMODULE_KEYTYPE_HASH);
    if (j->failure) return j->failure;
    Step *st = add_step(j, OP_EXPIRE);
    st->id = keep(j, id);
    st->row = keep(j, row);
    ValkeyModuleString *error = ValkeyModule_CreateString(j->ctx, "expired", 7);
    const char *err = join_end(j, id, row, JOIN_DEAD, error, 0, 0);
    ValkeyModule_FreeString(j->ctx, error);
    return err;
}

/* ---- EMQ.AFTER's own steps ------------------------------------------------------------------- */

/* The plan's release, failure or cancel of the job whose state join_waiter put on the overlay. */
void join_release(Join *j, ValkeyModuleString *id) {
    plan_release(j, id, map_get(&j->state, bytes_of(id)));
}

void join_fail(Join *j, ValkeyModuleString *id, ValkeyModuleString *parent, ValkeyModuleString *parent_error) {
    Waiter *s = map_get(&j->state, bytes_of(id));
    ValkeyModuleString *text = died(j, parent, parent_error);
    plan_fail(j, id, s, text);
    join_end(j, id, s->row, JOIN_DEAD, text, 0, 0);
}

void join_cancel(Join *j, ValkeyModuleString *id, long long retention, long long at) {
    Waiter *s = map_get(&j->state, bytes_of(id));
    plan_cancel(j, id, s, retention, at);
    join_end(j, id, s->row, JOIN_CANCELLED, NULL, retention, at);
}

int join_waiting(Join *j, ValkeyModuleString *id) {
    Waiter *s = map_get(&j->state, bytes_of(id));
    return s && s->waiting;
}

long long join_waits(Join *j, ValkeyModuleString *id) {
    Waiter *s = map_get(&j->state, bytes_of(id));
    return s ? s->waits : 0;
}

/* Whether id is among parent's `next` (the row's field, then what this call appended). */
int join_linked(Join *j, ValkeyModuleString *parent, ValkeyModuleString *field, ValkeyModuleString *id) {
    size_t n;
    ValkeyModuleString **ids = next_of(j, parent, field, &n);
    int linked = 0;
    Bytes b = bytes_of(id);
    for (size_t i = 0; i < n && !linked; i++) {
        Bytes c = bytes_of(ids[i]);
        linked = c.n == b.n && memcmp(c.p, b.p, b.n) == 0;
    }
    ValkeyModule_Free(ids);
    return linked;
}

/* Link id after parent (whose row is prow), and count one more parent for it. */
void join_link(Join *j, ValkeyModuleString *parent, ValkeyModuleString *prow, ValkeyModuleString *id) {
    Ids *added = map_get(&j->next_add, bytes_of(parent));
    if (added == NULL) {
        added = ValkeyModule_Alloc(sizeof *added);
        memset(added, 0, sizeof *added);
        map_put(&j->next_add, bytes_of(parent), added);
    }
    if (added->n == added->cap) {
        added->cap = added->cap ? added->cap * 2 : 4;
        added->v = ValkeyModule_Realloc(added->v, added->cap * sizeof *added->v);
    }
    added->v[added->n++] = keep(j, id);
    Waiter *s = map_get(&j->state, bytes_of(id));
    Step *st = add_step(j, OP_LINK);
    st->row = keep(j, prow);
    st->child = keep(j, id);
    st = add_step(j, OP_INCR);
    st->row = s->row;
    s->waits++;
}

void join_seal(Join *j, ValkeyModuleString *id) {
    Waiter *s = map_get(&j->state, bytes_of(id));
    Step *st = add_step(j, OP_SEAL);
    st->row = s->row;
}

/* ---- Apply ----------------------------------------------------------------------------------- */

/* leave_waiting of the script: ZREM waiting <id>, HDEL row waits hold. */
static void leave_waiting(Join *j, const Step *st, ValkeyModuleKey *row) {
    ValkeyModuleString *waiting = named(j, "waiting", NULL);
    int opened;
    ValkeyModuleKey *key = handle(j, waiting, VALKEYMODULE_READ | VALKEYMODULE_WRITE, &opened);
    fx_zrem(j->ctx, key, waiting, st->id);
    done_with(key, opened);
    static const char *const fields[] = {"waits", "hold"};
    fx_hdel_fields(j->ctx, row, st->row, fields, 2);
}

/* The dedupe key released when it still names the job: its value read by the server's own GET,
 * as the script reads it (a direct read would turn an embstr into a raw string, which a key kept
 * for its window would keep). */
static void apply_dedupe(Join *j, const Step *st) {
    int opened;
    ValkeyModuleKey *key = handle(j, st->key, VALKEYMODULE_READ | VALKEYMODULE_WRITE, &opened);
    if (ValkeyModule_KeyType(key) == VALKEYMODULE_KEYTYPE_STRING) {
        size_t len = 0;
        ValkeyModuleCallReply *reply = ValkeyModule_Call(j->ctx, "GET", "s", st->key);
        const char *p = reply ? ValkeyModule_CallReplyStringPtr(reply, &len) : NULL;
        Bytes id = bytes_of(st->id);
        int same = p != NULL && len == id.n && memcmp(p, id.p, len) == 0;
        if (reply) ValkeyModule_FreeCallReply(reply);
        if (same && st->ms > 0) fx_pexpire(j->ctx, key, st->key, st->ms);
        else if (same) fx_del(j->ctx, key, st->key);
    }
    done_with(key, opened);
}

static void apply_release(Join *j, const Step *st, ValkeyModuleKey *row) {
    long long attempt = ev_attempts(j->ctx, j->ev, row);
    /* a call that takes no now (ack, ack with a result): the job's enqueued_at (absent or bad: 0) */
    long long now = j->has_now ? j->now : row_int_field(j->ctx, row, ROW_ENQUEUED_AT, 0);
    leave_waiting(j, st, row);
    long long p = row_priority(j->ctx, row);
    int opened;
    ValkeyModuleString *pending = named(j, "pending", NULL), *wake = named(j, "wake", NULL);
    ValkeyModuleKey *key = handle(j, pending, VALKEYMODULE_READ | VALKEYMODULE_WRITE, &opened);
    fx_zadd(j->ctx, key, pending, (double)emq_pending_score(p, now), st->id);
    done_with(key, opened);
    key = handle(j, wake, VALKEYMODULE_READ | VALKEYMODULE_WRITE, &opened);
    fx_wake(j->ctx, key, wake, 1);
    done_with(key, opened);
    ev_emit(j->ctx, j->ev, &(Event){.kind = "ready", .id = st->id, .attempt = attempt, .priority = p});
}

static void apply_fail(Join *j, const Step *st, ValkeyModuleKey *row) {
    long long attempt = ev_attempts(j->ctx, j->ev, row);
    leave_waiting(j, st, row);
    fx_hset1(j->ctx, row, st->row, "error", st->error);
    int opened;
    ValkeyModuleString *dead = named(j, "dead", NULL);
    ValkeyModuleKey *key = handle(j, dead, VALKEYMODULE_READ | VALKEYMODULE_WRITE, &opened);
    fx_zadd(j->ctx, key, dead, (double)j->now, st->id);
    done_with(key, opened);
    fx_mark_ended(j->ctx, named(j, "ended:", st->id), 0);
    ev_emit(j->ctx, j->ev, &(Event){.kind = "dead", .id = st->id, .attempt = attempt});
}

/* A job a claim found expired: out of pending, its error, into dead at now, counted in counts'
 * expired (read as the script reads it: absent or not an integer, 0), its ended key marked. */
static void apply_expire(Join *j, const Step *st, ValkeyModuleKey *row) {
    long long attempt = ev_attempts(j->ctx, j->ev, row);
    int opened;
    ValkeyModuleString *pending = named(j, "pending", NULL);
    ValkeyModuleKey *key = handle(j, pending, VALKEYMODULE_READ | VALKEYMODULE_WRITE, &opened);
    fx_zrem(j->ctx, key, pending, st->id);
    done_with(key, opened);
    ValkeyModuleString *error = ValkeyModule_CreateString(j->ctx, "expired", 7);
    fx_hset1(j->ctx, row, st->row, "error", error);
    ValkeyModule_FreeString(j->ctx, error);
    ValkeyModuleString *dead = named(j, "dead", NULL);
    key = handle(j, dead, VALKEYMODULE_READ | VALKEYMODULE_WRITE, &opened);
    fx_zadd(j->ctx, key, dead, (double)j->now, st->id);
    done_with(key, opened);
    ValkeyModuleString *counts = named(j, "counts", NULL);
    key = handle(j, counts, VALKEYMODULE_READ | VALKEYMODULE_WRITE, &opened);
    char num[24];
    long long n = row_int_field(j->ctx, key, "expired", 0) + 1;
    ValkeyModuleString *value = ValkeyModule_CreateString(j->ctx, num, decimal(n, num));
    fx_hset1(j->ctx, key, counts, "expired", value);
    ValkeyModule_FreeString(j->ctx, value);
    done_with(key, opened);
    fx_mark_ended(j->ctx, named(j, "ended:", st->id), 0);
    ev_emit(j->ctx, j->ev, &(Event){.kind = "dead", .id = st->id, .attempt = attempt});
}

static void apply_cancel(Join *j, const Step *st, ValkeyModuleKey *row) {
    long long attempt = ev_attempts(j->ctx, j->ev, row);
    leave_waiting(j, st, row);
    if (st->retention > 0) fx_mark_cancel(j->ctx, row, st->row, st->retention, st->at);
    /* the script's DEL of a row already gone (a job cancelled twice in one call) changes nothing */
    if (st->retention > 0 || ValkeyModule_KeyType(row) != VALKEYMODULE_KEYTYPE_EMPTY)
        bury_cancelled(j->ctx, row, st->row, named(j, "ended:", st->id), st->retention);
    ev_emit(j->ctx, j->ev, &(Event){.kind = "cancelled", .id = st->id, .attempt = attempt});
}

static void apply_link(Join *j, const Step *st, ValkeyModuleKey *row) {
    ValkeyModuleString *cur = field_of(row, "next");
    Bytes c = bytes_of(st->child);
    ValkeyModuleString *value;
    if (cur == NULL) {
        value = ValkeyModule_CreateString(j->ctx, c.p, c.n);
    } else {
        Bytes b = bytes_of(cur);
        char *buf = ValkeyModule_Alloc(b.n + 1 + c.n);
        memcpy(buf, b.p, b.n);
        buf[b.n] = ' ';
        memcpy(buf + b.n + 1, c.p, c.n);
        value = ValkeyModule_CreateString(j->ctx, buf, b.n + 1 + c.n);
        ValkeyModule_Free(buf);
        ValkeyModule_FreeString(j->ctx, cur);
    }
    fx_hset1(j->ctx, row, st->row, "next", value);
    ValkeyModule_FreeString(j->ctx, value);
}

/* How many steps are planned so far: the end of the last hook planned (join_apply_to). */
size_t join_mark(const Join *j) {
    return j->nsteps;
}

/* Apply every step planned since the last apply, in order. */
void join_apply(Join *j) {
    join_apply_to(j, j->nsteps);
}

/* Apply the steps planned since the last apply up to mark (join_mark's after a hook was
 * planned), in order: the hooks of a call are planned in the order their jobs end, so each job's
 * steps are applied right after its own writes. */
void join_apply_to(Join *j, size_t mark) {
    for (; j->applied < mark && j->applied < j->nsteps; j->applied++) {
        const Step *st = &j->steps[j->applied];
        if (st->op == OP_DEDUPE) {
            apply_dedupe(j, st);
            continue;
        }
        int opened;
        ValkeyModuleKey *row = handle(j, st->row, VALKEYMODULE_READ | VALKEYMODULE_WRITE, &opened);
        switch (st->op) {
        case OP_DECR: fx_hincrby(j->ctx, row, st->row, "waits", -1); break;
        case OP_INCR: fx_hincrby(j->ctx, row, st->row, "waits", 1); break;
        case OP_LINK: apply_link(j, st, row); break;
        case OP_SEAL:
            fx_hdel(j->ctx, row, st->row, "hold");
            fx_hincrby(j->ctx, row, st->row, "waits", -1);
            break;
        case OP_RELEASE: apply_release(j, st, row); break;
        case OP_FAIL: apply_fail(j, st, row); break;
        case OP_CANCEL: apply_cancel(j, st, row); break;
        case OP_EXPIRE: apply_expire(j, st, row); break;
        case OP_DEDUPE: break;
        }
        done_with(row, opened);
    }
}

/* mark_of of the script: (retention, at) of the row's cancel mark, each absent or bad: 0. */
void join_mark_of(ValkeyModuleCtx *ctx, ValkeyModuleKey *row, long long *retention, long long *at) {
    int hash = ValkeyModule_KeyType(row) == VALKEYMODULE_KEYTYPE_HASH;
    *retention = hash ? row_int_field(ctx, row, "cancel", 0) : 0;
    *at = hash ? row_int_field(ctx, row, "cancelled", 0) : 0;
}
