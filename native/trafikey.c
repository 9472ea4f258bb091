/* trafikey.c: trafikey's face to the server, a Valkey module running echomq's transitions.
 *
 * ValkeyModule_OnLoad registers every command from the protocol table (protocol.h, generated from
 * echomq/engine/transitions.py): its name, flags, summary, complexity, arity and key spec. It names no
 * ACL category (COMMAND INFO lists none: the server gives a module's commands none of their own),
 * so a user is granted EMQ.* by name (+emq.claim) or with +@all. Key positions for ACL, COMMAND
 * GETKEYS and the cluster are answered here, numkeys read as the server reads EVALSHA's.
 * The handler table gives each command one handler: it runs the validation order of
 * docs/PROTOCOL.md from the same table (validate.c), then its logic (transitions.c), which checks
 * the keys it derives, writes through effects.c (each effect replicating itself) and replies. */
#include <stdlib.h>

#define EMQ_PROTOCOL_DEFINE
#define TRAFIKEY_API_DEFINE
#include "trafikey.h"

#define TRAFIKEY_VERSION 1

/* Strings made once at load: the arguments of the ACL probe and the wake token. */
ValkeyModuleString *s_hincrby, *s_attempts, *s_one;

/* ---- Key positions --------------------------------------------------------------------------- */

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
 * argv[1], as the server finds EVALSHA's. A numkeys read strictly gets the key spec's flags; one
 * only atoi reads (" 3", "+3", "3 ": the server's key spec refused it) is found by evalGetKeys,
 * whose keys carry no flags: the ACL check then asks a key pattern for no permission in
 * particular, so a key granted read-only (%R~) passes, and the handler answers the strict read's
 * error, as EVALSHA's does (a key no pattern matches is still NOPERM). */
static int report_keys(ValkeyModuleCtx *ctx, ValkeyModuleString **argv, int argc) {
    long long strict;
    int flags = argc >= 2 && ValkeyModule_StringToLongLong(argv[1], &strict) == VALKEYMODULE_OK
                    ? DECLARED_KEY_FLAGS
                    : 0;
    int numkeys = declared_key_count(argv, argc);
    for (int i = 0; i < numkeys; i++) ValkeyModule_KeyAtPosWithFlags(ctx, 2 + i, flags);
    return VALKEYMODULE_OK;
}

/* ---- Running a command ----------------------------------------------------------------------- */

/* Every EMQ.* command: a key-position request is answered from numkeys; otherwise steps 1-5 run
 * from the table (validate.c), then the command's logic gets its declared keys open and of their
 * types. */
static int run_command(ValkeyModuleCtx *ctx, ValkeyModuleString **argv, int argc, int id,
                       int (*logic)(ValkeyModuleCtx *, Call *, ValkeyModuleKey **)) {
    if (ValkeyModule_IsKeysPositionRequest(ctx)) return report_keys(ctx, argv, argc);
    Call call;
    queue_slot_reset();
    if (!check_call(ctx, argv, argc, &emq_commands[id], &call)) return VALKEYMODULE_OK;
    char err[256];
    ValkeyModuleKey *k[EMQ_KEYS_MAX];
    int rc;
    if (!parse_items(&call, err, sizeof err)) {
        rc = reply_error(ctx, err);
    } else if (!open_typed(ctx, &call, k)) {
        rc = reply_error(ctx, EMQ_ERR_TYPE);
    } else {
        rc = logic(ctx, &call, k);
        close_keys(k, call.nkeys);
    }
    items_free(ctx, &call);
    return rc;
}

/* One handler per command of the table, EMQ_CMD_<ID> running tx_<name> (its usage line heads
 * tx_<name> in transitions.c, and its layout heads its macros in protocol.h). */
#define EMQ_HANDLER(ID, name)                                                                       \
    static int handle_##name(ValkeyModuleCtx *ctx, ValkeyModuleString **argv, int argc) {          \
        return run_command(ctx, argv, argc, EMQ_CMD_##ID, tx_##name);                              \
    }
EMQ_FOR_EACH_COMMAND(EMQ_HANDLER)
#undef EMQ_HANDLER

/* ---- Registration ---------------------------------------------------------------------------- */

/* Like EVAL's: the keys are the numkeys arguments after argv[1]; used as EVAL declares them. */
static ValkeyModuleCommandKeySpec keynum_specs[] = {
    {.notes = "numkeys keys follow numkeys, as with EVALSHA; each may be read and written",
     .flags = DECLARED_KEY_FLAGS,
     .begin_search_type = VALKEYMODULE_KSPEC_BS_INDEX,
     .bs.index.pos = 1,
     .find_keys_type = VALKEYMODULE_KSPEC_FK_KEYNUM,
     .fk.keynum = {.keynumidx = 0, .firstkey = 1, .keystep = 1}},
    {0}};

/* The handler of each command of the table, by its index there. */
static const ValkeyModuleCmdFunc handlers[EMQ_COMMAND_COUNT] = {
#define EMQ_HANDLER_ENTRY(ID, name) [EMQ_CMD_##ID] = handle_##name,
    EMQ_FOR_EACH_COMMAND(EMQ_HANDLER_ENTRY)
#undef EMQ_HANDLER_ENTRY
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
    s_attempts = ValkeyModule_CreateString(NULL, ROW_ATTEMPTS, sizeof(ROW_ATTEMPTS) - 1);
    s_one = ValkeyModule_CreateString(NULL, "1", 1);
    ev_names_create();
    fields_create();

    if (register_commands(ctx) != VALKEYMODULE_OK) return VALKEYMODULE_ERR;
    return VALKEYMODULE_OK;
}

int ValkeyModule_OnUnload(ValkeyModuleCtx *ctx) {
    (void)ctx;
    ValkeyModule_FreeString(NULL, s_hincrby);
    ValkeyModule_FreeString(NULL, s_attempts);
    ValkeyModule_FreeString(NULL, s_one);
    ev_names_free();
    fields_free();
    return VALKEYMODULE_OK;
}
