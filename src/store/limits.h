/*
 * limits.h — the arithmetic of limits (once_limit_charge) that the stores
 * share: which buckets a window counts, when one leaves it, whether a
 * charge fits, and the JSON a store keeps of the charges of an attempt (or
 * sends to PostgreSQL's once_reserve). The PostgreSQL store does the same
 * arithmetic in SQL (pg_schema.c, once_limits_check); the two must agree.
 */
#ifndef ONCE_STORE_LIMITS_H
#define ONCE_STORE_LIMITS_H

#include <stddef.h>
#include <stdint.h>

#include "once/once.h"

/* The buckets a window counts at now: each is width ms wide; those from
 * first (now's bucket - back) on are counted, so that the counted span is
 * never shorter than the window; bucket b leaves it at (b + back + 1) *
 * width (limit_leaves). */
typedef struct limit_span {
    int64_t width;
    int64_t back;
    int64_t first;
    int64_t now_bucket;
} limit_span;

/* The span of window_ms at now (both validated: now >= 0). */
limit_span limit_span_at(int64_t window_ms, int64_t now);

/* When bucket b of span s stops being counted, in ms since the epoch. */
int64_t limit_leaves(const limit_span *s, int64_t bucket);

/* Whether amount fits on top of used under max. Sums of fractions are not
 * exact in binary (0.1 + 0.2 > 0.3), so a relative slack of 1e-9 keeps
 * them from refusing what fits exactly; PostgreSQL's SQL uses the same. */
int limit_fits(double used, double amount, double max);

/* The charges as JSON, a new string: with buckets NULL, what once_reserve
 * takes ([[limit, window_ms, max, amount], ...]); else what a row keeps of
 * its drawn charges ([[limit, bucket, amount], ...], buckets[i] the bucket
 * charge i was added to). NULL when out of memory. */
char *limits_json(const once_limit_charge *charges, size_t n, const int64_t *buckets);

#endif
