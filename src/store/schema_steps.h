/*
 * schema_steps.h — how both stores (sqlite_schema.c, pg_schema.c) answer
 * for their list of migrations: how many steps there are and the SQL of
 * one. The steps themselves are each store's own and, once shipped, frozen;
 * what is read from the list is written here once.
 */
#ifndef ONCE_STORE_SCHEMA_STEPS_H
#define ONCE_STORE_SCHEMA_STEPS_H

/* The number of steps of an array of migrations: the schema version the
 * build writes. */
#define SCHEMA_STEPS_COUNT(steps) ((int)(sizeof(steps) / sizeof((steps)[0])))

/* Defines latest_fn (the version this build writes) and step_fn (the SQL
 * of migration n, 1..latest, which takes a database from version n-1 to n;
 * NULL outside) over the array steps. */
#define SCHEMA_STEPS_DEFINE(latest_fn, step_fn, steps)                                                             \
    int latest_fn(void)                                                                                            \
    {                                                                                                              \
        return SCHEMA_STEPS_COUNT(steps);                                                                          \
    }                                                                                                              \
    const char *step_fn(int n)                                                                                     \
    {                                                                                                              \
        return n >= 1 && n <= SCHEMA_STEPS_COUNT(steps) ? (steps)[n - 1] : NULL;                                   \
    }

#endif
