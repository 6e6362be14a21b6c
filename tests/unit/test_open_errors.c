/*
 * test_open_errors.c — once_store_open on bad URLs and bad files: the
 * documented codes, and files that are not ours are left byte-for-byte
 * untouched.
 *
 * test_unreadable needs a user that cannot read a file, and CI runs the
 * tests as root, who reads anything: run as root, it re-executes this binary
 * as nobody (UNREADABLE_CHILD) for the part that must be refused.
 */
#include "helpers.h"

#include <grp.h>
#include <pwd.h>
#include <sys/wait.h>

#include <sqlite3.h>

#define UNREADABLE_CHILD "--unreadable-child"

typedef struct dir_env {
    char dir[128];
} dir_env;

static int setup_dir(void **state)
{
    dir_env *d = calloc(1, sizeof *d);
    assert_non_null(d);
    th_mkdtemp(d->dir, sizeof d->dir);
    *state = d;
    return 0;
}

static int teardown_dir(void **state)
{
    dir_env *d = *state;
    chmod(d->dir, 0700);
    th_rmrf(d->dir);
    free(d);
    return 0;
}

static void expect_open(const char *url, int want)
{
    once_store *st = NULL;
    int rc = once_store_open(url, &st);
    if (rc != want)
        fail_msg("once_store_open(\"%s\"): rc %d (%s), want %d (%s); detail: %s", url, rc,
                 once_strerror(rc), want, once_strerror(want), once_errdetail());
    if (rc != 0) {
        assert_null(st);
        assert_true(strlen(once_errdetail()) > 0);
    }
    once_store_close(st);
}

static int open_rc(const char *url)
{
    once_store *st = NULL;
    int rc = once_store_open(url, &st);
    if (rc == 0)
        once_store_close(st);
    else
        assert_true(strlen(once_errdetail()) > 0);
    return rc;
}

static void test_bad_urls(void **state)
{
    (void)state;
    expect_open("", ONCE_EINVAL);
    expect_open("mysql://x", ONCE_EINVAL);
    expect_open("sqlite:", ONCE_EINVAL);
    expect_open("sqlite", ONCE_EINVAL);
    expect_open("/tmp/x.db", ONCE_EINVAL);
    /* PostgreSQL: nothing listens on port 1 (refused at once): ONCE_ESTORE. */
    expect_open("postgres://postgres@127.0.0.1:1/x", ONCE_ESTORE);
    expect_open("postgresql://postgres@127.0.0.1:1/x?connect_timeout=5", ONCE_ESTORE);
    /* once_schema must be 1-63 of [a-z0-9_], given once; refused before connecting. */
    expect_open("postgres://postgres@127.0.0.1:1/x?once_schema=Upper", ONCE_EINVAL);
    expect_open("postgres://postgres@127.0.0.1:1/x?once_schema=a-b", ONCE_EINVAL);
    expect_open("postgres://postgres@127.0.0.1:1/x?once_schema=a%20b", ONCE_EINVAL);
    expect_open("postgres://postgres@127.0.0.1:1/x?once_schema=a&once_schema=b", ONCE_EINVAL);
    expect_open("postgres://postgres@127.0.0.1:1/x?once_schema="
                "a123456789012345678901234567890123456789012345678901234567890123",
                ONCE_EINVAL); /* 64 */
}

/* An empty once_schema is refused like any other bad name (not passed on to
 * libpq, which would refuse it as an unknown parameter: ONCE_ESTORE). */
static void test_pg_empty_schema(void **state)
{
    (void)state;
    expect_open("postgres://postgres@127.0.0.1:1/x?once_schema=", ONCE_EINVAL);
    expect_open("postgres://postgres@127.0.0.1:1/x?sslmode=disable&once_schema=", ONCE_EINVAL);
}

static void test_memory_ok(void **state)
{
    (void)state;
    once_store *a = NULL, *b = NULL;
    th_assert_rc(once_store_open("sqlite::memory:", &a), 0);
    th_assert_rc(once_store_open("sqlite::memory:", &b), 0);
    th_assert_rc(once_store_ping(a), 0);
    /* two memory stores are private to each other */
    th_reserve_new(a, "s", "k", NULL, 1);
    th_reserve_new(b, "s", "k", NULL, 1);
    once_store_close(a);
    once_store_close(b);
}

static void test_missing_directory(void **state)
{
    dir_env *d = *state;
    expect_open("sqlite:/nonexistent-dir/x.db", ONCE_ESTORE);
    char url[256];
    snprintf(url, sizeof url, "sqlite:%s/no/such/dir/x.db", d->dir);
    expect_open(url, ONCE_ESTORE);
    /* nothing was created on the way */
    char p[256];
    snprintf(p, sizeof p, "%s/no", d->dir);
    struct stat sb;
    assert_int_not_equal(stat(p, &sb), 0);
}

static void test_path_is_directory(void **state)
{
    dir_env *d = *state;
    char url[256];
    snprintf(url, sizeof url, "sqlite:%s", d->dir);
    int rc = open_rc(url);
    if (rc >= 0)
        fail_msg("opening a directory: rc %d, want an error", rc);
    struct stat sb;
    assert_int_equal(stat(d->dir, &sb), 0);
    assert_true(S_ISDIR(sb.st_mode));
}

static void write_file(const char *path, const void *p, size_t n)
{
    FILE *f = fopen(path, "wb");
    assert_non_null(f);
    assert_int_equal(fwrite(p, 1, n, f), n);
    assert_int_equal(fclose(f), 0);
}

static void assert_file_is(const char *path, const uint8_t *want, size_t n)
{
    uint8_t *got = NULL;
    size_t len = th_read_file(path, &got);
    assert_int_equal(len, n);
    assert_memory_equal(got, want, n);
    free(got);
}

static void test_not_sqlite(void **state)
{
    dir_env *d = *state;
    char path[256], url[300];
    snprintf(path, sizeof path, "%s/text.db", d->dir);
    snprintf(url, sizeof url, "sqlite:%s", path);
    size_t n = 4096;
    uint8_t *text = malloc(n);
    assert_non_null(text);
    const char *line = "this is not a database, just some words on a line.\n";
    for (size_t i = 0; i < n; i++)
        text[i] = (uint8_t)line[i % strlen(line)];
    write_file(path, text, n);
    expect_open(url, ONCE_ENOTDB);
    assert_file_is(path, text, n);
    /* twice: still the same */
    expect_open(url, ONCE_ENOTDB);
    assert_file_is(path, text, n);
    free(text);
}

/* A file that is SQLite but written by a newer schema. */
static void test_newer_schema(void **state)
{
    dir_env *d = *state;
    char path[256], url[300];
    snprintf(path, sizeof path, "%s/newer.db", d->dir);
    snprintf(url, sizeof url, "sqlite:%s", path);
    sqlite3 *db = NULL;
    assert_int_equal(sqlite3_open(path, &db), SQLITE_OK);
    char *err = NULL;
    int rc = sqlite3_exec(db,
                          "CREATE TABLE actions(scope TEXT, key TEXT, future_col BLOB,"
                          " PRIMARY KEY(scope, key));"
                          "INSERT INTO actions VALUES('s','k',x'00ff');"
                          "PRAGMA user_version = 9999;",
                          NULL, NULL, &err);
    if (rc != SQLITE_OK)
        fail_msg("sqlite: %s", err ? err : "?");
    sqlite3_free(err);
    assert_int_equal(sqlite3_close(db), SQLITE_OK);

    uint8_t *before = NULL, *after = NULL;
    size_t n = th_read_file(path, &before);
    assert_true(n > 0);
    once_store *st = NULL;
    int rc1 = once_store_open(url, &st);
    char detail[512];
    snprintf(detail, sizeof detail, "%s", once_errdetail());
    if (rc1 == 0)
        once_store_close(st);
    size_t n2 = th_read_file(path, &after);
    int same = n2 == n && memcmp(before, after, n) == 0;
    free(before);
    free(after);
    if (rc1 != ONCE_ESCHEMA)
        fail_msg("user_version 9999 (application_id 0): rc %d (%s), want ONCE_ESCHEMA; detail: %s",
                 rc1, once_strerror(rc1), detail);
    assert_true(same);
    assert_true(strlen(detail) > 0);

    /* and sqlite still reads it as it was */
    assert_int_equal(sqlite3_open(path, &db), SQLITE_OK);
    sqlite3_stmt *stmt = NULL;
    assert_int_equal(sqlite3_prepare_v2(db, "PRAGMA user_version", -1, &stmt, NULL), SQLITE_OK);
    assert_int_equal(sqlite3_step(stmt), SQLITE_ROW);
    assert_int_equal(sqlite3_column_int(stmt, 0), 9999);
    sqlite3_finalize(stmt);
    sqlite3_close(db);
}

/* The same, stamped the way once stamps its own files (application_id
 * "ONCE", as src/store/sqlite_schema.h defines it) with a future version. */
static void test_newer_schema_stamped(void **state)
{
    dir_env *d = *state;
    char path[256], url[300];
    snprintf(path, sizeof path, "%s/newer2.db", d->dir);
    snprintf(url, sizeof url, "sqlite:%s", path);
    /* first a real once store, then bump its version from outside */
    once_store *st = NULL;
    th_assert_rc(once_store_open(url, &st), 0);
    th_reserve_new(st, "s", "k", NULL, 1);
    once_store_close(st);
    sqlite3 *db = NULL;
    assert_int_equal(sqlite3_open(path, &db), SQLITE_OK);
    assert_int_equal(sqlite3_exec(db,
                                  "PRAGMA wal_checkpoint(TRUNCATE); PRAGMA journal_mode = DELETE;"
                                  "PRAGMA user_version = 9999;",
                                  NULL, NULL, NULL),
                     SQLITE_OK);
    assert_int_equal(sqlite3_close(db), SQLITE_OK);

    uint8_t *before = NULL;
    size_t n = th_read_file(path, &before);
    assert_true(n > 0);
    expect_open(url, ONCE_ESCHEMA);
    assert_file_is(path, before, n);
    free(before);
}

/* An empty file is a new database: opened and initialised. */
static void test_empty_file_ok(void **state)
{
    dir_env *d = *state;
    char path[256], url[300];
    snprintf(path, sizeof path, "%s/empty.db", d->dir);
    snprintf(url, sizeof url, "sqlite:%s", path);
    write_file(path, "", 0);
    once_store *st = NULL;
    th_assert_rc(once_store_open(url, &st), 0);
    th_reserve_new(st, "s", "k", NULL, 1);
    once_store_close(st);
    th_assert_rc(once_store_open(url, &st), 0);
    assert_int_equal(th_state(st, "s", "k"), ONCE_STATE_PENDING);
    once_store_close(st);
}

/* A foreign SQLite database (user_version 0, other tables) is not silently
 * adopted or corrupted: either refused, or opened with its tables intact. */
static void test_foreign_sqlite(void **state)
{
    dir_env *d = *state;
    char path[256], url[300];
    snprintf(path, sizeof path, "%s/foreign.db", d->dir);
    snprintf(url, sizeof url, "sqlite:%s", path);
    sqlite3 *db = NULL;
    assert_int_equal(sqlite3_open(path, &db), SQLITE_OK);
    assert_int_equal(sqlite3_exec(db, "CREATE TABLE t(x); INSERT INTO t VALUES(42);", NULL, NULL, NULL),
                     SQLITE_OK);
    sqlite3_close(db);
    once_store *st = NULL;
    int rc = once_store_open(url, &st);
    once_store_close(st);
    assert_true(rc == 0 || rc == ONCE_ENOTDB || rc == ONCE_ESCHEMA);
    assert_int_equal(sqlite3_open(path, &db), SQLITE_OK);
    sqlite3_stmt *stmt = NULL;
    assert_int_equal(sqlite3_prepare_v2(db, "SELECT x FROM t", -1, &stmt, NULL), SQLITE_OK);
    assert_int_equal(sqlite3_step(stmt), SQLITE_ROW);
    assert_int_equal(sqlite3_column_int(stmt, 0), 42);
    sqlite3_finalize(stmt);
    sqlite3_close(db);
}

/* The unprivileged half of test_unreadable, in a process of its own (as
 * nobody when the test runs as root): a store of its own in dir opens (so
 * nothing but the file's mode is in the way), dir/locked.db does not. Its
 * exit status: 0 as expected, else what went wrong (said on stderr). */
static int unreadable_child(const char *dir)
{
    if (geteuid() == 0 || getuid() == 0) {
        fprintf(stderr, "unreadable child: still root\n");
        return 4;
    }
    char url[300];
    once_store *st = NULL;
    snprintf(url, sizeof url, "sqlite:%s/mine.db", dir);
    int rc = once_store_open(url, &st);
    if (rc != 0) {
        fprintf(stderr, "unreadable child: %s: rc %d (%s): %s\n", url, rc, once_strerror(rc), once_errdetail());
        return 2;
    }
    once_store_close(st);
    snprintf(url, sizeof url, "sqlite:%s/locked.db", dir);
    rc = once_store_open(url, &st);
    if (rc >= 0) {
        once_store_close(st);
        fprintf(stderr, "unreadable child: %s (mode 000) opened: rc %d\n", url, rc);
        return 3;
    }
    if (strlen(once_errdetail()) == 0) {
        fprintf(stderr, "unreadable child: rc %d (%s) without a detail\n", rc, once_strerror(rc));
        return 5;
    }
    fprintf(stderr, "unreadable child (uid %d): refused as it should be: rc %d (%s): %s\n", (int)getuid(), rc,
            once_strerror(rc), once_errdetail());
    return 0;
}

/* Runs unreadable_child(dir) as nobody: fork, drop to nobody (groups,
 * group, then user), and execute this very binary (opened before the drop,
 * so the path to it need not be nobody's to walk). Fails the test unless
 * the child exits 0. */
static void run_as_nobody(const char *dir)
{
    struct passwd *pw = getpwnam("nobody");
    if (!pw)
        fail_msg("running as root, and there is no user nobody to drop to");
    uid_t uid = pw->pw_uid;
    struct group *gr = getgrnam("nogroup");
    gid_t gid = gr ? gr->gr_gid : pw->pw_gid;
    int exe = open("/proc/self/exe", O_RDONLY | O_CLOEXEC);
    assert_true(exe >= 0);
    char dirarg[128];
    snprintf(dirarg, sizeof dirarg, "%s", dir);
    char name[] = "test_open_errors", flag[] = UNREADABLE_CHILD;
    char *argv[] = {name, flag, dirarg, NULL};
    extern char **environ;
    fflush(stdout);
    fflush(stderr);
    pid_t pid = fork();
    assert_true(pid >= 0);
    if (pid == 0) {
        /* Async-signal-safe calls only until the exec. */
        if (setgroups(0, NULL) != 0 || setgid(gid) != 0 || setuid(uid) != 0)
            _exit(6);
        fexecve(exe, argv, environ);
        _exit(7);
    }
    close(exe);
    int status = 0;
    while (waitpid(pid, &status, 0) < 0)
        assert_int_equal(errno, EINTR);
    if (!WIFEXITED(status) || WEXITSTATUS(status) != 0)
        fail_msg("the unprivileged child (uid %d) %s %d (2: its own store did not open, 3: the unreadable one did, "
                 "6: cannot drop to nobody, 7: cannot execute)",
                 (int)uid, WIFEXITED(status) ? "exited" : "died of signal",
                 WIFEXITED(status) ? WEXITSTATUS(status) : WTERMSIG(status));
}

/* A store file its user cannot read is refused (not replaced, not opened
 * empty), and is left as it was. As root, the refusal is tested as nobody. */
static void test_unreadable(void **state)
{
    dir_env *d = *state;
    char path[256], url[300];
    snprintf(path, sizeof path, "%s/locked.db", d->dir);
    snprintf(url, sizeof url, "sqlite:%s", path);
    once_store *st = NULL;
    th_assert_rc(once_store_open(url, &st), 0);
    th_reserve_new(st, "s", "k", NULL, 1);
    once_store_close(st);
    uint8_t *before = NULL;
    size_t n = th_read_file(path, &before);
    assert_true(n > 0);
    assert_int_equal(chmod(path, 0), 0);
    if (geteuid() == 0) {
        /* nobody walks and writes the directory (its own store there must
         * open): only the file's mode stands in its way. */
        assert_int_equal(chmod(d->dir, 0777), 0);
        run_as_nobody(d->dir);
        print_message("test_unreadable: refused to nobody (run as root, re-executed)\n");
    } else {
        int rc = open_rc(url);
        assert_true(rc < 0);
    }
    assert_int_equal(chmod(path, 0600), 0);
    assert_file_is(path, before, n);
    free(before);
}

#define D(f) cmocka_unit_test_setup_teardown(f, setup_dir, teardown_dir)

int main(int argc, char **argv)
{
    if (argc == 3 && strcmp(argv[1], UNREADABLE_CHILD) == 0)
        return unreadable_child(argv[2]);
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_bad_urls),
        cmocka_unit_test(test_pg_empty_schema),
        cmocka_unit_test(test_memory_ok),
        D(test_missing_directory),
        D(test_path_is_directory),
        D(test_not_sqlite),
        D(test_newer_schema),
        D(test_newer_schema_stamped),
        D(test_empty_file_ok),
        D(test_foreign_sqlite),
        D(test_unreadable),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
