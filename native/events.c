/* events.c: the entries a call appends to its queue's events stream, <base>events, when it
 * declared that key (the last of its keys). One entry per change, after the change; the fields
 * in the order include/events.lua writes them: kind, job, attempt, at (when the call takes now),
 * then fence, lane, due and priority where the event has them. The write is fx_xadd's
 * (effects.c). */
#include <string.h>

#include "trafikey.h"

#define EV_FIELDS_MAX 16

/* The field names, made once when the module loads (ev_names_create) and shared by every entry:
 * the stream copies their bytes, a replicated XADD holds a reference. */
enum { FIELD_KIND, FIELD_JOB, FIELD_ATTEMPT, FIELD_AT, FIELD_FENCE, FIELD_LANE, FIELD_DUE, FIELD_PRIORITY, FIELD_NAMES };
static const char *const ev_name_text[FIELD_NAMES] = {"kind", "job", "attempt", "at", "fence", "lane", "due", "priority"};
static ValkeyModuleString *ev_names[FIELD_NAMES];

void ev_names_create(void) {
    for (int i = 0; i < FIELD_NAMES; i++)
        ev_names[i] = ValkeyModule_CreateString(NULL, ev_name_text[i], strlen(ev_name_text[i]));
}

void ev_names_free(void) {
    for (int i = 0; i < FIELD_NAMES; i++) {
        ValkeyModule_FreeString(NULL, ev_names[i]);
        ev_names[i] = NULL;
    }
}

static ValkeyModuleString *number(ValkeyModuleCtx *ctx, long long v) {
    char num[24];
    return ValkeyModule_CreateString(ctx, num, decimal(v, num));
}

/* The sink of a call: its events key when it declared one (call->events_at, placed by
 * validation), and its now argument. */
EventSink event_sink(const Call *call, ValkeyModuleKey **k) {
    EventSink sink = {NULL, NULL, 0, 0};
    if (call->events_at >= 0) {
        sink.key = &k[call->events_at];
        sink.name = call->keys[call->events_at];
    }
    for (int i = 0; i < call->spec->nargs; i++) {
        if (call->spec->args[i].kind == EMQ_ARG_NOW) {
            sink.at = call->num[i];
            sink.has_at = 1;
        }
    }
    return sink;
}

/* The attempts a job's row counts (no row, absent or not a count: 0), read only when events are on:
 * attempts_of of include/events.lua. */
long long ev_attempts(ValkeyModuleCtx *ctx, const EventSink *sink, ValkeyModuleKey *row) {
    if (sink == NULL || sink->key == NULL || ValkeyModule_KeyType(row) != VALKEYMODULE_KEYTYPE_HASH) return 0;
    return row_int_field(ctx, row, ROW_ATTEMPTS, 0);
}

/* ev_attempts of the row of job id (derived from base), opened for the read. */
long long ev_attempts_of(ValkeyModuleCtx *ctx, const EventSink *sink, Bytes base, ValkeyModuleString *id) {
    if (sink == NULL || sink->key == NULL) return 0;
    ValkeyModuleString *name = derived_key(ctx, base, "job:", id);
    ValkeyModuleKey *row = ValkeyModule_OpenKey(ctx, name, VALKEYMODULE_READ);
    long long attempts = ev_attempts(ctx, sink, row);
    ValkeyModule_CloseKey(row);
    ValkeyModule_FreeString(ctx, name);
    return attempts;
}

void ev_emit(ValkeyModuleCtx *ctx, const EventSink *sink, const Event *ev) {
    if (sink == NULL || sink->key == NULL) return;
    ValkeyModuleString *f[EV_FIELDS_MAX];
    int owned[EV_FIELDS_MAX] = {0};
    size_t n = 0;
#define EV_NAME(i) (f[n] = ev_names[i], owned[n++] = 0)
#define EV_VALUE(v) (f[n] = (v), owned[n++] = 0)
#define EV_NUMBER(v) (f[n] = number(ctx, (v)), owned[n++] = 1)
    EV_NAME(FIELD_KIND);
    f[n] = ValkeyModule_CreateString(ctx, ev->kind, strlen(ev->kind));
    owned[n++] = 1;
    EV_NAME(FIELD_JOB);
    EV_VALUE(ev->id);
    EV_NAME(FIELD_ATTEMPT);
    EV_NUMBER(ev->attempt);
    if (sink->has_at) {
        EV_NAME(FIELD_AT);
        EV_NUMBER(sink->at);
    }
    if (ev->with & EV_FENCE) {
        EV_NAME(FIELD_FENCE);
        EV_NUMBER(ev->fence);
    }
    if (ev->lane != NULL) {
        EV_NAME(FIELD_LANE);
        EV_VALUE(ev->lane);
    }
    if (ev->with & EV_DUE) {
        EV_NAME(FIELD_DUE);
        EV_NUMBER(ev->due);
    }
    if (ev->priority != 0) {
        EV_NAME(FIELD_PRIORITY);
        EV_NUMBER(ev->priority);
    }
#undef EV_NAME
#undef EV_VALUE
#undef EV_NUMBER
    fx_xadd(ctx, *sink->key, sink->name, f, n);
    for (size_t i = 0; i < n; i++)
        if (owned[i]) ValkeyModule_FreeString(ctx, f[i]);
}
