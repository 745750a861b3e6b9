/* What the C benchmarks share: one pipe interface over a kernel pipe and a pagepipe, a clock,
 * and medians. The kernel pipe is the baseline each benchmark runs beside pagepipe. */
#ifndef PAGEPIPE_EXAMPLES_BENCH_H
#define PAGEPIPE_EXAMPLES_BENCH_H

#define _GNU_SOURCE
#include "pagepipe.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

enum kind { KERNEL, PAGEPIPE };
static const char *const kind_name[] = {"kernel", "pagepipe"};

/* One pipe of either kind; after a fork each process closes the ends it does not use. */
struct bpipe {
    enum kind kind;
    int fds[2];
    pp_writer *w;
    pp_reader *r;
};

static inline void die(const char *what) {
    perror(what);
    exit(2);
}

static inline void bpipe_open(struct bpipe *p, enum kind kind, size_t capacity) {
    p->kind = kind;
    if (kind == KERNEL) {
        if (pipe(p->fds) != 0) die("pipe");
        if (fcntl(p->fds[1], F_SETPIPE_SZ, (int)capacity) < 0) die("F_SETPIPE_SZ");
    } else if (pp_pipe_sized(capacity, &p->w, &p->r) != 0) {
        die("pp_pipe_sized");
    }
}

static inline ssize_t bpipe_write(struct bpipe *p, const void *buf, size_t len) {
    return p->kind == KERNEL ? write(p->fds[1], buf, len) : pp_write(p->w, buf, len);
}

static inline ssize_t bpipe_read(struct bpipe *p, void *buf, size_t len) {
    return p->kind == KERNEL ? read(p->fds[0], buf, len) : pp_read(p->r, buf, len);
}

/* Writes all of buf (a blocking kernel pipe write may return short after a signal). */
static inline int bpipe_write_all(struct bpipe *p, const void *buf, size_t len) {
    const char *b = buf;
    while (len > 0) {
        ssize_t n = bpipe_write(p, b, len);
        if (n < 0) {
            if (errno == EINTR) continue;
            return -1;
        }
        b += n;
        len -= (size_t)n;
    }
    return 0;
}

static inline int bpipe_read_exact(struct bpipe *p, void *buf, size_t len) {
    char *b = buf;
    while (len > 0) {
        ssize_t n = bpipe_read(p, b, len);
        if (n <= 0) {
            if (n < 0 && errno == EINTR) continue;
            return -1;
        }
        b += n;
        len -= (size_t)n;
    }
    return 0;
}

static inline void bpipe_close_writer(struct bpipe *p) {
    if (p->kind == KERNEL) close(p->fds[1]);
    else pp_writer_close(p->w);
}

static inline void bpipe_close_reader(struct bpipe *p) {
    if (p->kind == KERNEL) close(p->fds[0]);
    else pp_reader_close(p->r);
}

static inline double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static inline int cmp_double(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

static inline double median(double *v, int n) {
    qsort(v, (size_t)n, sizeof *v, cmp_double);
    return n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

static inline int reap(pid_t pid) {
    int status;
    if (waitpid(pid, &status, 0) != pid) return -1;
    return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
}

#endif
