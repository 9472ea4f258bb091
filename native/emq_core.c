/* emq_core: see emq_core.h. Every rule here has a twin in echomq/lua/include/. */
#include "emq_core.h"

#include <stdio.h>
#include <string.h>

static int id_byte_ok(unsigned char c) {
    return (c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '.' ||
           c == '_' || c == ':' || c == '-';
}

int emq_id_ok(const char *id, size_t len) {
    if (len <= EMQ_ID_KIND_LEN || len > EMQ_ID_KIND_LEN + EMQ_ID_REST_MAX) return 0;
    if (memcmp(id, EMQ_ID_KIND, EMQ_ID_KIND_LEN) != 0) return 0;
    for (size_t i = EMQ_ID_KIND_LEN; i < len; i++) {
        if (!id_byte_ok((unsigned char)id[i])) return 0;
    }
    return 1;
}

int emq_lane_ok(const char *group, size_t len) {
    if (len < 1 || len > EMQ_ID_REST_MAX) return 0;
    for (size_t i = 0; i < len; i++) {
        if (!id_byte_ok((unsigned char)group[i])) return 0;
    }
    return 1;
}

int emq_parse_int(const char *s, size_t len, long long min, long long *out) {
    if (len < 1 || len > EMQ_INT_DIGITS_MAX) return 0;
    long long v = 0;
    for (size_t i = 0; i < len; i++) {
        if (s[i] < '0' || s[i] > '9') return 0;
        v = v * 10 + (s[i] - '0');
    }
    if (v < min) return 0;
    *out = v;
    return 1;
}

int emq_parse_now(const char *s, size_t len, long long *out) {
    if (len == 1 && s[0] == '*') return 2;
    return emq_parse_int(s, len, 0, out);
}

int emq_parse_priority(const char *p, size_t n, long long *out) {
    size_t start = (n > 0 && p[0] == '-') ? 1 : 0;
    if (n - start < 1 || n - start > 3) return 0;
    long long v = 0;
    for (size_t i = start; i < n; i++) {
        if (p[i] < '0' || p[i] > '9') return 0;
        v = v * 10 + (p[i] - '0');
    }
    if (start) v = -v;
    if (v < EMQ_PRIORITY_MIN || v > EMQ_PRIORITY_MAX) return 0;
    *out = v;
    return 1;
}

long long emq_pending_score(long long priority, long long t) {
    return (t < EMQ_TIME_CAP ? t : EMQ_TIME_CAP) - priority * EMQ_PRIORITY_BAND;
}

int emq_split_base(const char *key, size_t len, const char *suffix, size_t slen, size_t *base_len) {
    if (len < slen || memcmp(key + len - slen, suffix, slen) != 0) return 0;
    *base_len = len - slen;
    return 1;
}

int emq_is_base_plus(const char *key, size_t len, const char *base, size_t blen,
                     const char *suffix, size_t slen) {
    return len == blen + slen && memcmp(key, base, blen) == 0 && memcmp(key + blen, suffix, slen) == 0;
}

int emq_arity_error(char *buf, size_t cap, const char *verb, int nkeys, int nargs) {
    return snprintf(buf, cap, EMQ_FMT_ARITY, verb, nkeys, nargs);
}

int emq_number_error(char *buf, size_t cap, const char *name, long long min) {
    return snprintf(buf, cap, EMQ_FMT_NUMBER, name, min);
}

int emq_variadic_arity_error(char *buf, size_t cap, const char *verb, int nkeys, int nargs) {
    return snprintf(buf, cap, EMQ_FMT_VARIADIC_ARITY, verb, nkeys, nargs);
}

int emq_optional_arity_error(char *buf, size_t cap, const char *verb, int nkeys, int nargs, int nmax) {
    return snprintf(buf, cap, EMQ_FMT_OPTIONAL_ARITY, verb, nkeys, nargs, nmax);
}

int emq_item_error(char *buf, size_t cap, long long n, const char *shape) {
    return snprintf(buf, cap, EMQ_FMT_ITEM, n, shape);
}
