/*
 * mcp_stdio.c — a stdio MCP server run by `once serve` (mcp_stdio.h).
 *
 * One thread per server owns the process: it spawns it, says initialize
 * (once is the server's only client), reads its stdout line by line
 * (newline-delimited JSON-RPC, MCP's stdio transport) and its stderr (into
 * the log), times calls out, and respawns it with back-off when it exits.
 * Other threads send through mcp_stdio_call; the ids they send under are
 * once's own, so that the requests of many agent sessions never collide,
 * and so are progress tokens. Writing and reading use separate locks: a
 * server blocked writing its stdout must never stop the reader. A request
 * that finds the server (re)starting waits for it on a list the bridge
 * keeps (mcp_stdio_when_ready), not on a thread.
 */
#include "server/mcp/mcp_stdio.h"

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include "common/buf.h"
#include "common/check.h"
#include "common/clock.h"
#include "once/once.h"
#include "server/core/log.h"

#define BACKOFF_MIN_MS 500
#define BACKOFF_MAX_MS 30000
#define INIT_TIMEOUT_MS 30000
#define LINE_MAX_BYTES (64u << 20) /* a longer message is refused, and the server restarted */
#define PROTOCOL_VERSION "2025-06-18"
#define WRITE_WAIT_MS 5000 /* a server that reads nothing for this long is broken */

/* A request waiting for the server to be ready (mcp_stdio_when_ready). */
typedef struct ready_waiter {
    struct ready_waiter *next;
    int64_t deadline; /* clock_mono_ms */
    mcp_stdio_ready_fn fn;
    void *ctx;
} ready_waiter;

typedef struct pending {
    struct pending *next;
    json_int_t id;        /* once's, on the wire */
    json_t *orig_id;      /* the caller's */
    json_t *orig_token;   /* the caller's progress token, or NULL */
    int64_t deadline;     /* clock_mono_ms */
    int writing;          /* its write has not ended: the timeout waits for it (a call never
                             written must not end as "sent, no answer") */
    mcp_stdio_done_fn done;
    mcp_stdio_note_fn note;
    void *ctx;
} pending;

/* The bridge thread (thread) owns the process: only it spawns, reaps and
 * reads it (pid, out_fd, err_fd, the lines, the back-off). The pending table
 * is shared under mu: callers add to it; an entry leaves it once, under mu,
 * and whoever takes it ends it — the bridge by running its done (answer,
 * timeout, the server's end, the stop), or the caller when not a byte was
 * written (then done never runs). So each done runs at most once. */
struct mcp_stdio {
    const upstream_cfg *up;
    mcp_tools *tools;
    pthread_t thread;
    int started;
    pthread_mutex_t mu;  /* what follows, to the write lock */
    int stopping;
    pid_t pid;           /* 0: not running */
    int ready;           /* initialized: calls are taken */
    int ever_ready;      /* it was ready once since the start (readiness) */
    ready_waiter *waiters;
    json_t *init_result;
    json_int_t init_id;  /* once's initialize in flight, 0 none */
    int64_t init_deadline;
    pending *pending;
    json_int_t next_id;
    pthread_mutex_t wmu; /* writes to the server's stdin */
    int in_fd;
    /* the thread's own */
    int out_fd, err_fd;
    int wake[2];
    buf out_line, err_line;
    int64_t restart_at;
    int64_t backoff_ms;
    const char *broken;  /* why the server must be restarted (it refused initialize, or stopped
                            reading mid-message), under mu; the bridge acts on it */
};

/* ---- writing ---------------------------------------------------------------------- */

static void close_fd(int *fd)
{
    if (*fd >= 0)
        close(*fd);
    *fd = -1;
}

#ifndef NDEBUG
/* Is a call under once's id listed (under mu)? For the assertions: ids are
 * unique, so an answer finds one call at most. */
static int pending_listed(const mcp_stdio *s, json_int_t id)
{
    for (const pending *p = s->pending; p; p = p->next)
        if (p->id == id)
            return 1;
    return 0;
}
#endif


/* Asks the bridge to restart the server (lock order: wmu, then mu); no
 * call is taken meanwhile. */
static void bridge_restart(mcp_stdio *s, const char *why)
{
    pthread_mutex_lock(&s->mu);
    s->broken = why;
    s->ready = 0;
    pthread_mutex_unlock(&s->mu);
    ssize_t w = write(s->wake[1], "x", 1);
    (void)w;
}

/* Writes msg and a newline, waiting at most WRITE_WAIT_MS for a server
 * that does not read its stdin (the pipe is non-blocking: no thread, the
 * bridge least of all, may hang on it). 1 all written, 0 nothing written,
 * -1 part: the stream is then broken mid-message, so stdin is closed and
 * the server, at its end of input, exits and is restarted. A server whose
 * input is closed (EPIPE: it died, and the bridge may not have seen it
 * yet) is restarted too: it takes no calls, so callers wait for it. */
static int write_msg(mcp_stdio *s, const json_t *msg)
{
    char *text = json_dumps(msg, JSON_COMPACT);
    if (!text)
        return 0;
    size_t len = strlen(text), off = 0;
    int gone = 0; /* the server closed its input: it is ending, or cannot be spoken to */
    int64_t deadline = clock_mono_ms() + WRITE_WAIT_MS;
    pthread_mutex_lock(&s->wmu);
    int fd = s->in_fd;
    while (fd >= 0 && off <= len) {
        const char *p = off < len ? text + off : "\n";
        size_t n = off < len ? len - off : 1;
        ssize_t w = write(fd, p, n);
        if (w < 0 && errno == EINTR)
            continue;
        if (w < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
            int64_t left = deadline - clock_mono_ms();
            if (left <= 0)
                break;
            struct pollfd pf = {fd, POLLOUT, 0};
            poll(&pf, 1, left > 1000 ? 1000 : (int)left);
            continue;
        }
        if (w <= 0) {
            gone = w < 0 && errno == EPIPE;
            break;
        }
        off += (size_t)w;
    }
    int broken = (off > 0 && off <= len) || gone;
    if (broken)
        close_fd(&s->in_fd);
    pthread_mutex_unlock(&s->wmu);
    if (broken)
        bridge_restart(s, gone ? "closed its input" : "stopped reading its input mid-message");
    free(text);
    return off > len ? 1 : off == 0 ? 0 : -1;
}

/* ---- the process ------------------------------------------------------------------- */

/* The child's side of spawn, between fork and exec: async-signal-safe
 * calls only (another thread may have held malloc's lock at the fork).
 * The server must end when once ends, however it ends (SIGKILL
 * included): the kernel sends it SIGKILL when the thread that forked it,
 * the bridge, which lives as long as the server is wanted, exits — and if
 * once died before prctl took, getppid() is no longer parent. The signal
 * mask and SIGPIPE's SIG_IGN are once's, not the server's (a blocked
 * SIGTERM would make every stop wait for the SIGKILL). report (close on
 * exec) carries exec's errno back. Never returns. */
static void child_exec(char **argv, int in, int out, int err, int report, pid_t parent, const sigset_t *none)
{
    if (prctl(PR_SET_PDEATHSIG, SIGKILL) < 0 || getppid() != parent)
        _exit(127);
    if (dup2(in, 0) < 0 || dup2(out, 1) < 0 || dup2(err, 2) < 0 || dup2(report, 3) < 0 ||
        fcntl(3, F_SETFD, FD_CLOEXEC) < 0 || close_range(4, ~0U, 0) < 0)
        _exit(127);
    sigprocmask(SIG_SETMASK, none, NULL);
    signal(SIGPIPE, SIG_DFL);
    execvp(argv[0], argv);
    int e = errno;
    ssize_t w = write(3, &e, sizeof e);
    (void)w;
    _exit(127);
}

/* Runs up's command with its stdin, stdout and stderr on pipes to once.
 * On the bridge's thread only: the server's parent-death signal is tied
 * to it (child_exec). 0, or -1 (logged). */
static int spawn(mcp_stdio *s)
{
    const upstream_cfg *up = s->up;
    int in[2] = {-1, -1}, out[2] = {-1, -1}, err[2] = {-1, -1}, report[2] = {-1, -1};
    int *fds[] = {&in[0], &in[1], &out[0], &out[1], &err[0], &err[1], &report[0], &report[1]};
    char **argv = calloc(up->ncommand + 1, sizeof *argv);
    int rc = -1;
    if (!argv || pipe2(in, O_CLOEXEC) < 0 || pipe2(out, O_CLOEXEC) < 0 || pipe2(err, O_CLOEXEC) < 0 ||
        pipe2(report, O_CLOEXEC) < 0) {
        log_event("error", "mcp %s: cannot start '%s': %s", up->name, up->command[0],
                  argv ? strerror(errno) : "out of memory");
        goto out;
    }
    for (size_t i = 0; i < up->ncommand; i++)
        argv[i] = up->command[i];
    sigset_t none;
    sigemptyset(&none);
    ONCE_ASSERT_THREAD(s->thread); /* the parent-death signal is the bridge's */
    pid_t parent = getpid();
    pid_t pid = fork();
    if (pid < 0) {
        log_event("error", "mcp %s: cannot start '%s': fork: %s", up->name, argv[0], strerror(errno));
        goto out;
    }
    if (pid == 0)
        child_exec(argv, in[0], out[1], err[1], report[1], parent, &none);
    close_fd(&report[1]);
    int e = 0;
    ssize_t n;
    do
        n = read(report[0], &e, sizeof e); /* 0: exec'd (the pipe closed on exec) */
    while (n < 0 && errno == EINTR);
    if (n > 0) {
        waitpid(pid, NULL, 0);
        log_event("error", "mcp %s: cannot start '%s': %s", up->name, argv[0], strerror(e));
        goto out;
    }
    pthread_mutex_lock(&s->mu);
    s->pid = pid;
    pthread_mutex_unlock(&s->mu);
    pthread_mutex_lock(&s->wmu);
    fcntl(in[1], F_SETFL, O_NONBLOCK);
    s->in_fd = in[1];
    pthread_mutex_unlock(&s->wmu);
    in[1] = -1;
    s->out_fd = out[0];
    s->err_fd = err[0];
    out[0] = err[0] = -1;
    fcntl(s->out_fd, F_SETFL, O_NONBLOCK);
    fcntl(s->err_fd, F_SETFL, O_NONBLOCK);
    log_event("info", "mcp %s: started '%s' (pid %d)", up->name, argv[0], (int)pid);
    rc = 0;
out:
    for (size_t i = 0; i < sizeof fds / sizeof fds[0]; i++)
        close_fd(fds[i]);
    free(argv);
    return rc;
}

/* ---- waiting for the server ------------------------------------------------------------- */

/* Takes the waiters (all, or those whose deadline passed by now) off the
 * list, under mu; *next gets the earliest deadline left (unchanged if
 * none). */
static ready_waiter *take_waiters(mcp_stdio *s, int all, int64_t now, int64_t *next)
{
    ready_waiter *taken = NULL;
    for (ready_waiter **pp = &s->waiters; *pp;) {
        ready_waiter *w = *pp;
        if (all || w->deadline <= now) {
            *pp = w->next;
            w->next = taken;
            taken = w;
            continue;
        }
        if (next && w->deadline < *next)
            *next = w->deadline;
        pp = &w->next;
    }
    return taken;
}

/* Ends the waits taken, without mu: each fn runs once. */
static void end_waits(ready_waiter *w, mcp_stdio_readiness how)
{
    while (w) {
        ONCE_ASSERT(w->fn != NULL);
        ready_waiter *next = w->next;
        w->fn(w->ctx, how);
        free(w);
        w = next;
    }
}

/* Says initialize, as a client; the answer makes the server ready. */
static void say_initialize(mcp_stdio *s)
{
    ONCE_ASSERT_THREAD(s->thread);
    pthread_mutex_lock(&s->mu);
    json_int_t id = ++s->next_id;
    s->init_id = id;
    s->init_deadline = clock_mono_ms() + INIT_TIMEOUT_MS;
    pthread_mutex_unlock(&s->mu);
    json_t *msg = json_pack("{s:s, s:I, s:s, s:{s:s, s:{}, s:{s:s, s:s}}}", "jsonrpc", "2.0", "id", id, "method",
                            "initialize", "params", "protocolVersion", PROTOCOL_VERSION, "capabilities",
                            "clientInfo", "name", "once", "version", ONCE_VERSION);
    if (!msg || write_msg(s, msg) != 1)
        log_event("error", "mcp %s: cannot send initialize", s->up->name);
    json_decref(msg);
}

/* Ends every call in flight: sent, no answer. Called without mu. */
static void fail_pending(mcp_stdio *s, const char *why)
{
    ONCE_ASSERT_THREAD(s->thread);
    pthread_mutex_lock(&s->mu);
    pending *p = s->pending;
    s->pending = NULL;
    pthread_mutex_unlock(&s->mu);
    while (p) {
        pending *next = p->next;
        p->done(p->ctx, NULL, 1, why);
        json_decref(p->orig_id);
        json_decref(p->orig_token);
        free(p);
        p = next;
    }
}

/* The server is gone (or is made to go): reaped, its calls failed, a
 * restart planned. */
static void child_ended(mcp_stdio *s, const char *cause)
{
    ONCE_ASSERT_THREAD(s->thread);
    pthread_mutex_lock(&s->mu);
    pid_t pid = s->pid;
    int stopping = s->stopping;
    s->pid = 0;
    s->ready = 0;
    s->init_id = 0;
    json_decref(s->init_result);
    s->init_result = NULL;
    pthread_mutex_unlock(&s->mu);
    /* Asked to go before the write lock is taken: a writer waiting on its
     * stdin then fails at once. */
    if (pid > 0)
        kill(pid, SIGTERM);
    pthread_mutex_lock(&s->wmu);
    close_fd(&s->in_fd);
    pthread_mutex_unlock(&s->wmu);
    close_fd(&s->out_fd);
    close_fd(&s->err_fd);
    s->out_line.len = s->err_line.len = 0;
    int status = 0;
    if (pid > 0) {
        for (int i = 0; i < 40 && waitpid(pid, &status, WNOHANG) == 0; i++)
            usleep(50000);
        if (waitpid(pid, &status, WNOHANG) == 0) {
            kill(pid, SIGKILL);
            waitpid(pid, &status, 0);
        }
    }
    char why[200];
    if (WIFEXITED(status))
        snprintf(why, sizeof why, "the stdio MCP server %s (exit status %d)", cause, WEXITSTATUS(status));
    else
        snprintf(why, sizeof why, "the stdio MCP server %s (signal %d)", cause,
                 WIFSIGNALED(status) ? WTERMSIG(status) : 0);
    fail_pending(s, why);
    if (!stopping)
        log_event("warn", "mcp %s: %s; restarting in %lld ms", s->up->name, why, (long long)s->backoff_ms);
    s->restart_at = clock_mono_ms() + s->backoff_ms;
    s->backoff_ms = s->backoff_ms * 2 > BACKOFF_MAX_MS ? BACKOFF_MAX_MS : s->backoff_ms * 2;
}

/* ---- reading -------------------------------------------------------------------------- */

static pending *take_pending(mcp_stdio *s, json_int_t id)
{
    pthread_mutex_lock(&s->mu);
    pending **pp = &s->pending;
    while (*pp && (*pp)->id != id)
        pp = &(*pp)->next;
    pending *p = *pp;
    if (p)
        *pp = p->next;
    ONCE_ASSERT(!pending_listed(s, id)); /* taken once: no other entry answers to id */
    pthread_mutex_unlock(&s->mu);
    return p;
}

/* The answer to once's initialize: the server is ready once it was told
 * initialized (MCP: no request before that), and what waited for it goes. */
static void on_initialized(mcp_stdio *s, json_t *msg)
{
    ONCE_ASSERT_THREAD(s->thread);
    json_t *result = json_object_get(msg, "result");
    if (!json_is_object(result)) {
        log_event("error", "mcp %s: the server refused initialize", s->up->name);
        bridge_restart(s, "refused initialize"); /* with back-off */
        return;
    }
    json_t *n = json_pack("{s:s, s:s}", "jsonrpc", "2.0", "method", "notifications/initialized");
    if (n)
        write_msg(s, n);
    json_decref(n);
    pthread_mutex_lock(&s->mu);
    json_decref(s->init_result);
    s->init_result = json_incref(result);
    /* Not when the write above found the server gone: it is restarting. */
    s->ready = !s->broken;
    s->ever_ready |= s->ready;
    int ready = s->ready;
    ready_waiter *w = ready ? take_waiters(s, 1, 0, NULL) : NULL;
    pthread_mutex_unlock(&s->mu);
    if (!ready)
        return;
    s->backoff_ms = BACKOFF_MIN_MS;
    log_event("info", "mcp %s: initialized", s->up->name);
    end_waits(w, MCP_STDIO_READY);
}

static void on_response(mcp_stdio *s, json_t *msg)
{
    json_int_t id = json_integer_value(json_object_get(msg, "id"));
    pthread_mutex_lock(&s->mu);
    int init = s->init_id && id == s->init_id;
    if (init)
        s->init_id = 0;
    pthread_mutex_unlock(&s->mu);
    if (init) {
        on_initialized(s, msg);
        return;
    }
    pending *p = take_pending(s, id);
    if (!p)
        return; /* timed out already: the late answer is dropped */
    json_object_set(msg, "id", p->orig_id);
    p->done(p->ctx, json_incref(msg), 1, NULL);
    json_decref(p->orig_id);
    json_decref(p->orig_token);
    free(p);
}

/* Progress is routed by once's token (once-ID) to the call it belongs to,
 * under the caller's token. */
static void on_progress(mcp_stdio *s, json_t *msg)
{
    json_t *params = json_object_get(msg, "params");
    const char *tok = json_string_value(json_object_get(params, "progressToken"));
    if (!tok || strncmp(tok, "once-", 5) != 0)
        return;
    json_int_t id = strtoll(tok + 5, NULL, 10);
    pthread_mutex_lock(&s->mu);
    pending *p = s->pending;
    while (p && p->id != id)
        p = p->next;
    if (p && p->note && p->orig_token) {
        json_object_set(params, "progressToken", p->orig_token);
        p->note(p->ctx, msg); /* quick, by contract: under mu, so p stays */
    }
    pthread_mutex_unlock(&s->mu);
}

/* A request from the server: once is its only client and answers ping;
 * other requests (sampling, elicitation, roots) cannot be routed to one of
 * the many agents behind it. */
static void on_server_request(mcp_stdio *s, json_t *msg)
{
    const char *method = json_string_value(json_object_get(msg, "method"));
    json_t *a = strcmp(method, "ping") == 0
                    ? json_pack("{s:s, s:O, s:{}}", "jsonrpc", "2.0", "id", json_object_get(msg, "id"), "result")
                    : json_pack("{s:s, s:O, s:{s:i, s:s}}", "jsonrpc", "2.0", "id", json_object_get(msg, "id"),
                                "error", "code", -32601, "message",
                                "once relays no server requests from a stdio MCP server");
    if (a)
        write_msg(s, a);
    json_decref(a);
}

static void on_line(mcp_stdio *s, const char *line, size_t len)
{
    ONCE_ASSERT_THREAD(s->thread); /* the server's stdout is the bridge's to read */
    json_t *msg = json_loadb(line, len, 0, NULL);
    const char *method = json_string_value(json_object_get(msg, "method"));
    if (!json_is_object(msg)) {
        log_event("warn", "mcp %s: the server wrote a line that is not a JSON-RPC message", s->up->name);
    } else if (!method) {
        on_response(s, msg);
    } else if (json_object_get(msg, "id")) {
        on_server_request(s, msg);
    } else if (strcmp(method, "notifications/progress") == 0) {
        on_progress(s, msg);
    } else if (strcmp(method, "notifications/tools/list_changed") == 0) {
        mcp_tools_forget(s->tools);
    }
    json_decref(msg);
}

/* Reads what is there: 0, or -1 at the end (or a broken server). */
static int read_lines(mcp_stdio *s, int fd, buf *line, int is_err)
{
    char chunk[16384];
    for (;;) {
        ssize_t n = read(fd, chunk, sizeof chunk);
        if (n < 0 && errno == EINTR)
            continue;
        if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK))
            return 0;
        if (n <= 0)
            return -1;
        for (ssize_t i = 0; i < n;) {
            char *nl = memchr(chunk + i, '\n', (size_t)(n - i));
            size_t k = nl ? (size_t)(nl - (chunk + i)) : (size_t)(n - i);
            if (buf_append(line, chunk + i, k, LINE_MAX_BYTES) < 0) {
                log_event("error", "mcp %s: a message past %u bytes (or out of memory)", s->up->name, LINE_MAX_BYTES);
                return -1;
            }
            i += (ssize_t)k;
            if (!nl)
                break;
            i++;
            if (is_err)
                log_event("info", "mcp %s stderr: %.*s", s->up->name, (int)(line->len > 2000 ? 2000 : line->len),
                          line->len ? (const char *)line->data : "");
            else if (line->len)
                on_line(s, (const char *)line->data, line->len);
            line->len = 0;
        }
    }
}

/* Calls past their timeout end (sent, no answer), and so do waits for the
 * server past theirs; an initialize that never came back restarts the
 * server. The next deadline, or INT64_MAX. */
static int64_t expire(mcp_stdio *s, int64_t now)
{
    pending *late = NULL;
    int64_t next = INT64_MAX;
    ONCE_ASSERT_THREAD(s->thread);
    pthread_mutex_lock(&s->mu);
    for (pending **pp = &s->pending; *pp;) {
        pending *p = *pp;
        if (p->deadline <= now && !p->writing) {
            *pp = p->next;
            ONCE_ASSERT(!pending_listed(s, p->id)); /* ended here only */
            p->next = late;
            late = p;
            continue;
        }
        if (p->deadline < next)
            next = p->deadline;
        pp = &p->next;
    }
    int init_late = s->init_id && s->init_deadline <= now;
    if (s->init_id && s->init_deadline < next)
        next = s->init_deadline;
    ready_waiter *late_waits = take_waiters(s, 0, now, &next);
    pthread_mutex_unlock(&s->mu);
    end_waits(late_waits, MCP_STDIO_LATE);
    while (late) {
        pending *next_p = late->next;
        late->done(late->ctx, NULL, 1, "the stdio MCP server did not answer within the timeout");
        json_decref(late->orig_id);
        json_decref(late->orig_token);
        free(late);
        late = next_p;
    }
    if (init_late)
        child_ended(s, "did not answer initialize");
    return next;
}

static void *bridge_main(void *arg)
{
    mcp_stdio *s = arg;
    pthread_setname_np(pthread_self(), "once-mcp-stdio");
    for (;;) {
        int64_t now = clock_mono_ms();
        pthread_mutex_lock(&s->mu);
        int stopping = s->stopping, running = s->pid > 0;
        pthread_mutex_unlock(&s->mu);
        if (stopping)
            break;
        if (!running && now >= s->restart_at) {
            if (spawn(s) == 0) {
                say_initialize(s);
            } else {
                s->restart_at = now + s->backoff_ms;
                s->backoff_ms = s->backoff_ms * 2 > BACKOFF_MAX_MS ? BACKOFF_MAX_MS : s->backoff_ms * 2;
            }
        }
        int64_t next = expire(s, now);
        if (s->out_fd < 0 && s->restart_at < next)
            next = s->restart_at;
        int timeout = next == INT64_MAX ? 1000 : next <= now ? 0 : next - now > 1000 ? 1000 : (int)(next - now);
        struct pollfd fds[3] = {{s->wake[0], POLLIN, 0}, {s->out_fd, POLLIN, 0}, {s->err_fd, POLLIN, 0}};
        if (poll(fds, 3, timeout) < 0 && errno != EINTR)
            break;
        if (fds[0].revents) {
            char b[64];
            while (read(s->wake[0], b, sizeof b) > 0) {
            }
        }
        if (s->err_fd >= 0 && fds[2].revents && read_lines(s, s->err_fd, &s->err_line, 1) < 0)
            close_fd(&s->err_fd);
        if (s->out_fd >= 0 && fds[1].revents && read_lines(s, s->out_fd, &s->out_line, 0) < 0)
            child_ended(s, "exited");
        pthread_mutex_lock(&s->mu);
        const char *broken = s->broken;
        s->broken = NULL;
        pthread_mutex_unlock(&s->mu);
        if (broken && s->out_fd >= 0)
            child_ended(s, broken);
    }
    if (s->out_fd >= 0 || s->pid > 0)
        child_ended(s, "was stopped");
    fail_pending(s, "the gateway is stopping");
#ifndef NDEBUG
    /* Stopping: mcp_stdio_call adds no more, so no done is left to run. */
    pthread_mutex_lock(&s->mu);
    ONCE_ASSERT(s->stopping && !s->pending && s->pid == 0);
    pthread_mutex_unlock(&s->mu);
#endif
    /* No wait starts once stopping is set (mcp_stdio_when_ready). */
    pthread_mutex_lock(&s->mu);
    ready_waiter *w = take_waiters(s, 1, 0, NULL);
    pthread_mutex_unlock(&s->mu);
    end_waits(w, MCP_STDIO_STOPPED);
    return NULL;
}

/* ---- the API ------------------------------------------------------------------------- */

int mcp_stdio_start(const upstream_cfg *up, mcp_tools *tools, mcp_stdio **out)
{
    mcp_stdio *s = calloc(1, sizeof *s);
    *out = NULL;
    if (!s)
        return -1;
    s->up = up;
    s->tools = tools;
    s->in_fd = s->out_fd = s->err_fd = -1;
    s->wake[0] = s->wake[1] = -1;
    s->backoff_ms = BACKOFF_MIN_MS;
    pthread_mutex_init(&s->mu, NULL);
    pthread_mutex_init(&s->wmu, NULL);
    if (pipe2(s->wake, O_CLOEXEC | O_NONBLOCK) < 0 || pthread_create(&s->thread, NULL, bridge_main, s) != 0) {
        log_event("error", "mcp %s: cannot start the stdio bridge", up->name);
        mcp_stdio_free(s);
        return -1;
    }
    s->started = 1;
    *out = s;
    return 0;
}

void mcp_stdio_stop(mcp_stdio *s)
{
    if (!s || !s->started)
        return;
    pthread_mutex_lock(&s->mu);
    s->stopping = 1;
    s->ready = 0;
    pthread_mutex_unlock(&s->mu);
    ssize_t w = write(s->wake[1], "x", 1);
    (void)w;
    pthread_join(s->thread, NULL);
    s->started = 0;
}

void mcp_stdio_free(mcp_stdio *s)
{
    if (!s)
        return;
    mcp_stdio_stop(s);
    close_fd(&s->wake[0]);
    close_fd(&s->wake[1]);
    buf_free(&s->out_line);
    buf_free(&s->err_line);
    json_decref(s->init_result);
    pthread_mutex_destroy(&s->mu);
    pthread_mutex_destroy(&s->wmu);
    free(s);
}

int mcp_stdio_call(mcp_stdio *s, const json_t *msg, int64_t timeout_ms, mcp_stdio_done_fn done,
                   mcp_stdio_note_fn note, void *ctx, char *why, size_t whylen)
{
    json_t *wire = json_deep_copy(msg);
    pending *p = calloc(1, sizeof *p);
    if (!wire || !p) {
        json_decref(wire);
        free(p);
        snprintf(why, whylen, "out of memory");
        return -1;
    }
    pthread_mutex_lock(&s->mu);
    if (!s->ready || s->stopping) {
        int stopping = s->stopping;
        pthread_mutex_unlock(&s->mu);
        json_decref(wire);
        free(p);
        snprintf(why, whylen, "the stdio MCP server '%s' is %s", s->up->name,
                 stopping ? "stopping" : "starting or restarting");
        return stopping ? -1 : MCP_STDIO_NOT_READY;
    }
    json_int_t id = p->id = ++s->next_id;
    ONCE_ASSERT(!pending_listed(s, id)); /* ids are never reused */
    p->orig_id = json_incref(json_object_get(msg, "id"));
    p->deadline = clock_mono_ms() + timeout_ms;
    p->done = done;
    p->note = note;
    p->ctx = ctx;
    json_t *meta = json_object_get(json_object_get(wire, "params"), "_meta");
    json_t *tok = json_object_get(meta, "progressToken");
    char token[32];
    snprintf(token, sizeof token, "once-%lld", (long long)p->id);
    p->orig_token = json_incref(tok);
    /* Sent under the caller's id or token, an answer would never find its
     * call: out of memory here is nothing sent. */
    if (json_object_set_new(wire, "id", json_integer(p->id)) < 0 ||
        (tok && json_object_set_new(meta, "progressToken", json_string(token)) < 0)) {
        pthread_mutex_unlock(&s->mu);
        json_decref(wire);
        json_decref(p->orig_id);
        json_decref(p->orig_token);
        free(p);
        snprintf(why, whylen, "out of memory");
        return -1;
    }
    p->writing = 1;
    p->next = s->pending;
    s->pending = p;
    pthread_mutex_unlock(&s->mu);
    int w = write_msg(s, wire);
    json_decref(wire);
    pthread_mutex_lock(&s->mu);
    for (pending *q = s->pending; q; q = q->next)
        if (q->id == id)
            q->writing = 0; /* still listed: its answer or its timeout ends it */
    pthread_mutex_unlock(&s->mu);
    pending *mine = w == 0 ? take_pending(s, id) : NULL;
    if (mine) {
        p = mine;
        /* Not a byte reached the server: nothing was sent. A server found
         * gone is being restarted: the caller may wait for it. */
        json_decref(p->orig_id);
        json_decref(p->orig_token);
        free(p);
        pthread_mutex_lock(&s->mu);
        int again = !s->ready && !s->stopping;
        pthread_mutex_unlock(&s->mu);
        snprintf(why, whylen, "the stdio MCP server '%s' %s", s->up->name,
                 again ? "is restarting" : "could not be written to");
        return again ? MCP_STDIO_NOT_READY : -1;
    }
    /* Written, or partly: its answer, its timeout or the server's end
     * ends it. */
    return 0;
}

int mcp_stdio_notify(mcp_stdio *s, const json_t *msg)
{
    pthread_mutex_lock(&s->mu);
    int ready = s->ready;
    pthread_mutex_unlock(&s->mu);
    return ready && write_msg(s, msg) == 1 ? 0 : -1;
}

json_t *mcp_stdio_init_result(mcp_stdio *s)
{
    pthread_mutex_lock(&s->mu);
    json_t *r = s->ready && s->init_result ? json_deep_copy(s->init_result) : NULL;
    pthread_mutex_unlock(&s->mu);
    return r;
}

int mcp_stdio_when_ready(mcp_stdio *s, int64_t deadline, mcp_stdio_ready_fn fn, void *ctx)
{
    ready_waiter *w = malloc(sizeof *w);
    pthread_mutex_lock(&s->mu);
    int rc = s->ready ? 1 : s->stopping || !w || deadline <= clock_mono_ms() ? -1 : 0;
    if (rc == 0) {
        *w = (ready_waiter){.next = s->waiters, .deadline = deadline, .fn = fn, .ctx = ctx};
        s->waiters = w;
    }
    pthread_mutex_unlock(&s->mu);
    if (rc != 0) {
        free(w);
        return rc;
    }
    ssize_t n = write(s->wake[1], "x", 1); /* the bridge's next deadline may be this one */
    (void)n;
    return 0;
}

int mcp_stdio_started(mcp_stdio *s)
{
    pthread_mutex_lock(&s->mu);
    int r = s->ever_ready;
    pthread_mutex_unlock(&s->mu);
    return r;
}
