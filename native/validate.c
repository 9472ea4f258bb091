/* validate.c: steps 1-5 of docs/PROTOCOL.md's validation order, driven by the protocol table
 * (protocol.h): numkeys and shape -> id -> keys -> integers and now -> the list's items -> the
 * declared keys opened and their types checked. Nothing is written before they all pass; a call
 * that fails one gets its error, the same bytes the Lua twin replies. */
#include <stdio.h>
#include <string.h>

#include "trafikey.h"

/* ---- Validation steps 1-4, in the order of docs/PROTOCOL.md ---------------------------------- */

/* numkeys exactly as EVALSHA's handler parses it (the server's own errors); sets the keys and the
 * arguments of call. Returns 0 after replying with the error. */
static int split_numkeys(ValkeyModuleCtx *ctx, ValkeyModuleString **argv, int argc, Call *call) {
    long long numkeys;
    if (argc < 2) {
        reply_error(ctx, EMQ_ERR_NUMKEYS_BIG); /* unreachable: registered with arity -2 */
        return 0;
    }
    if (ValkeyModule_StringToLongLong(argv[1], &numkeys) != VALKEYMODULE_OK) {
        reply_error(ctx, EMQ_ERR_NUMKEYS_INT);
        return 0;
    }
    if (numkeys > argc - 2) {
        reply_error(ctx, EMQ_ERR_NUMKEYS_BIG);
        return 0;
    }
    if (numkeys < 0) {
        reply_error(ctx, EMQ_ERR_NUMKEYS_NEG);
        return 0;
    }
    call->keys = argv + 2;
    call->nkeys = (int)numkeys;
    call->args = argv + 2 + numkeys;
    call->nargs = argc - 2 - (int)numkeys;
    return 1;
}

/* Step 1, the shape (EMQARITY): the table's keys, then up to its optional keys (the claim record,
 * the events key); its arguments, then up to its optional ones (a command taking a list: at least
 * its fixed arguments; a bounded list: at most max_items items, EMQ_FMT_MANY). Returns 0 after
 * replying with the error. */
static int check_shape(ValkeyModuleCtx *ctx, const Call *call) {
    const EmqCommandSpec *spec = call->spec;
    int args_ok = spec->nforms ? call->nargs >= spec->nargs
                               : call->nargs >= spec->nargs && call->nargs <= spec->nargs + spec->nopt;
    int keys_ok = call->nkeys >= spec->nkeys && call->nkeys <= spec->nkeys + spec->record + spec->events;
    char buf[128];
    if (keys_ok && args_ok) {
        /* A bounded list (one wordless form): at most max_items of its width, counted in words. */
        if (spec->max_items == 0 || (long long)(call->nargs - spec->nargs) <= spec->max_items * spec->forms[0].nargs)
            return 1;
        snprintf(buf, sizeof buf, EMQ_FMT_MANY, spec->verb, (int)spec->max_items);
        reply_error(ctx, buf);
        return 0;
    }
    if (spec->nforms) emq_variadic_arity_error(buf, sizeof buf, spec->verb, spec->nkeys, spec->nargs);
    else if (spec->nopt)
        emq_optional_arity_error(buf, sizeof buf, spec->verb, spec->nkeys, spec->nargs, spec->nargs + spec->nopt);
    else emq_arity_error(buf, sizeof buf, spec->verb, spec->nkeys, spec->nargs);
    reply_error(ctx, buf);
    return 0;
}

/* Step 2, the gates: the id argument (EMQKIND), then a group or a step's name (EMQLANE). NULL or
 * the error. */
static const char *check_gates(const Call *call) {
    for (int i = 0; i < call->spec->nargs; i++) {
        Bytes b = bytes_of(call->args[i]);
        if (call->spec->args[i].kind == EMQ_ARG_ID && !emq_id_ok(b.p, b.n)) return EMQ_ERR_KIND;
    }
    for (int i = 0; i < call->spec->nargs; i++) {
        Bytes b = bytes_of(call->args[i]);
        if (call->spec->args[i].kind == EMQ_ARG_GROUP && !emq_lane_ok(b.p, b.n)) return EMQ_ERR_LANE;
        if (call->spec->args[i].kind == EMQ_ARG_STEP && !emq_lane_ok(b.p, b.n)) return EMQ_ERR_STEP_NAME;
    }
    return NULL;
}

/* A declared key's suffix after the base: the table's, followed by its argument for a derived one
 * ("job:" + id, written into room of ROW_SUFFIX_MAX bytes). */
static Bytes key_suffix(const Call *call, int i, char *room) {
    const EmqKeySpec *key = &call->spec->keys[i];
    Bytes out = {key->suffix, key->len};
    if (key->from_arg < 0) return out;
    Bytes tail = bytes_of(call->args[key->from_arg]);
    memcpy(room, key->suffix, key->len);
    memcpy(room + key->len, tail.p, tail.n);
    out.p = room;
    out.n = key->len + tail.n;
    return out;
}

/* A claim record declared after the table's keys: base + EMQ_RECORD_PREFIX + a claim id (the
 * lane gate), record_key_ok of the scripts' claim record helpers. */
static int record_key_ok(Bytes k, Bytes first, size_t blen) {
    size_t plen = strlen(EMQ_RECORD_PREFIX);
    if (k.n <= blen + plen || memcmp(k.p, first.p, blen) != 0 || memcmp(k.p + blen, EMQ_RECORD_PREFIX, plen) != 0)
        return 0;
    return emq_lane_ok(k.p + blen + plen, k.n - blen - plen);
}

/* A declared key named by the caller: base + the table's prefix + a name of the lane gate
 * (named_key_ok of the prelude). */
static int named_key_ok(Bytes k, Bytes first, size_t blen, const char *prefix) {
    size_t plen = strlen(prefix);
    if (k.n <= blen + plen || memcmp(k.p, first.p, blen) != 0 || memcmp(k.p + blen, prefix, plen) != 0) return 0;
    return emq_lane_ok(k.p + blen + plen, k.n - blen - plen);
}

/* optional_keys of the prelude: the keys after the table's, in order, the claim record (a command
 * taking one; any key but the events key is taken for it) then the events key (exactly base +
 * EMQ_EVENTS_SUFFIX). Sets call->record_at and call->events_at; 0 when a key is neither. */
static int optional_keys(Call *call, Bytes first, size_t blen) {
    const char *suffix = EMQ_EVENTS_SUFFIX;
    int i = call->spec->nkeys;
    call->record_at = call->events_at = -1;
    if (call->spec->record && i < call->nkeys) {
        Bytes k = bytes_of(call->keys[i]);
        if (!emq_is_base_plus(k.p, k.n, first.p, blen, suffix, strlen(suffix))) {
            if (!record_key_ok(k, first, blen)) return 0;
            call->record_at = i++;
        }
    }
    if (call->spec->events && i < call->nkeys) {
        Bytes k = bytes_of(call->keys[i]);
        if (!emq_is_base_plus(k.p, k.n, first.p, blen, suffix, strlen(suffix))) return 0;
        call->events_at = i++;
    }
    return i == call->nkeys;
}

/* Step 3, keys_base of the prelude: the first key ends with its suffix and every other key is
 * exactly base + its suffix. Sets call->base (a view into the first key); 0 when the keys are not
 * one queue's. The gates ran first, so a derived suffix fits its room. */
static int keys_base(Call *call) {
    char room[ROW_SUFFIX_MAX];
    Bytes first = bytes_of(*call->keys), suffix = key_suffix(call, 0, room);
    size_t blen;
    if (!emq_split_base(first.p, first.n, suffix.p, suffix.n, &blen)) return 0;
    for (int i = 1; i < call->spec->nkeys; i++) {
        Bytes k = bytes_of(call->keys[i]);
        if (call->spec->keys[i].from_arg == EMQ_KEY_NAMED) {
            if (!named_key_ok(k, first, blen, call->spec->keys[i].suffix)) return 0;
            continue;
        }
        suffix = key_suffix(call, i, room);
        if (!emq_is_base_plus(k.p, k.n, first.p, blen, suffix.p, suffix.n)) return 0;
    }
    if (!optional_keys(call, first, blen)) return 0;
    call->base.p = first.p;
    call->base.n = blen;
    return 1;
}

static int parse_int(const ValkeyModuleString *s, long long min, long long *out) {
    Bytes b = bytes_of(s);
    return emq_parse_int(b.p, b.n, min, out);
}

/* now: "*" is the cached clock of this command (what TIME gives a script), in ms. */
static int parse_now(const ValkeyModuleString *s, long long *out) {
    Bytes b = bytes_of(s);
    int r = emq_parse_now(b.p, b.n, out);
    if (r == 2) *out = ValkeyModule_CachedMicroseconds() / 1000;
    return r != 0;
}

/* One integer, now, priority, result or progress argument, of spec: 0 after writing its EMQNUM
 * (EMQSIZE) error into err. */
static int parse_number(const EmqArgSpec *spec, const ValkeyModuleString *s, long long *out, char *err,
                        size_t cap) {
    if (spec->kind == EMQ_ARG_PRIORITY) {
        Bytes b = bytes_of(s);
        if (emq_parse_priority(b.p, b.n, out)) return 1;
        snprintf(err, cap, "%s", EMQ_ERR_PRIORITY);
        return 0;
    }
    if (spec->kind == EMQ_ARG_RESULT) {
        if (bytes_of(s).n <= EMQ_RESULT_MAX) return 1;
        snprintf(err, cap, "%s", EMQ_ERR_RESULT);
        return 0;
    }
    if (spec->kind == EMQ_ARG_PROGRESS) {
        if (bytes_of(s).n <= EMQ_PROGRESS_MAX) return 1;
        snprintf(err, cap, "%s", EMQ_ERR_PROGRESS);
        return 0;
    }
    if (spec->kind == EMQ_ARG_OUTPUT) {
        if (bytes_of(s).n <= EMQ_STEP_MAX) return 1;
        snprintf(err, cap, "%s", EMQ_ERR_STEP_OUTPUT);
        return 0;
    }
    if (spec->kind == EMQ_ARG_POLICY) {
        Bytes b = bytes_of(s);
        if ((b.n == 4 && memcmp(b.p, "fail", 4) == 0) || (b.n == 6 && memcmp(b.p, "ignore", 6) == 0) ||
            (b.n == 8 && memcmp(b.p, "continue", 8) == 0))
            return 1;
        snprintf(err, cap, "%s", EMQ_ERR_POLICY);
        return 0;
    }
    if (spec->kind == EMQ_ARG_MODE) {
        static const char *const modes[] = {"dedupe", "debounce", "throttle"};
        Bytes b = bytes_of(s);
        for (long long m = 0; m < 3; m++)
            if (b.n == strlen(modes[m]) && memcmp(b.p, modes[m], b.n) == 0) {
                *out = m;
                return 1;
            }
        snprintf(err, cap, "%s", EMQ_ERR_MODE);
        return 0;
    }
    if (spec->kind == EMQ_ARG_NOW) {
        if (parse_now(s, out)) return 1;
        snprintf(err, cap, "%s", EMQ_ERR_NOW);
        return 0;
    }
    if (spec->kind != EMQ_ARG_INT || parse_int(s, spec->min, out)) return 1;
    emq_number_error(err, cap, spec->name, spec->min);
    return 0;
}

/* Steps 1-4 for the fixed arguments of the command spec: numkeys and shape, the gates, the keys,
 * the integers and now in argument order, then the optional arguments given (one left off reads
 * as 0). Returns 0 after replying with the error. */
int check_call(ValkeyModuleCtx *ctx, ValkeyModuleString **argv, int argc, const EmqCommandSpec *spec,
                      Call *call) {
    call->spec = spec;
    if (!split_numkeys(ctx, argv, argc, call) || !check_shape(ctx, call)) return 0;
    const char *gate = check_gates(call);
    if (gate) {
        reply_error(ctx, gate);
        return 0;
    }
    if (!keys_base(call)) {
        reply_error(ctx, EMQ_ERR_KEYS);
        return 0;
    }
    char err[128];
    int given = spec->nforms ? spec->nargs : call->nargs;
    for (int i = 0; i < spec->nargs + spec->nopt; i++) {
        call->num[i] = 0;
        if (i >= given) continue;
        if (!parse_number(&spec->args[i], call->args[i], &call->num[i], err, sizeof err)) {
            reply_error(ctx, err);
            return 0;
        }
    }
    return 1;
}

/* ---- Step 4's tail: the list of a batch ------------------------------------------------------ */

static int arg_is(const ValkeyModuleString *s, const char *word) {
    Bytes b = bytes_of(s);
    return b.n == strlen(word) && memcmp(b.p, word, b.n) == 0;
}

/* The form an element of the list starting at a takes: the one whose word is a[0], or the
 * table's wordless form. -1 when none. */
static int find_form(const EmqCommandSpec *spec, ValkeyModuleString **a) {
    for (int f = 0; f < spec->nforms; f++)
        if (spec->forms[f].word == NULL || arg_is(a[0], spec->forms[f].word)) return f;
    return -1;
}

/* One argument of an item, of spec: its gate, or its number. 0 after writing the error into err. */
static int check_item_arg(const EmqArgSpec *spec, const ValkeyModuleString *s, long long *out, char *err,
                          size_t cap) {
    Bytes b = bytes_of(s);
    if (spec->kind == EMQ_ARG_ID && !emq_id_ok(b.p, b.n)) {
        snprintf(err, cap, "%s", EMQ_ERR_KIND);
        return 0;
    }
    if (spec->kind == EMQ_ARG_GROUP && !emq_lane_ok(b.p, b.n)) {
        snprintf(err, cap, "%s", EMQ_ERR_LANE);
        return 0;
    }
    return parse_number(spec, s, out, err, cap);
}

/* Step 4's tail: the list after the fixed arguments, each element checked whole before the next:
 * its form (the word and the width) -> EMQITEM, then its arguments in order (id -> EMQKIND,
 * integers -> EMQNUM). 0 after writing the error into err. */
int parse_items(Call *call, char *err, size_t cap) {
    const EmqCommandSpec *spec = call->spec;
    call->items = NULL;
    call->nitems = 0;
    if (spec->nforms == 0) return 1;
    /* Every form is at least one word wide (EMQ.AFTER's <parent>): a bound on the count. */
    call->items = ValkeyModule_Alloc(((size_t)(call->nargs - spec->nargs) + 1) * sizeof *call->items);
    for (int i = spec->nargs; i < call->nargs; call->nitems++) {
        ValkeyModuleString **a = call->args + i;
        int f = find_form(spec, a);
        const EmqItemForm *form = f < 0 ? NULL : &spec->forms[f];
        int skip = form && form->word ? 1 : 0;
        if (form == NULL || i + skip + form->nargs > call->nargs) {
            emq_item_error(err, cap, call->nitems + 1, spec->item_shape);
            return 0;
        }
        Item *it = &call->items[call->nitems];
        memset(it, 0, sizeof *it);
        it->form = f;
        it->args = a + skip;
        for (int j = 0; j < form->nargs; j++)
            if (!check_item_arg(&form->args[j], it->args[j], &it->num[j], err, cap)) return 0;
        i += skip + form->nargs;
    }
    return 1;
}

/* The items and what the transition derived for them. */
void items_free(ValkeyModuleCtx *ctx, Call *call) {
    for (long long i = 0; i < call->nitems; i++) {
        Item *it = &call->items[i];
        if (it->row_name) ValkeyModule_FreeString(ctx, it->row_name);
        if (it->lane) ValkeyModule_FreeString(ctx, it->lane);
        if (it->lane_key) ValkeyModule_FreeString(ctx, it->lane_key);
        if (it->ended) ValkeyModule_FreeString(ctx, it->ended);
    }
    ValkeyModule_Free(call->items);
    call->items = NULL;
}

/* ---- Step 5: the declared keys, open and typed ----------------------------------------------- */

void close_keys(ValkeyModuleKey **keys, int n) {
    for (int i = 0; i < n; i++) ValkeyModule_CloseKey(keys[i]);
}

/* Step 5, types_ok of the prelude: opens the declared keys in order, each absent or of the table's
 * type. Stops at the first bad key, as the script does, closing what it opened; returns 0 then. */
int open_typed(ValkeyModuleCtx *ctx, const Call *call, ValkeyModuleKey **out) {
    for (int i = 0; i < call->nkeys; i++) {
        out[i] = ValkeyModule_OpenKey(ctx, call->keys[i], VALKEYMODULE_READ | VALKEYMODULE_WRITE);
        int t = ValkeyModule_KeyType(out[i]);
        int expected = i < call->spec->nkeys ? call->spec->keys[i].type
                       : i == call->events_at    ? VALKEYMODULE_KEYTYPE_STREAM
                                                 : VALKEYMODULE_KEYTYPE_STRING;
        if (t != VALKEYMODULE_KEYTYPE_EMPTY && t != expected) {
            close_keys(out, i + 1);
            return 0;
        }
    }
    return 1;
}
