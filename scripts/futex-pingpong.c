/* The floor of any design that sleeps: two threads hand a token back and forth through bare
 * futexes (no ring, no data), beside the kernel pipe doing the same with 1-byte writes and
 * reads. Issue 38 asks pagepipe's 1-byte round trip for 2x the kernel pipe's on a busy machine;
 * a side that sleeps cannot be faster than this loop, whose ratio to the pipe is the ceiling.
 *
 *   cc -O2 -pthread scripts/futex-pingpong.c -o /tmp/futex-pingpong
 *   /tmp/futex-pingpong 2   # kernel pipe
 *   /tmp/futex-pingpong 0   # private futex on anonymous memory
 *   /tmp/futex-pingpong 1   # shared futex on a memfd mapping (what pagepipe sleeps on)
 *   /tmp/futex-pingpong 3   # private futex on the same memfd mapping
 * Run it idle and beside `sh -c 'while :; do :; done' &` loops; it prints microseconds per
 * round trip over 200,000 round trips. */
#define _GNU_SOURCE
#include <linux/futex.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

static _Atomic int *w;
static int op_wait, op_wake, mode, fds[2][2];
static const long N = 200000;

static void wait_for(_Atomic int *a, int target) {
    int v;
    while ((v = atomic_load(a)) != target)
        syscall(SYS_futex, a, op_wait, v, NULL, NULL, 0);
}

static void set_and_wake(_Atomic int *a, int v) {
    atomic_store(a, v);
    syscall(SYS_futex, a, op_wake, 1, NULL, NULL, 0);
}

static void *peer(void *unused) {
    char c;
    (void)unused;
    for (long i = 0; i < N; i++) {
        if (mode == 2) {
            if (read(fds[0][0], &c, 1) != 1 || write(fds[1][1], &c, 1) != 1) abort();
        } else {
            wait_for(&w[0], 2 * i + 1);
            set_and_wake(&w[1], 2 * i + 1);
        }
    }
    return NULL;
}

int main(int argc, char **argv) {
    mode = argc > 1 ? atoi(argv[1]) : 2;
    if (mode == 0) {
        w = mmap(NULL, 4096, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
        op_wait = FUTEX_WAIT_PRIVATE, op_wake = FUTEX_WAKE_PRIVATE;
    } else {
        int fd = memfd_create("futex-pingpong", 0);
        if (fd < 0 || ftruncate(fd, 4096)) abort();
        w = mmap(NULL, 4096, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
        op_wait = mode == 3 ? FUTEX_WAIT_PRIVATE : FUTEX_WAIT;
        op_wake = mode == 3 ? FUTEX_WAKE_PRIVATE : FUTEX_WAKE;
    }
    if (w == MAP_FAILED || pipe(fds[0]) || pipe(fds[1])) abort();
    pthread_t t;
    pthread_create(&t, NULL, peer, NULL);
    struct timespec a, b;
    char c = 'x';
    clock_gettime(CLOCK_MONOTONIC, &a);
    for (long i = 0; i < N; i++) {
        if (mode == 2) {
            if (write(fds[0][1], &c, 1) != 1 || read(fds[1][0], &c, 1) != 1) abort();
        } else {
            set_and_wake(&w[0], 2 * i + 1);
            wait_for(&w[1], 2 * i + 1);
        }
    }
    clock_gettime(CLOCK_MONOTONIC, &b);
    pthread_join(t, NULL);
    double ns = (b.tv_sec - a.tv_sec) * 1e9 + (b.tv_nsec - a.tv_nsec);
    printf("mode %d: %.2f us per round trip\n", mode, ns / N / 1000.0);
    return 0;
}
