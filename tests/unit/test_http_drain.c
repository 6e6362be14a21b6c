/*
 * test_http_drain.c — the front's closed door at shutdown (guard_refuse_all),
 * on real daemons started by http_listen. The regression here: the drain
 * used MHD_quiesce_daemon, which races the thread pool's epoll loops and
 * aborts the process ("Failed to remove listen FD from epoll set"); under a
 * churn of connections that took between a dozen and a thousand stops, and
 * once a run of the security suite. Now the door is the accept policy: the
 * listen socket stays with the daemon until MHD_stop_daemon.
 */
#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <poll.h>
#include <pthread.h>
#include <sched.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cmocka.h>

#include "common/clock.h"
#include "server/core/services.h"
#include "server/front/guard.h"
#include "server/front/http.h"

#define CHURNERS 8
#define ROUNDS 3000
#define ROUNDS_MS 30000 /* the rounds stop here, however many are left */

/* A front on 127.0.0.1 with an ephemeral port: its own guard, server and
 * listener, as server.c makes them. */
typedef struct front {
    guard *g;
    server srv;
    http_listener l;
    struct MHD_Daemon *d;
    int port;
} front;

static void front_start(front *f, int threads)
{
    memset(f, 0, sizeof *f);
    assert_int_equal(guard_start(0, 0, 10000, http_idle_ms(), &f->g), 0);
    f->srv.guard = f->g;
    f->l.srv = &f->srv;
    f->l.addr = "127.0.0.1:0";
    f->l.fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
    assert_true(f->l.fd >= 0);
    struct sockaddr_in sa = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    socklen_t len = sizeof sa;
    assert_int_equal(bind(f->l.fd, (struct sockaddr *)&sa, sizeof sa), 0);
    assert_int_equal(listen(f->l.fd, 128), 0);
    assert_int_equal(getsockname(f->l.fd, (struct sockaddr *)&sa, &len), 0);
    f->port = ntohs(sa.sin_port);
    char err[200] = "";
    f->d = http_listen(&f->l, threads, 1000, err, sizeof err);
    if (!f->d)
        fail_msg("http_listen: %s", err);
}

/* What server.c does after the drain: the daemon, then the listener. */
static void front_stop(front *f)
{
    MHD_stop_daemon(f->d);
    http_listener_close(&f->l);
    guard_free(f->g);
}

static unsigned front_connections(front *f)
{
    const union MHD_DaemonInfo *i = MHD_get_daemon_info(f->d, MHD_DAEMON_INFO_CURRENT_CONNECTIONS);
    return i ? i->num_connections : 0;
}

static int connect_to(int port)
{
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    struct sockaddr_in sa = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port),
                             .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    if (fd >= 0 && connect(fd, (struct sockaddr *)&sa, sizeof sa) != 0) {
        close(fd);
        return -1;
    }
    return fd;
}

/* Whether the peer closed fd within wait_ms (an end of file or a reset). */
static int closed_by_peer(int fd, int wait_ms)
{
    struct pollfd p = {.fd = fd, .events = POLLIN};
    if (poll(&p, 1, wait_ms) != 1)
        return 0;
    char c;
    ssize_t n = recv(fd, &c, 1, MSG_DONTWAIT);
    return n == 0 || (n < 0 && errno == ECONNRESET);
}

typedef struct churn {
    int port;  /* atomic: the front to connect to; 0 between rounds */
    int stop;  /* atomic */
    long made; /* atomic: connections the kernel completed */
} churn;

/* Opens, half-asks and drops connections as fast as it can: the daemons'
 * threads are never idle in epoll_wait, which is when the race bit. */
static void *churn_run(void *arg)
{
    churn *c = arg;
    static const char ask[] = "GET /healthz HTTP/1.1\r\n";
    while (!__atomic_load_n(&c->stop, __ATOMIC_ACQUIRE)) {
        int port = __atomic_load_n(&c->port, __ATOMIC_ACQUIRE);
        if (port == 0) {
            sched_yield();
            continue;
        }
        int fd = connect_to(port);
        if (fd < 0)
            continue;
        __atomic_add_fetch(&c->made, 1, __ATOMIC_RELAXED);
        (void)!send(fd, ask, sizeof ask - 1, MSG_NOSIGNAL);
        close(fd);
    }
    return NULL;
}

/* Door closed, then the daemon stopped, while connections pour in: round
 * after round, the process lives. With MHD_quiesce_daemon in place of
 * guard_refuse_all this aborted in 12 and 18 s under ASan, two runs of two. */
static void test_refuse_then_stop_under_churn(void **state)
{
    (void)state;
    churn c = {0};
    pthread_t t[CHURNERS];
    for (int i = 0; i < CHURNERS; i++)
        assert_int_equal(pthread_create(&t[i], NULL, churn_run, &c), 0);
    int64_t until = clock_mono_ms() + ROUNDS_MS;
    int rounds = 0;
    for (; rounds < ROUNDS && clock_mono_ms() < until; rounds++) {
        front f;
        front_start(&f, 4);
        long before = __atomic_load_n(&c.made, __ATOMIC_RELAXED);
        __atomic_store_n(&c.port, f.port, __ATOMIC_RELEASE);
        /* Until the daemon has taken a few: its threads are busy now. */
        for (int spin = 0; spin < 2000 && __atomic_load_n(&c.made, __ATOMIC_RELAXED) < before + 4; spin++)
            usleep(100);
        guard_refuse_all(f.g);
        usleep(200);
        __atomic_store_n(&c.port, 0, __ATOMIC_RELEASE);
        front_stop(&f);
    }
    __atomic_store_n(&c.stop, 1, __ATOMIC_RELEASE);
    for (int i = 0; i < CHURNERS; i++)
        pthread_join(t[i], NULL);
    assert_true(rounds >= 50);
    assert_true(c.made > rounds);
}

/* After the door closed, a new connection is closed without an answer; one
 * opened before is left to finish; after the stop, connecting is refused. */
static void test_door_closes_new_connections_only(void **state)
{
    (void)state;
    front f;
    front_start(&f, 2);
    int before = connect_to(f.port);
    assert_true(before >= 0);
    /* The kernel completed it; wait for the daemon to have accepted it. */
    for (int i = 0; i < 5000 && front_connections(&f) < 1; i++)
        usleep(1000);
    assert_int_equal(front_connections(&f), 1);
    guard_refuse_all(f.g);
    int after = connect_to(f.port);
    assert_true(after >= 0); /* the kernel completes it; the daemon drops it */
    assert_true(closed_by_peer(after, 5000));
    assert_false(closed_by_peer(before, 300));
    close(after);
    close(before);
    int port = f.port;
    front_stop(&f);
    int late = connect_to(port);
    if (late >= 0)
        close(late);
    assert_int_equal(late, -1);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_door_closes_new_connections_only),
        cmocka_unit_test(test_refuse_then_stop_under_churn),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
