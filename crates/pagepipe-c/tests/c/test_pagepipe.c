/* Tests of the C API in C: fork, end of file, EPIPE without SIGPIPE, poll, non-blocking,
 * send/recv over a Unix socket, exec, writev atomicity, dup, the EINVAL contract, handles of
 * the wrong kind or made up, and forks while other threads call on closed handles.
 * Built and run by crates/pagepipe-c/tests/run-c-tests.sh (called by .ci/run). */
#define _GNU_SOURCE
#include "pagepipe.h"

#include <errno.h>
#include <poll.h>
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdint.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/uio.h>
#include <sys/wait.h>
#include <unistd.h>

static const char *self_path;
static int failures;

#define CHECK(cond)                                                                    \
    do {                                                                               \
        if (!(cond)) {                                                                 \
            fprintf(stderr, "%s:%d: %s: CHECK(%s) failed (errno %d: %s)\n", __FILE__,  \
                    __LINE__, __func__, #cond, errno, strerror(errno));                 \
            failures++;                                                                \
            return;                                                                    \
        }                                                                              \
    } while (0)

/* In a child: exit 1 unless cond. */
#define CHILD_CHECK(cond)                                                              \
    do {                                                                               \
        if (!(cond)) {                                                                 \
            fprintf(stderr, "child %s:%d: CHECK(%s) failed (errno %d)\n", __FILE__,    \
                    __LINE__, #cond, errno);                                           \
            _exit(1);                                                                  \
        }                                                                              \
    } while (0)

static int reap(pid_t pid) {
    int status;
    if (waitpid(pid, &status, 0) != pid) return -1;
    return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
}

static unsigned char pattern(size_t i) { return (unsigned char)(i * 7 + (i >> 12)); }

/* Reads until end of file into buf (at most cap bytes); returns the count or -1. */
static ssize_t read_all(pp_reader *r, unsigned char *buf, size_t cap) {
    size_t got = 0;
    for (;;) {
        ssize_t n = pp_read(r, buf + got, cap - got);
        if (n < 0) return -1;
        if (n == 0) return (ssize_t)got;
        got += (size_t)n;
        if (got == cap) {
            unsigned char extra;
            n = pp_read(r, &extra, 1);
            return n == 0 ? (ssize_t)got : -1;
        }
    }
}

static void test_einval_contract(void) {
    pp_writer *w;
    pp_reader *r;
    char buf[8];
    errno = 0;
    CHECK(pp_pipe(NULL, &r) == -1 && errno == EINVAL);
    errno = 0;
    CHECK(pp_pipe_sized(0, &w, &r) == -1 && errno == EINVAL);
    errno = 0;
    CHECK(pp_pipe_sized((size_t)1 << 40, &w, &r) == -1 && errno == EINVAL);
    errno = 0;
    CHECK(pp_write(NULL, "x", 1) == -1 && errno == EINVAL);
    errno = 0;
    CHECK(pp_read(NULL, buf, 1) == -1 && errno == EINVAL);
    errno = 0;
    CHECK(pp_writer_close(NULL) == -1 && errno == EINVAL);
    errno = 0;
    CHECK(pp_reader_fd(NULL) == -1 && errno == EINVAL);
    CHECK(pp_pipe(&w, &r) == 0);
    errno = 0;
    CHECK(pp_write(w, NULL, 1) == -1 && errno == EINVAL);
    CHECK(pp_write(w, NULL, 0) == 0);
    errno = 0;
    CHECK(pp_write(w, buf, (size_t)-1) == -1 && errno == EINVAL);
    errno = 0;
    CHECK(pp_writev(w, NULL, 1) == -1 && errno == EINVAL);
    errno = 0;
    CHECK(pp_writev(w, NULL, -1) == -1 && errno == EINVAL);
    errno = 0;
    CHECK(pp_writer_to_env(w, "A=B") == -1 && errno == EINVAL);
    CHECK(pp_writer_close(w) == 0);
    /* A closed handle is EINVAL, not a crash. */
    errno = 0;
    CHECK(pp_write(w, "x", 1) == -1 && errno == EINVAL);
    errno = 0;
    CHECK(pp_writer_close(w) == -1 && errno == EINVAL);
    errno = 0;
    CHECK(pp_writer_fd(w) == -1 && errno == EINVAL);
    CHECK(pp_read(r, buf, sizeof buf) == 0);
    CHECK(pp_reader_close(r) == 0);
    errno = 0;
    CHECK(pp_read(r, buf, sizeof buf) == -1 && errno == EINVAL);
}

static void test_fork_byte_exact(void) {
    enum { TOTAL = 4 << 20 };
    pp_writer *w;
    pp_reader *r;
    CHECK(pp_pipe(&w, &r) == 0);
    pid_t pid = fork();
    CHECK(pid >= 0);
    if (pid == 0) {
        CHILD_CHECK(pp_writer_close(w) == 0);
        unsigned char *buf = malloc(TOTAL);
        ssize_t n = read_all(r, buf, TOTAL);
        CHILD_CHECK(n == TOTAL);
        for (size_t i = 0; i < TOTAL; i++) CHILD_CHECK(buf[i] == pattern(i));
        _exit(0);
    }
    CHECK(pp_reader_close(r) == 0);
    unsigned char *src = malloc(TOTAL);
    for (size_t i = 0; i < TOTAL; i++) src[i] = pattern(i);
    for (size_t off = 0; off < TOTAL; off += 65536) CHECK(pp_write(w, src + off, 65536) == 65536);
    free(src);
    CHECK(pp_writer_close(w) == 0);
    CHECK(reap(pid) == 0);
}

static void test_eof_waits_for_the_childs_writer(void) {
    pp_writer *w;
    pp_reader *r;
    unsigned char buf[16];
    CHECK(pp_pipe(&w, &r) == 0);
    pid_t pid = fork();
    CHECK(pid >= 0);
    if (pid == 0) {
        usleep(100 * 1000);
        CHILD_CHECK(pp_write(w, "late", 4) == 4);
        _exit(0); /* exiting closes the child's ends */
    }
    CHECK(pp_writer_close(w) == 0);
    CHECK(read_all(r, buf, sizeof buf) == 4 && memcmp(buf, "late", 4) == 0);
    CHECK(pp_read(r, buf, sizeof buf) == 0);
    CHECK(pp_reader_close(r) == 0);
    CHECK(reap(pid) == 0);
}

static void test_epipe_without_sigpipe(void) {
    pp_writer *w;
    pp_reader *r;
    CHECK(pp_pipe(&w, &r) == 0);
    pid_t pid = fork();
    CHECK(pid >= 0);
    if (pid == 0) {
        /* SIGPIPE keeps its default action here: raising it would kill the child. */
        signal(SIGPIPE, SIG_DFL);
        CHILD_CHECK(pp_reader_close(r) == 0);
        errno = 0;
        CHILD_CHECK(pp_write(w, "x", 1) == -1 && errno == EPIPE);
        static char big[1 << 20];
        errno = 0;
        CHILD_CHECK(pp_write(w, big, sizeof big) == -1 && errno == EPIPE);
        sigset_t pending;
        sigpending(&pending);
        CHILD_CHECK(!sigismember(&pending, SIGPIPE));
        _exit(0);
    }
    CHECK(pp_reader_close(r) == 0);
    CHECK(pp_writer_close(w) == 0);
    CHECK(reap(pid) == 0);
}

static void test_a_dead_readers_process_is_epipe(void) {
    pp_writer *w;
    pp_reader *r;
    CHECK(pp_pipe(&w, &r) == 0);
    pid_t pid = fork();
    CHECK(pid >= 0);
    if (pid == 0) {
        char buf[4];
        CHILD_CHECK(pp_read(r, buf, 4) == 4);
        _exit(0);
    }
    CHECK(pp_reader_close(r) == 0);
    CHECK(pp_write(w, "ping", 4) == 4);
    CHECK(reap(pid) == 0);
    /* The child exited without closing its reader: this process's death watcher learns it
     * from the kernel (an exit bumps no close counter) and writes fail with EPIPE from then on;
     * a write in the instant before may still queue bytes, and without the watcher a write
     * asks the kernel when the ring is full: by then the write fails with EPIPE. */
    static char block[65536];
    ssize_t n = 0;
    for (int i = 0; i < 4 && n >= 0; i++) n = pp_write(w, block, sizeof block);
    CHECK(n == -1 && errno == EPIPE);
    CHECK(pp_writer_close(w) == 0);
}

static short poll1(int fd, short events, int timeout_ms) {
    struct pollfd p = {.fd = fd, .events = events};
    int n = poll(&p, 1, timeout_ms);
    return n == 1 ? p.revents : 0;
}

static void test_poll(void) {
    pp_writer *w;
    pp_reader *r;
    char buf[65536];
    CHECK(pp_pipe(&w, &r) == 0);
    int rfd = pp_reader_fd(r), wfd = pp_writer_fd(w);
    CHECK(rfd >= 0 && wfd >= 0);
    CHECK((poll1(rfd, POLLIN, 0) & POLLIN) == 0);
    CHECK(poll1(wfd, POLLOUT, 0) & POLLOUT);
    CHECK(pp_write(w, "data", 4) == 4);
    CHECK(poll1(rfd, POLLIN, 1000) & POLLIN);
    CHECK(pp_read(r, buf, sizeof buf) == 4);
    CHECK((poll1(rfd, POLLIN, 0) & POLLIN) == 0);
    /* Fill the pipe: no POLLOUT until a read frees room. */
    memset(buf, 'z', sizeof buf);
    CHECK(pp_write(w, buf, sizeof buf) == (ssize_t)sizeof buf);
    CHECK((poll1(wfd, POLLOUT, 0) & POLLOUT) == 0);
    CHECK(pp_read(r, buf, sizeof buf) > 0);
    CHECK(poll1(wfd, POLLOUT, 1000) & POLLOUT);
    /* A readable pipe is woken from another process. */
    while (pp_read(r, buf, 0) != 0) {}
    pp_reader_set_nonblocking(r, 1);
    while (pp_read(r, buf, sizeof buf) > 0) {}
    pp_reader_set_nonblocking(r, 0);
    pid_t pid = fork();
    CHECK(pid >= 0);
    if (pid == 0) {
        usleep(50 * 1000);
        CHILD_CHECK(pp_write(w, "wake", 4) == 4);
        _exit(0);
    }
    CHECK(poll1(rfd, POLLIN, 5000) & POLLIN);
    CHECK(reap(pid) == 0);
    CHECK(pp_read(r, buf, sizeof buf) == 4);
    CHECK(pp_writer_close(w) == 0);
    CHECK(poll1(rfd, POLLIN, 1000) & POLLHUP);
    CHECK(pp_reader_close(r) == 0);
}

static void test_nonblocking(void) {
    pp_writer *w;
    pp_reader *r;
    static char buf[100000];
    CHECK(pp_pipe(&w, &r) == 0);
    CHECK(pp_reader_set_nonblocking(r, 1) == 0);
    CHECK(pp_writer_set_nonblocking(w, 1) == 0);
    errno = 0;
    CHECK(pp_read(r, buf, 10) == -1 && errno == EAGAIN);
    /* A write larger than the room places what fits. */
    CHECK(pp_write(w, buf, sizeof buf) == 65536);
    errno = 0;
    CHECK(pp_write(w, buf, 1) == -1 && errno == EAGAIN);
    CHECK(pp_read(r, buf, sizeof buf) == 65536);
    CHECK(pp_writer_close(w) == 0);
    CHECK(pp_read(r, buf, 10) == 0); /* end of file, not EAGAIN */
    CHECK(pp_reader_close(r) == 0);
}

static void test_send_recv(void) {
    pp_writer *w;
    pp_reader *r;
    int sv[2];
    unsigned char buf[64];
    CHECK(socketpair(AF_UNIX, SOCK_STREAM, 0, sv) == 0);
    CHECK(pp_pipe(&w, &r) == 0);
    pid_t pid = fork();
    CHECK(pid >= 0);
    if (pid == 0) {
        /* A child that did not inherit the pipe: it gets the writer over the socket. */
        CHILD_CHECK(pp_writer_close(w) == 0 && pp_reader_close(r) == 0);
        pp_writer *w2;
        CHILD_CHECK(pp_writer_recv(sv[1], &w2) == 0);
        CHILD_CHECK(pp_write(w2, "over the socket", 15) == 15);
        CHILD_CHECK(pp_writer_close(w2) == 0);
        _exit(0);
    }
    CHECK(pp_writer_send(w, sv[0]) == 0);
    CHECK(pp_writer_close(w) == 0);
    CHECK(read_all(r, buf, sizeof buf) == 15 && memcmp(buf, "over the socket", 15) == 0);
    CHECK(reap(pid) == 0);
    /* A reader is not a writer. */
    CHECK(pp_reader_send(r, sv[0]) == 0);
    pp_writer *wrong;
    errno = 0;
    CHECK(pp_writer_recv(sv[1], &wrong) == -1 && errno == EBADMSG);
    errno = 0;
    CHECK(pp_writer_send(NULL, sv[0]) == -1 && errno == EINVAL);
    CHECK(pp_reader_close(r) == 0);
    close(sv[0]);
    close(sv[1]);
}

/* The program exec'd by test_exec: takes the writer from the environment and writes. */
static int exec_child(void) {
    pp_writer *w;
    if (pp_writer_from_env("PP_TEST_WRITER", &w) != 0) return 2;
    pp_writer *again;
    if (pp_writer_from_env("PP_TEST_WRITER", &again) != -1 || errno != EEXIST) return 3;
    if (pp_write(w, "from exec", 9) != 9) return 4;
    return pp_writer_close(w) == 0 ? 0 : 5;
}

static void test_exec(void) {
    pp_writer *w;
    pp_reader *r;
    unsigned char buf[64];
    CHECK(pp_pipe(&w, &r) == 0);
    CHECK(pp_writer_to_env(w, "PP_TEST_WRITER") == 0);
    pid_t pid = fork();
    CHECK(pid >= 0);
    if (pid == 0) {
        execl(self_path, self_path, "exec-child", (char *)NULL);
        _exit(127);
    }
    unsetenv("PP_TEST_WRITER");
    CHECK(pp_writer_close(w) == 0); /* also closes the descriptors handed to the child */
    CHECK(read_all(r, buf, sizeof buf) == 9 && memcmp(buf, "from exec", 9) == 0);
    CHECK(reap(pid) == 0);
    CHECK(pp_reader_close(r) == 0);
    errno = 0;
    CHECK(pp_reader_from_env("PP_TEST_NOT_SET", &r) == -1 && errno == ENOENT);
}

static void test_writev_atomic_among_processes(void) {
    enum { WRITERS = 4, RECORDS = 500, REC = 4096 };
    pp_writer *w;
    pp_reader *r;
    CHECK(pp_pipe(&w, &r) == 0);
    pid_t pids[WRITERS];
    for (int k = 0; k < WRITERS; k++) {
        pids[k] = fork();
        CHECK(pids[k] >= 0);
        if (pids[k] == 0) {
            CHILD_CHECK(pp_reader_close(r) == 0);
            char head[100], tail[REC - 100];
            memset(head, 'a' + k, sizeof head);
            memset(tail, 'a' + k, sizeof tail);
            struct iovec iov[2] = {{head, sizeof head}, {tail, sizeof tail}};
            for (int i = 0; i < RECORDS; i++) CHILD_CHECK(pp_writev(w, iov, 2) == REC);
            _exit(0);
        }
    }
    CHECK(pp_writer_close(w) == 0);
    static unsigned char rec[REC];
    size_t have = 0, records = 0;
    for (;;) {
        ssize_t n = pp_read(r, rec + have, REC - have);
        CHECK(n >= 0);
        if (n == 0) break;
        have += (size_t)n;
        if (have == REC) {
            for (size_t i = 1; i < REC; i++) CHECK(rec[i] == rec[0]);
            records++;
            have = 0;
        }
    }
    CHECK(have == 0 && records == WRITERS * RECORDS);
    for (int k = 0; k < WRITERS; k++) CHECK(reap(pids[k]) == 0);
    CHECK(pp_reader_close(r) == 0);
}

static void test_dup(void) {
    pp_writer *w, *w2;
    pp_reader *r;
    char buf[8];
    CHECK(pp_pipe(&w, &r) == 0);
    CHECK(pp_writer_dup(w, &w2) == 0 && w2 != w);
    CHECK(pp_writer_close(w) == 0);
    CHECK(pp_reader_set_nonblocking(r, 1) == 0);
    errno = 0;
    CHECK(pp_read(r, buf, 8) == -1 && errno == EAGAIN); /* the dup holds the end open */
    CHECK(pp_write(w2, "dup", 3) == 3);
    CHECK(pp_writer_close(w2) == 0);
    CHECK(pp_read(r, buf, 8) == 3);
    CHECK(pp_read(r, buf, 8) == 0);
    CHECK(pp_reader_close(r) == 0);
}

/* A handle of the other kind (a cast) or a made-up one is an error, never a call on some end. */
static void test_wrong_kind_and_made_up_handles(void) {
    pp_writer *w;
    pp_reader *r;
    char buf[8];
    CHECK(pp_pipe(&w, &r) == 0);
    errno = 0;
    CHECK(pp_write((pp_writer *)r, "x", 1) == -1 && errno == EBADF);
    errno = 0;
    CHECK(pp_read((pp_reader *)w, buf, sizeof buf) == -1 && errno == EBADF);
    errno = 0;
    CHECK(pp_writer_close((pp_writer *)r) == -1 && errno == EBADF);
    errno = 0;
    CHECK(pp_reader_fd((pp_reader *)w) == -1 && errno == EBADF);
    pp_writer *d;
    errno = 0;
    CHECK(pp_writer_dup((pp_writer *)r, &d) == -1 && errno == EBADF);
    /* Nothing happened to either end: the reader is open, empty, and the writer writes. */
    CHECK(pp_reader_set_nonblocking(r, 1) == 0);
    errno = 0;
    CHECK(pp_read(r, buf, sizeof buf) == -1 && errno == EAGAIN);
    CHECK(pp_write(w, "ok", 2) == 2 && pp_read(r, buf, sizeof buf) == 2);
    /* Numbers that were never handles: EINVAL, not a crash. */
    static const uintptr_t made_up[] = {1, 0x1000, 0xdeadbeef, (uintptr_t)-1, (uintptr_t)&failures};
    for (size_t i = 0; i < sizeof made_up / sizeof made_up[0]; i++) {
        errno = 0;
        ssize_t n = pp_write((pp_writer *)made_up[i], "x", 1);
        CHECK(n == -1 && (errno == EINVAL || errno == EBADF));
        errno = 0;
        CHECK(pp_reader_close((pp_reader *)made_up[i]) == -1 && (errno == EINVAL || errno == EBADF));
    }
    CHECK(pp_writer_close(w) == 0);
    CHECK(pp_reader_close(r) == 0);
}

static atomic_int stale_stop;
static atomic_long stale_calls;

/* Calls, again and again, functions of both kinds on handles that are closed. */
static void *stale_caller(void *arg) {
    pp_writer **stale = arg;
    pp_reader *stale_r = (pp_reader *)stale[1];
    char buf[4];
    while (!atomic_load(&stale_stop)) {
        pp_writer *out_w;
        pp_reader *out_r;
        if (pp_write(stale[0], "x", 1) != -1 || errno != EINVAL) abort();
        if (pp_writer_dup(stale[0], &out_w) != -1 || errno != EINVAL) abort();
        if (pp_read(stale_r, buf, sizeof buf) != -1 || errno != EINVAL) abort();
        if (pp_reader_dup(stale_r, &out_r) != -1 || errno != EINVAL) abort();
        atomic_fetch_add(&stale_calls, 1);
    }
    return NULL;
}

/* Issue 39, break 4: a fork while another thread calls on a closed handle must leave the child
 * free to make, dup and close handles (it used to inherit a count on the free slot that its
 * next pp_pipe waited for forever). Each child is bounded by alarm(); a hung one dies of it. */
static void test_fork_during_stale_calls(void) {
    enum { FORKS = 300, CHILD_SECONDS = 5 };
    pp_writer *w;
    pp_reader *r;
    CHECK(pp_pipe(&w, &r) == 0);
    CHECK(pp_writer_close(w) == 0 && pp_reader_close(r) == 0);
    pp_writer *stale[2] = {w, (pp_writer *)r};
    atomic_store(&stale_stop, 0);
    pthread_t caller;
    CHECK(pthread_create(&caller, NULL, stale_caller, stale) == 0);
    while (atomic_load(&stale_calls) == 0) sched_yield();
    int hung = 0, failed = 0;
    for (int i = 0; i < FORKS && hung < 3; i++) {
        pid_t pid = fork();
        if (pid < 0) break;
        if (pid == 0) {
            alarm(CHILD_SECONDS);
            pp_writer *w2, *w3;
            pp_reader *r2;
            char buf[4];
            CHILD_CHECK(pp_pipe(&w2, &r2) == 0);
            CHILD_CHECK(pp_writer_dup(w2, &w3) == 0);
            CHILD_CHECK(pp_writer_close(w2) == 0);
            CHILD_CHECK(pp_write(w3, "kid", 3) == 3 && pp_read(r2, buf, sizeof buf) == 3);
            CHILD_CHECK(pp_writer_close(w3) == 0 && pp_reader_close(r2) == 0);
            /* The stale handles stay stale in the child too. */
            CHILD_CHECK(pp_write(w, "x", 1) == -1 && errno == EINVAL);
            _exit(0);
        }
        int status = reap(pid);
        if (status == 128 + SIGALRM) hung++;
        else if (status != 0) failed++;
    }
    atomic_store(&stale_stop, 1);
    CHECK(pthread_join(caller, NULL) == 0);
    if (hung) fprintf(stderr, "  %d child(ren) hung in their first pp_pipe/dup\n", hung);
    CHECK(hung == 0 && failed == 0);
}

int main(int argc, char **argv) {
    self_path = argv[0];
    if (argc > 1 && strcmp(argv[1], "exec-child") == 0) return exec_child();
    struct {
        const char *name;
        void (*run)(void);
    } tests[] = {
        {"einval_contract", test_einval_contract},
        {"fork_byte_exact", test_fork_byte_exact},
        {"eof_waits_for_the_childs_writer", test_eof_waits_for_the_childs_writer},
        {"epipe_without_sigpipe", test_epipe_without_sigpipe},
        {"a_dead_readers_process_is_epipe", test_a_dead_readers_process_is_epipe},
        {"poll", test_poll},
        {"nonblocking", test_nonblocking},
        {"send_recv", test_send_recv},
        {"exec", test_exec},
        {"writev_atomic_among_processes", test_writev_atomic_among_processes},
        {"dup", test_dup},
        {"wrong_kind_and_made_up_handles", test_wrong_kind_and_made_up_handles},
        {"fork_during_stale_calls", test_fork_during_stale_calls},
    };
    /* With arguments, only the tests they name run. */
    for (size_t i = 0; i < sizeof tests / sizeof tests[0]; i++) {
        int named = argc == 1;
        for (int a = 1; a < argc; a++) named |= strcmp(argv[a], tests[i].name) == 0;
        if (!named) continue;
        int before = failures;
        tests[i].run();
        printf("%s %s\n", failures == before ? "ok  " : "FAIL", tests[i].name);
        fflush(stdout);
    }
    printf("%d failure(s)\n", failures);
    return failures ? 1 : 0;
}
