/* step.c: the logic of EMQ.STEP, a durable step's output recorded in the job's row under the
 * current lease, once: fenced as EMQ.PROGRESS is, its one write through effects.c. */
#include <string.h>

#include "trafikey.h"

/* "step:" + the longest name of the lane gate, and its NUL. */
#define STEP_FIELD_PREFIX "step:"
#define STEP_FIELD_MAX (sizeof STEP_FIELD_PREFIX - 1 + 200 + 1)

/* EMQ.STEP 2 <base>active <base>job:<id> <id> <fence:1> <step> <output>
 * Twin of step.lua. The row's step:<step> takes output and its steps field the bytes of every
 * step recorded (one HSET), unless the name is recorded already (+KEPT, nothing changed).
 * +RECORDED | +KEPT | +STALE | EMQARITY EMQKIND EMQLANE EMQKEYS EMQNUM EMQSIZE WRONGTYPE. */
int tx_step(ValkeyModuleCtx *ctx, Call *call, ValkeyModuleKey **k) {
    ValkeyModuleKey *row = k[EMQ_STEP_KEY_JOB];
    if (!is_current_lease(ctx, k[EMQ_STEP_KEY_ACTIVE], row, call->args[EMQ_STEP_ARG_ID],
                          call->num[EMQ_STEP_ARG_FENCE]))
        return ValkeyModule_ReplyWithSimpleString(ctx, "STALE");
    Bytes name = bytes_of(call->args[EMQ_STEP_ARG_STEP]);
    char field[STEP_FIELD_MAX];
    memcpy(field, STEP_FIELD_PREFIX, sizeof STEP_FIELD_PREFIX - 1);
    memcpy(field + sizeof STEP_FIELD_PREFIX - 1, name.p, name.n);
    field[sizeof STEP_FIELD_PREFIX - 1 + name.n] = '\0';
    ValkeyModuleString *kept = NULL;
    hash_get1(row, field, &kept);
    if (kept) {
        ValkeyModule_FreeString(ctx, kept);
        return ValkeyModule_ReplyWithSimpleString(ctx, "KEPT");
    }
    long long total = row_int_field(ctx, row, "steps", 0) + (long long)bytes_of(call->args[EMQ_STEP_ARG_OUTPUT]).n;
    if (total > EMQ_STEPS_MAX) return reply_error(ctx, EMQ_ERR_STEPS_TOTAL);
    char num[24];
    ValkeyModuleString *values[2] = {call->args[EMQ_STEP_ARG_OUTPUT],
                                     ValkeyModule_CreateString(ctx, num, decimal(total, num))};
    const char *const fields[2] = {field, "steps"};
    fx_hset_fields(ctx, row, call->keys[EMQ_STEP_KEY_JOB], fields, values, 2);
    ValkeyModule_FreeString(ctx, values[1]);
    return ValkeyModule_ReplyWithSimpleString(ctx, "RECORDED");
}
