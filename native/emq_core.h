/* emq_core: the pure parts of echomq's protocol, shared by the trafikey module and, through cffi,
 * by the Python client (echomq._core). No Valkey API here: only bytes in, verdicts out. */
#ifndef EMQ_CORE_H
#define EMQ_CORE_H

#include <stddef.h>

#define EMQ_ID_KIND "JOB:"
#define EMQ_ID_KIND_LEN 4
#define EMQ_ID_REST_MAX 200
#define EMQ_INT_DIGITS_MAX 15
#define EMQ_INT_MAX 999999999999999LL
#define EMQ_WAKE_CAP 64
/* The highest value of a queue's fence counter a claim still counts up from (the next fence
 * stays a valid integer argument). */
#define EMQ_FENCE_MAX (EMQ_INT_MAX - 1)
/* The most bytes a result kept by an ack may hold (echomq.engine.transitions.MAX_RESULT_BYTES). */
#define EMQ_RESULT_MAX 524288
/* The most bytes a job's progress may hold (echomq.engine.transitions.MAX_PROGRESS_BYTES). */
#define EMQ_PROGRESS_MAX 65536
/* The most bytes one step's output may hold, and a job's steps in all
 * (echomq.engine.transitions.MAX_STEP_BYTES, MAX_JOB_STEPS_BYTES). */
#define EMQ_STEP_MAX 262144
#define EMQ_STEPS_MAX 1048576
/* A job's priority and its pending score (echomq.engine.transitions: PRIORITY_MIN, PRIORITY_MAX,
 * PRIORITY_BAND, TIME_CAP): score = min(t, EMQ_TIME_CAP) - p * EMQ_PRIORITY_BAND. */
#define EMQ_PRIORITY_MIN (-100LL)
#define EMQ_PRIORITY_MAX 100LL
#define EMQ_PRIORITY_BAND 35184372088832LL
#define EMQ_TIME_CAP (EMQ_PRIORITY_BAND - 1)

/* The error replies, EMQ_ERR_* and EMQ_FMT_*: generated from the error table of
 * echomq/engine/transitions.py, as the scripts' texts are checked against it. */
#include "emq_errors.h"

/* 1 when id is JOB:<rest>, rest 1..200 bytes of [A-Za-z0-9._:-]; else 0. */
int emq_id_ok(const char *id, size_t len);

/* 1 when group is a lane name: 1..200 bytes of [A-Za-z0-9._:-]; else 0. */
int emq_lane_ok(const char *group, size_t len);

/* 1 and *out set when s is 1..15 ASCII digits with value >= min; else 0. */
int emq_parse_int(const char *s, size_t len, long long min, long long *out);

/* now: 2 for "*" (the caller reads the clock), 1 and *out set for an integer >= 0, 0 when bad. */
int emq_parse_now(const char *s, size_t len, long long *out);

/* A priority: an optional '-', then 1..3 ASCII digits, from -100 to 100 ("-0" and leading zeros
 * accepted). 1 and *out set when good; else 0. */
int emq_parse_priority(const char *p, size_t n, long long *out);

/* The pending score of a job of priority p at time t: min(t, EMQ_TIME_CAP) - p * EMQ_PRIORITY_BAND
 * (every value an integer a double holds exactly). */
long long emq_pending_score(long long priority, long long t);

/* 1 when key ends with suffix (of slen bytes), *base_len set to the length before it; else 0. */
int emq_split_base(const char *key, size_t len, const char *suffix, size_t slen, size_t *base_len);

/* 1 when key is exactly base (blen bytes) followed by suffix (slen bytes); else 0. */
int emq_is_base_plus(const char *key, size_t len, const char *base, size_t blen,
                     const char *suffix, size_t slen);

/* Writes "EMQARITY EMQ.<verb> takes <k> keys and <a> arguments" into buf (NUL-terminated);
 * returns the length, as snprintf. */
int emq_arity_error(char *buf, size_t cap, const char *verb, int nkeys, int nargs);

/* Writes "EMQARITY EMQ.<verb> takes <k> keys and at least <a> arguments" (a transition taking a
 * list after its fixed arguments) into buf. */
int emq_variadic_arity_error(char *buf, size_t cap, const char *verb, int nkeys, int nargs);

/* Writes "EMQARITY EMQ.<verb> takes <k> keys and <a> or <m> arguments" (a transition whose last
 * arguments may be left off) into buf. */
int emq_optional_arity_error(char *buf, size_t cap, const char *verb, int nkeys, int nargs, int nmax);

/* Writes "EMQITEM item <n> must be <shape>" into buf: item n (from 1) of a list is malformed. */
int emq_item_error(char *buf, size_t cap, long long n, const char *shape);

/* Writes "EMQNUM <name> must be an integer from <min> to 999999999999999" into buf. */
int emq_number_error(char *buf, size_t cap, const char *name, long long min);

#endif
