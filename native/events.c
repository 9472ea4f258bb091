/* events.c: the entries a call appends to its queue's events stream, <base>events, when it
 * declared that key (the last of its keys). One entry per change, after the change; the fields
 * in the order include/events.lua writes them: kind, job, attempt, at (when the call takes now),
 * then fence, lane, due and priority where the event has them. The write is fx_xadd's
 * (effects.c). */
#include <string.h>

#include "trafikey.h"

#define EV_FIELDS_MAX 16

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
    return row_int_field(ctx, row, "attempts", 0);
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
#define EV_NAME(s) (f[n] = ValkeyModule_CreateString(ctx, s, sizeof(s) - 1), owned[n++] = 1)
#define EV_VALUE(v) (f[n] = (v), owned[n++] = 0)
#define EV_NUMBER(v) (f[n] = number(ctx, (v)), owned[n++] = 1)
    EV_NAME("kind");
    f[n] = ValkeyModule_CreateString(ctx, ev->kind, strlen(ev->kind));
    owned[n++] = 1;
    EV_NAME("job");
    EV_VALUE(ev->id);
    EV_NAME("attempt");
    EV_NUMBER(ev->attempt);
    if (sink->has_at) {
        EV_NAME("at");
        EV_NUMBER(sink->at);
    }
    if (ev->with & EV_FENCE) {
        EV_NAME("fence");
        EV_NUMBER(ev->fence);
    }
    if (ev->lane != NULL) {
        EV_NAME("lane");
        EV_VALUE(ev->lane);
    }
    if (ev->with & EV_DUE) {
        EV_NAME("due");
        EV_NUMBER(ev->due);
    }
    if (ev->priority != 0) {
        EV_NAME("priority");
        EV_NUMBER(ev->priority);
    }
#undef EV_NAME
#undef EV_VALUE
#undef EV_NUMBER
    fx_xadd(ctx, *sink->key, sink->name, f, n);
    for (size_t i = 0; i < n; i++)
        if (owned[i]) ValkeyModule_FreeString(ctx, f[i]);
}
