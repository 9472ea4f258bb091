/* fields.c: the names of the hash fields the module reads and writes (a row's, queueconf's), made
 * once at load as strings kept for the module's life. A field named as a C string
 * (VALKEYMODULE_HASH_CFIELDS, a "c" argument of ValkeyModule_Replicate) becomes a new string object
 * on every call; a kept one is passed as it is (VALKEYMODULE_HASH_NONE, "s": the server takes a
 * reference, copies nothing). field_name gives the kept string of a name, hash_get1 reads one
 * field through it; row_get reads one of the job row's four one-letter fields, else the name the
 * earlier layout gave it. */
#include <string.h>

#include "trafikey.h"

static const char *const NAMES[] = {ROW_PAYLOAD, ROW_ATTEMPTS, ROW_FENCE, ROW_ENQUEUED_AT, "priority", "lane",
                                    "error",   "result",   "cancel", "cancelled",   "next",     "dedupe",
                                    "dedupe_ms", "waits",  "hold",   "policy",      "held",     "concurrency",
                                    "rate",    "window_ms", "window", "progress", "steps", "expires_at", "expired", ROW_OLD_PAYLOAD, ROW_OLD_ATTEMPTS,
                                    ROW_OLD_ENQUEUED_AT, ROW_OLD_FENCE};
#define NNAMES (sizeof NAMES / sizeof NAMES[0])
static ValkeyModuleString *kept[NNAMES];

void fields_create(void) {
    for (size_t i = 0; i < NNAMES; i++) kept[i] = ValkeyModule_CreateString(NULL, NAMES[i], strlen(NAMES[i]));
}

void fields_free(void) {
    for (size_t i = 0; i < NNAMES; i++) {
        if (kept[i]) ValkeyModule_FreeString(NULL, kept[i]);
        kept[i] = NULL;
    }
}

ValkeyModuleString *field_name(const char *name) {
    for (size_t i = 0; i < NNAMES; i++)
        if (NAMES[i][0] == name[0] && strcmp(NAMES[i], name) == 0) return kept[i];
    return NULL;
}

/* HashGet of one field of an open hash (the caller checked its type); *out NULL when absent. */
void hash_get1(ValkeyModuleKey *key, const char *field, ValkeyModuleString **out) {
    *out = NULL;
    ValkeyModuleString *name = field_name(field);
    if (name) ValkeyModule_HashGet(key, VALKEYMODULE_HASH_NONE, name, out, NULL);
    else ValkeyModule_HashGet(key, VALKEYMODULE_HASH_CFIELDS, field, out, NULL);
}

/* The name the earlier layout gave one of the job row's four one-letter fields (docs/PROTOCOL.md,
 * "The job row"), else NULL. */
static const char *old_name_of(const char *field) {
    if (field[0] == '\0' || field[1] != '\0') return NULL;
    switch (field[0]) {
    case 'p': return ROW_OLD_PAYLOAD;
    case 'a': return ROW_OLD_ATTEMPTS;
    case 't': return ROW_OLD_ENQUEUED_AT;
    case 'f': return ROW_OLD_FENCE;
    default: return NULL;
    }
}

/* row_field of the prelude (include/rows.lua): hash_get1 of field, else of its earlier name, so a
 * row an earlier release wrote reads as one of this layout (the caller checked its type). */
void row_get(ValkeyModuleKey *row, const char *field, ValkeyModuleString **out) {
    hash_get1(row, field, out);
    const char *old = *out == NULL ? old_name_of(field) : NULL;
    if (old) hash_get1(row, old, out);
}
