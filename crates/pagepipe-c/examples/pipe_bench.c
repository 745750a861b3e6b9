/* The workload of Linux's tools/testing/selftests/pipe/pipe_bench.c over the C API beside
 * the kernel pipe: W writer processes and R reader processes share one 1 MiB pipe; writers
 * send 64 KiB messages for DURATION seconds (after a quarter-second warm-up), readers drain.
 * Kernel and pagepipe alternate, ROUNDS rounds each; prints writes/s and MB/s per round, the
 * medians and the ratio.
 *
 *   pipe_bench [--writers 5] [--readers 5] [--msgsize 65536] [--duration 1] [--rounds 5] */
#include "bench.h"

#include <sys/mman.h>

struct counters {
    volatile int stop;
    unsigned long long writes;
    unsigned long long bytes_read;
};

static void run(enum kind kind, int writers, int readers, size_t msgsize, double duration,
                double *writes_s, double *mb_s) {
    struct counters *c =
        mmap(NULL, sizeof *c, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    if (c == MAP_FAILED) die("mmap");
    struct bpipe p;
    bpipe_open(&p, kind, 1 << 20);
    pid_t pids[64];
    int n = 0;
    for (int i = 0; i < readers; i++) {
        pid_t pid = fork();
        if (pid < 0) die("fork");
        if (pid == 0) {
            bpipe_close_writer(&p);
            char *buf = malloc(msgsize);
            ssize_t got;
            while ((got = bpipe_read(&p, buf, msgsize)) > 0)
                __atomic_fetch_add(&c->bytes_read, (unsigned long long)got, __ATOMIC_RELAXED);
            _exit(got == 0 ? 0 : 3);
        }
        pids[n++] = pid;
    }
    for (int i = 0; i < writers; i++) {
        pid_t pid = fork();
        if (pid < 0) die("fork");
        if (pid == 0) {
            bpipe_close_reader(&p);
            char *buf = malloc(msgsize);
            memset(buf, 'a' + i, msgsize);
            while (!__atomic_load_n(&c->stop, __ATOMIC_RELAXED)) {
                if (bpipe_write_all(&p, buf, msgsize) != 0) _exit(3);
                __atomic_fetch_add(&c->writes, 1, __ATOMIC_RELAXED);
            }
            _exit(0);
        }
        pids[n++] = pid;
    }
    bpipe_close_writer(&p);
    bpipe_close_reader(&p);
    usleep((useconds_t)(duration / 4 * 1e6));
    unsigned long long w0 = __atomic_load_n(&c->writes, __ATOMIC_RELAXED);
    unsigned long long b0 = __atomic_load_n(&c->bytes_read, __ATOMIC_RELAXED);
    double t0 = now_s();
    usleep((useconds_t)(duration * 1e6));
    unsigned long long w1 = __atomic_load_n(&c->writes, __ATOMIC_RELAXED);
    unsigned long long b1 = __atomic_load_n(&c->bytes_read, __ATOMIC_RELAXED);
    double t1 = now_s();
    __atomic_store_n(&c->stop, 1, __ATOMIC_RELAXED);
    for (int i = 0; i < n; i++)
        if (reap(pids[i]) != 0) {
            fprintf(stderr, "%s: a child failed\n", kind_name[kind]);
            exit(1);
        }
    *writes_s = (double)(w1 - w0) / (t1 - t0);
    *mb_s = (double)(b1 - b0) / (t1 - t0) / 1e6;
    munmap(c, sizeof *c);
}

int main(int argc, char **argv) {
    int writers = 5, readers = 5, rounds = 5;
    size_t msgsize = 65536;
    double duration = 1.0;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--writers") && i + 1 < argc) writers = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--readers") && i + 1 < argc) readers = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--msgsize") && i + 1 < argc) msgsize = strtoul(argv[++i], NULL, 0);
        else if (!strcmp(argv[i], "--duration") && i + 1 < argc) duration = atof(argv[++i]);
        else if (!strcmp(argv[i], "--rounds") && i + 1 < argc) rounds = atoi(argv[++i]);
        else {
            fprintf(stderr,
                    "usage: %s [--writers N] [--readers N] [--msgsize B] [--duration S] [--rounds N]\n",
                    argv[0]);
            return 2;
        }
    }
    if (writers < 1 || readers < 1 || writers + readers > 64 || msgsize == 0 || rounds < 1 ||
        rounds > 100 || duration <= 0)
        return 2;
    printf("pipe_bench: %d writers, %d readers (processes), %zu B messages, 1 MiB pipe, %.1f s x %d rounds\n",
           writers, readers, msgsize, duration, rounds);
    double ws[2][100], mb[2][100];
    for (int r = 0; r < rounds; r++)
        for (int k = 0; k < 2; k++) {
            enum kind kind = (r % 2) ? (enum kind)(1 - k) : (enum kind)k;
            run(kind, writers, readers, msgsize, duration, &ws[kind][r], &mb[kind][r]);
            printf("  round %d %-8s %9.0f writes/s %8.0f MB/s\n", r + 1, kind_name[kind],
                   ws[kind][r], mb[kind][r]);
        }
    double mk = median(mb[KERNEL], rounds), mp = median(mb[PAGEPIPE], rounds);
    double wk = median(ws[KERNEL], rounds), wp = median(ws[PAGEPIPE], rounds);
    printf("median: kernel %.0f writes/s %.0f MB/s, pagepipe %.0f writes/s %.0f MB/s, ratio %.2fx\n",
           wk, mk, wp, mp, mp / mk);
    return 0;
}
