/* trafikey.h: what the files of the trafikey module share. Not a public API.
 *
 *   trafikey.c     the module's face: OnLoad, registration from the protocol table, key
 *                  positions, the handler table
 *   validate.c     validation steps 1-5 (numkeys, shape, gates, keys, numbers, items, key types)
 *   transitions.c  each transition's logic on its opened keys: derived keys, effects, reply
 *   claim.c        EMQ.CLAIM, and the walk and lease it shares with settle
 *   effects.c      each write as the command the Lua twin runs: event, signal, replication
 *   derived.c      keys a transition derives itself: ACL, a moving slot, rows, the fence counter
 *   progress.c     a running job's report of how far it got (EMQ.PROGRESS)
 *   step.c         a durable step's output recorded once under the lease (EMQ.STEP)
 *   cancel.c       EMQ.CANCEL and a cancelled job's tombstone
 *   after.c        EMQ.ENQUEUE_AFTER and EMQ.AFTER: jobs waiting for their parents
 *   fields.c       the hash fields' names, kept from load to unload
 *   dependents.c   the join: a job's end planned on its dependents and dedupe key, then applied
 *   unique.c       EMQ.ENQUEUE_UNIQUE: dedupe, debounce, throttle
 *   enqueue_many.c EMQ.ENQUEUE_MANY: a producer's batch, a verdict per job
 *   protocol.h     generated from echomq/engine/transitions.py: the table all of the above read */
#ifndef TRAFIKEY_H
#define TRAFIKEY_H

#include <stddef.h>

#include "emq_core.h"
#include "protocol.h"
#include "valkeymodule.h"

/* "job:" + the longest id the kind gate admits. */
#define ROW_SUFFIX_MAX (4 + EMQ_ID_KIND_LEN + EMQ_ID_REST_MAX)

/* The job row's field names every job carries (docs/PROTOCOL.md, "The job row"); every other
 * field is spelled out where it is used. */
#define ROW_PAYLOAD "p"
#define ROW_ATTEMPTS "a"
#define ROW_ENQUEUED_AT "t"
#define ROW_FENCE "f"
/* The names the earlier layout gave those four (docs/PROTOCOL.md, "The job row"): a lease upgrades a row
 * still holding them (fx_lease). */
#define ROW_OLD_PAYLOAD "payload"
#define ROW_OLD_ATTEMPTS "attempts"
#define ROW_OLD_ENQUEUED_AT "enqueued_at"
#define ROW_OLD_FENCE "fence"

/* Strings made once at load (trafikey.c): the arguments of the ACL probe and the wake token. */
extern ValkeyModuleString *s_hincrby, *s_attempts, *s_one;

typedef struct {
    const char *p;
    size_t n;
} Bytes;

/* fields.c: the hash fields' names as strings kept from load to unload. field_name: the kept
 * string of a name (NULL for a name it does not keep); hash_get1: HashGet of one field of an open
 * hash through it (*out NULL when absent; the caller frees it). */
void fields_create(void);
void fields_free(void);
ValkeyModuleString *field_name(const char *name);
void hash_get1(ValkeyModuleKey *key, const char *field, ValkeyModuleString **out);
void row_get(ValkeyModuleKey *row, const char *field, ValkeyModuleString **out);

static inline Bytes bytes_of(const ValkeyModuleString *s) {
    Bytes b;
    b.p = ValkeyModule_StringPtrLen(s, &b.n);
    return b;
}

/* One element of a command's list (an item of EMQ.SETTLE, a pair of EMQ.EXTEND_MANY): its form
 * in the table, its arguments after the form's word (views into argv), its integers by position.
 * A settlement's forms start with the lease they name, <id> <fence>; EMQ.AFTER's one form is a parent id. */
typedef struct {
    int form;
    ValkeyModuleString **args;
    long long num[EMQ_ITEM_ARGS_MAX];
    /* owned, set by the transition; freed with the call */
    ValkeyModuleString *row_name, *lane, *lane_key, *ended;
} Item;

#define ITEM_ID(it) ((it)->args[0])
#define ITEM_FENCE(it) ((it)->num[1])

/* One call once steps 1-4 passed: the declared keys and the arguments (views into argv), the
 * queue's base (a view into the first key), where its optional keys are (the claim record, the
 * events key: an index in keys, or -1 when not declared), the integer, now and priority arguments
 * read, by position (an optional argument left off reads as 0), and the list after the fixed
 * arguments, parsed. */
typedef struct {
    const EmqCommandSpec *spec;
    ValkeyModuleString **keys;
    int nkeys;
    int record_at, events_at;
    ValkeyModuleString **args;
    int nargs;
    Bytes base;
    long long num[EMQ_ARGS_MAX];
    Item *items;
    long long nitems;
} Call;

/* An error reply; VALKEYMODULE_OK, as a handler returns after replying. */
static inline int reply_error(ValkeyModuleCtx *ctx, const char *err) {
    ValkeyModule_ReplyWithError(ctx, err);
    return VALKEYMODULE_OK;
}

/* validate.c: steps 1-5 of the validation order. check_call and parse_items return 0 after
 * replying with (check_call) or writing into err (parse_items) the call's error; open_typed
 * returns 0, its keys closed, when a declared key has another type. The items and what the
 * transition derived for them are freed with items_free. */
int check_call(ValkeyModuleCtx *ctx, ValkeyModuleString **argv, int argc, const EmqCommandSpec *spec, Call *call);
int parse_items(Call *call, char *err, size_t cap);
void items_free(ValkeyModuleCtx *ctx, Call *call);
int open_typed(ValkeyModuleCtx *ctx, const Call *call, ValkeyModuleKey **out);
void close_keys(ValkeyModuleKey **keys, int n);

/* The logic of each command (transitions.c): runs on the call's declared keys, open and of their
 * types, replies, and returns VALKEYMODULE_OK. The caller closes the keys and frees the items. */
#define EMQ_DECLARE_TRANSITION(ID, name) int tx_##name(ValkeyModuleCtx *ctx, Call *call, ValkeyModuleKey **k);
EMQ_FOR_EACH_COMMAND(EMQ_DECLARE_TRANSITION)
#undef EMQ_DECLARE_TRANSITION

/* derived.c: keys a transition derives itself. */
typedef struct {
    ValkeyModuleCtx *ctx;
    ValkeyModuleUser *user;
    int resolved;
} Acl;

ValkeyModuleString *derived_key(ValkeyModuleCtx *ctx, Bytes base, const char *mid, const ValkeyModuleString *tail);
int acl_may_access(Acl *acl, ValkeyModuleString *key);
void acl_release(Acl *acl);
int moved_away(ValkeyModuleCtx *ctx, ValkeyModuleString *key, Bytes base);
/* A derived key's check (ACL, a moving slot, its type): check_key on a name, check_named_key on
 * base + mid + tail. type: a VALKEYMODULE_KEYTYPE_*, or KEYTYPE_ANY (a key deleted, or told apart
 * by the caller through found). NULL, or the error to reply. */
#define KEYTYPE_ANY (-1)
const char *check_key(ValkeyModuleCtx *ctx, Acl *acl, Bytes base, ValkeyModuleString *name, int type, int *found);
const char *check_named_key(ValkeyModuleCtx *ctx, Acl *acl, Bytes base, const char *mid,
                            const ValkeyModuleString *tail, int type, int *found);
const char *check_row(ValkeyModuleCtx *ctx, Acl *acl, Bytes base, ValkeyModuleString *row_name);
const char *check_ended(ValkeyModuleCtx *ctx, Acl *acl, Bytes base, ValkeyModuleString *ended);
const char *check_lane_keys(ValkeyModuleCtx *ctx, Acl *acl, Bytes base, ValkeyModuleString *group,
                            ValkeyModuleString *lane_key);
long long row_int_field(ValkeyModuleCtx *ctx, ValkeyModuleKey *row, const char *field, long long fallback);
long long row_priority(ValkeyModuleCtx *ctx, ValkeyModuleKey *row);
int row_count_field(ValkeyModuleCtx *ctx, ValkeyModuleKey *row, const char *field, long long *out);
const char *waits_error(void);
int is_current_lease(ValkeyModuleCtx *ctx, ValkeyModuleKey *active, ValkeyModuleKey *row, ValkeyModuleString *id,
                     long long fence);
const char *extended(ValkeyModuleCtx *ctx, ValkeyModuleKey *row);
int row_has(ValkeyModuleCtx *ctx, ValkeyModuleKey *row, const char *field);
int row_has_either(ValkeyModuleCtx *ctx, ValkeyModuleKey *row, const char *a, const char *b); /* kept names */
int cancelled_at(ValkeyModuleCtx *ctx, ValkeyModuleKey *row, long long fence);
const char *replayed(ValkeyModuleCtx *ctx, ValkeyModuleKey *row, long long fence, ValkeyModuleString *error,
                     ValkeyModuleKey *dead, ValkeyModuleString *id);
int fence_counter(ValkeyModuleCtx *ctx, ValkeyModuleKey *key, ValkeyModuleString *name, long long *out);

/* effects.c: each write with its keyspace event, modified-key signal and replication. */
size_t decimal(long long v, char *buf);
void fx_zadd(ValkeyModuleCtx *ctx, ValkeyModuleKey *key, ValkeyModuleString *keyname, double score,
             ValkeyModuleString *member);
void fx_zrem(ValkeyModuleCtx *ctx, ValkeyModuleKey *key, ValkeyModuleString *keyname, ValkeyModuleString *member);
void fx_push(ValkeyModuleCtx *ctx, ValkeyModuleKey *key, ValkeyModuleString *keyname, int where,
             ValkeyModuleString *element);
void fx_hset1(ValkeyModuleCtx *ctx, ValkeyModuleKey *key, ValkeyModuleString *keyname, const char *field,
              ValkeyModuleString *value);
void fx_hset_int(ValkeyModuleCtx *ctx, ValkeyModuleKey *key, ValkeyModuleString *keyname, ValkeyModuleString *field,
                 long long v);
void fx_new_row(ValkeyModuleCtx *ctx, ValkeyModuleKey *row, ValkeyModuleString *row_name, ValkeyModuleString *payload,
                long long now, long long priority);
void fx_set_counter(ValkeyModuleCtx *ctx, ValkeyModuleKey **key, ValkeyModuleString *keyname, long long v);
void fx_del(ValkeyModuleCtx *ctx, ValkeyModuleKey *key, ValkeyModuleString *keyname);
void fx_hdel(ValkeyModuleCtx *ctx, ValkeyModuleKey *key, ValkeyModuleString *keyname, const char *field);
void fx_drop_payload(ValkeyModuleCtx *ctx, ValkeyModuleKey *row, ValkeyModuleString *row_name);
void fx_hdel_field(ValkeyModuleCtx *ctx, ValkeyModuleKey *key, ValkeyModuleString *keyname, ValkeyModuleString *field);
void fx_pexpire(ValkeyModuleCtx *ctx, ValkeyModuleKey *key, ValkeyModuleString *keyname, long long ms);
void fx_wake(ValkeyModuleCtx *ctx, ValkeyModuleKey *key, ValkeyModuleString *keyname, long long n);
void fx_mark_ended(ValkeyModuleCtx *ctx, ValkeyModuleString *ended, long long retention_ms);
void fx_mark_cancel(ValkeyModuleCtx *ctx, ValkeyModuleKey *row, ValkeyModuleString *row_name, long long retention_ms,
                    long long now);
void fx_lrem(ValkeyModuleCtx *ctx, ValkeyModuleString *keyname, ValkeyModuleString *element);
void fx_xadd_capped(ValkeyModuleCtx *ctx, ValkeyModuleString *keyname, const char *maxlen,
                    ValkeyModuleString **fields, size_t n);
void fx_hset_fields(ValkeyModuleCtx *ctx, ValkeyModuleKey *key, ValkeyModuleString *keyname, const char *const *fields,
                    ValkeyModuleString **values, size_t n);
void fx_hdel_fields(ValkeyModuleCtx *ctx, ValkeyModuleKey *key, ValkeyModuleString *keyname, const char *const *fields,
                    size_t n);
long long fx_hincrby(ValkeyModuleCtx *ctx, ValkeyModuleKey *key, ValkeyModuleString *keyname, const char *field,
                     long long delta);
void fx_xadd(ValkeyModuleCtx *ctx, ValkeyModuleKey *key, ValkeyModuleString *keyname, ValkeyModuleString **fields,
             size_t n);
void fx_new_row_with(ValkeyModuleCtx *ctx, ValkeyModuleKey *row, ValkeyModuleString *row_name,
                     ValkeyModuleString *payload, long long now, long long priority, const char *const *extra,
                     ValkeyModuleString **values, size_t nextra);
void fx_set_string(ValkeyModuleCtx *ctx, ValkeyModuleKey **key, ValkeyModuleString *keyname,
                   ValkeyModuleString *value, long long px);
void fx_lease(ValkeyModuleCtx *ctx, ValkeyModuleKey *row, ValkeyModuleString *row_name, ValkeyModuleString *id,
              ValkeyModuleKey *active, ValkeyModuleString *active_name, ValkeyModuleKey **fence_key,
              ValkeyModuleString *fence_name, long long last_fence, long long deadline, long long *attempt,
              long long *fence);

/* events.c: a call's events stream, <base>events, when it declared it (key NULL: off), and the
 * call's now (has_at: the call takes one, and every entry carries it as at). Passed down to
 * whatever makes a change, as LaneRing is. An Event's fence and due are written when `with` says
 * so, its lane when not NULL, its priority when not 0. */
typedef struct {
    ValkeyModuleKey **key;
    ValkeyModuleString *name;
    long long at;
    int has_at;
} EventSink;

#define EV_FENCE (1u << 0)
#define EV_DUE (1u << 1)
typedef struct {
    const char *kind;
    ValkeyModuleString *id;
    long long attempt, fence, due, priority;
    ValkeyModuleString *lane;
    unsigned with;
} Event;

void ev_names_create(void);
void ev_names_free(void);
EventSink event_sink(const Call *call, ValkeyModuleKey **k);
void ev_emit(ValkeyModuleCtx *ctx, const EventSink *sink, const Event *ev);
long long ev_attempts(ValkeyModuleCtx *ctx, const EventSink *sink, ValkeyModuleKey *row);
long long ev_attempts_of(ValkeyModuleCtx *ctx, const EventSink *sink, Bytes base, ValkeyModuleString *id);

/* lanes.c: the lane bookkeeping of the flat transitions (the lane part of the prelude). ring is
 * the call's own open <base>ring when it declares it (a second handle must not write it), else
 * NULL: the ring is opened when needed. */
typedef struct {
    ValkeyModuleKey *key;
    ValkeyModuleString *name;
    /* the call's own open <base>wake when it declares it (settle, recover), else NULL: a held
     * queue's wake token (queue_limits.c) is pushed on it, never through a second handle */
    ValkeyModuleKey *wake;
    ValkeyModuleString *wake_name;
} LaneRing;

void release_lane_slot(ValkeyModuleCtx *ctx, Bytes base, const LaneRing *ring, ValkeyModuleKey *row);
int lane_parked(ValkeyModuleCtx *ctx, Bytes base, ValkeyModuleString *group);
void leave_ring(ValkeyModuleCtx *ctx, Bytes base, ValkeyModuleString *group);
int lane_is_empty(ValkeyModuleCtx *ctx, Bytes base, ValkeyModuleString *group);
void push_lane(ValkeyModuleCtx *ctx, Bytes base, const LaneRing *ring, ValkeyModuleString *group,
               ValkeyModuleString *lane_key, ValkeyModuleString *id, int where, long long priority, long long at);
const char *check_lane_bookkeeping(ValkeyModuleCtx *ctx, Acl *acl, Bytes base, ValkeyModuleKey *row);
const char *check_reopening(ValkeyModuleCtx *ctx, Bytes base);
const char *queue_paused(ValkeyModuleCtx *ctx, Acl *acl, Bytes base, int *paused);
/* The groups whose rate window has opened, checked before promote writes (due_lanes), then
 * brought back (reopen_lanes, which frees them). */
typedef struct {
    ValkeyModuleString **groups;
    size_t n;
} DueLanes;
const char *due_lanes(ValkeyModuleCtx *ctx, Bytes base, long long now, long long limit, DueLanes *due);
void due_lanes_free(ValkeyModuleCtx *ctx, DueLanes *due);
long long reopen_lanes(ValkeyModuleCtx *ctx, Bytes base, const LaneRing *ring, DueLanes *due);

/* queue_limits.c: queue-wide limits of a flat queue (<base>queueconf), read by claim and
 * settle's claim part; a lease leaving active while the queue is held leaves a wake token. */
typedef struct {
    long long concurrency, rate, window_ms, start, count;
    int has_concurrency, has_rate;
    int absent; /* queueconf is not there: no limits, not held */
} QueueLimits;
const char *queue_limits(ValkeyModuleCtx *ctx, Acl *acl, Bytes base, long long now, QueueLimits *ql);
long long limited_take(const QueueLimits *ql, ValkeyModuleKey *active, long long planned);
void note_queue_limits(ValkeyModuleCtx *ctx, Bytes base, const QueueLimits *ql, ValkeyModuleKey *active,
                       ValkeyModuleKey *pending, long long taken);
const char *check_queue_slot(ValkeyModuleCtx *ctx, Acl *acl, Bytes base);
void release_queue_slot(ValkeyModuleCtx *ctx, Bytes base, const LaneRing *ring);
/* Forget what the last call found of queueconf's `held` (run before each call). */
void queue_slot_reset(void);

/* cancel.c: a cancelled job's tombstone (bury_cancelled of the prelude), shared with the
 * settlements that end a flagged lease. */
const char *bury_cancelled(ValkeyModuleCtx *ctx, ValkeyModuleKey *row, ValkeyModuleString *row_name,
                           ValkeyModuleString *ended, long long retention_ms);

/* dependents.c: the join (include/dependents.lua). A plan walks what a job's end does to the jobs
 * waiting on it and to its dedupe key, checking each derived key once (join_end: the first failed
 * check, or NULL); join_apply then makes the planned writes, in order. names/keys: the call's
 * declared keys, open (a key declared is written through its handle). has_now: the call takes a
 * now (else a job released goes to pending at its enqueued_at, and events carry no at). */
typedef struct Join Join;
enum { JOIN_DONE, JOIN_DEAD, JOIN_CANCELLED };
Join *join_new(ValkeyModuleCtx *ctx, Bytes base, const EventSink *ev, int has_now, long long now,
               ValkeyModuleString **names, ValkeyModuleKey **keys, int nkeys);
const char *join_end(Join *j, ValkeyModuleString *id, ValkeyModuleString *row, int outcome,
                     ValkeyModuleString *error, long long retention, long long at);
const char *join_failure(const Join *j);
void join_apply(Join *j);
size_t join_mark(const Join *j);
void join_apply_to(Join *j, size_t mark);
/* The cancel mark a cancelled job's dependents inherit: its row's cancel and cancelled fields. */
void join_mark_of(ValkeyModuleCtx *ctx, ValkeyModuleKey *row, long long *retention, long long *at);
void join_free(Join *j);
/* EMQ.CANCEL's own job: on the plan's overlay as ending, not waiting. */
void join_ending(Join *j, ValkeyModuleString *id, ValkeyModuleString *row);
/* EMQ.AFTER's own job: its state on the plan's overlay, and its steps. */
void join_waiter(Join *j, ValkeyModuleString *id, ValkeyModuleString *row, long long waits, int hold,
                 ValkeyModuleString *policy);
int join_waiting(Join *j, ValkeyModuleString *id);
long long join_waits(Join *j, ValkeyModuleString *id);
int join_linked(Join *j, ValkeyModuleString *parent, ValkeyModuleString *field, ValkeyModuleString *id);
void join_link(Join *j, ValkeyModuleString *parent, ValkeyModuleString *prow, ValkeyModuleString *id);
void join_seal(Join *j, ValkeyModuleString *id);
void join_release(Join *j, ValkeyModuleString *id);
void join_fail(Join *j, ValkeyModuleString *id, ValkeyModuleString *parent, ValkeyModuleString *parent_error);
void join_cancel(Join *j, ValkeyModuleString *id, long long retention, long long at);
const char *join_expire(Join *j, ValkeyModuleString *id, ValkeyModuleString *row);

/* claim.c: EMQ.CLAIM, and claim's walk and lease shared with settle. A growable array of strings
 * the handler owns (ids read off a zset, row names); plan_claims walks pending for up to count live
 * rows (their ids to claims, their names to rows, in step) and the ghosts met on the way, checking
 * every row before anything is written (NULL, or the error to reply); claim_planned leases one and
 * replies it as claim does; record_claims records n leases in the call's claim record, if any. */
typedef struct {
    ValkeyModuleString **v;
    size_t n, cap;
} StrList;
void strlist_push(StrList *l, ValkeyModuleString *s);
void strlist_free(ValkeyModuleCtx *ctx, StrList *l);
/* The declared keys a claim writes: pending, active, the fence counter (open, and their names). */
typedef struct {
    ValkeyModuleKey *pending, *active, **fence; /* fence: the call's own slot, opened again by each lease */
    ValkeyModuleString *pending_name, *active_name, *fence_name;
} ClaimKeys;

/* What a claim's walk of pending found: live rows to lease (ids, and row names in step), ghosts to
 * drop, rows whose deadline the claim's now meets to end (ids, and row names in step). */
typedef struct {
    StrList claims, rows, ghosts, expired, expired_rows;
} ClaimWalk;
const char *plan_claims(ValkeyModuleCtx *ctx, Acl *acl, Bytes base, ValkeyModuleKey *pending, long long count,
                        long long now, ClaimWalk *w);
const char *plan_expired(Join *j, const ClaimWalk *w);
void claim_walk_free(ValkeyModuleCtx *ctx, ClaimWalk *w);
void claim_planned(ValkeyModuleCtx *ctx, const ClaimKeys *ck, ValkeyModuleString *id, ValkeyModuleString *row_name,
                   long long *last_fence, long long deadline, const EventSink *ev);
ValkeyModuleKey *record_of(const Call *call, ValkeyModuleKey **k);
ValkeyModuleString *record_name_of(const Call *call);
void record_claims(ValkeyModuleCtx *ctx, const Call *call, ValkeyModuleKey **k, const StrList *claims,
                   long long first_fence, long long lease_ms);

/* claimrecord.c: a claim's record, the optional last key of a claiming command: whether it is
 * there, and the leases it holds. */
typedef struct {
    int present;
    ValkeyModuleString **ids;
    long long *fences;
    size_t n;
} Recorded;
const char *read_record(ValkeyModuleCtx *ctx, Acl *acl, Bytes base, ValkeyModuleKey *record,
                        ValkeyModuleString *record_name, Recorded *r);
void reply_recorded(ValkeyModuleCtx *ctx, Bytes base, ValkeyModuleKey *active, const Recorded *r, int single);
void recorded_free(ValkeyModuleCtx *ctx, Recorded *r);
void fx_record(ValkeyModuleCtx *ctx, ValkeyModuleKey **key, ValkeyModuleString *keyname, ValkeyModuleString **ids,
               size_t n, long long first_fence, long long lease_ms);

#endif
