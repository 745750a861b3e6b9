/* lmbench's lat_pipe over the C API beside the kernel pipe: a 1-byte ping-pong between a
 * parent and a forked child over two pipes; the time of one round trip. Kernel and pagepipe
 * alternate, ROUNDS rounds of ITERS round trips each; prints the medians and the ratio
 * (kernel time / pagepipe time).
 *
 *   lat_pipe [--iters N] [--rounds N] */
#include "bench.h"

static double run(enum kind kind, long iters) {
    struct bpipe ping, pong;
    bpipe_open(&ping, kind, 65536);
    bpipe_open(&pong, kind, 65536);
    pid_t pid = fork();
    if (pid < 0) die("fork");
    if (pid == 0) {
        bpipe_close_writer(&ping);
        bpipe_close_reader(&pong);
        char c;
        while (bpipe_read(&ping, &c, 1) == 1)
            if (bpipe_write(&pong, &c, 1) != 1) _exit(3);
        _exit(0);
    }
    bpipe_close_reader(&ping);
    bpipe_close_writer(&pong);
    char c = 'x';
    for (long i = 0; i < iters / 10; i++) /* warm-up */
        if (bpipe_write(&ping, &c, 1) != 1 || bpipe_read_exact(&pong, &c, 1) != 0) die("warm-up");
    double start = now_s();
    for (long i = 0; i < iters; i++)
        if (bpipe_write(&ping, &c, 1) != 1 || bpipe_read_exact(&pong, &c, 1) != 0) die("ping-pong");
    double us = (now_s() - start) / (double)iters * 1e6;
    bpipe_close_writer(&ping);
    bpipe_close_reader(&pong);
    if (reap(pid) != 0) die("child");
    return us;
}

int main(int argc, char **argv) {
    long iters = 200000;
    int rounds = 5;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--iters") && i + 1 < argc) iters = atol(argv[++i]);
        else if (!strcmp(argv[i], "--rounds") && i + 1 < argc) rounds = atoi(argv[++i]);
        else {
            fprintf(stderr, "usage: %s [--iters N] [--rounds N]\n", argv[0]);
            return 2;
        }
    }
    if (iters < 10 || rounds < 1 || rounds > 100) return 2;
    printf("lat_pipe: 1-byte round trip, parent <-> forked child, %ld round trips x %d rounds\n",
           iters, rounds);
    double us[2][100];
    for (int r = 0; r < rounds; r++)
        for (int k = 0; k < 2; k++) {
            enum kind kind = (r % 2) ? (enum kind)(1 - k) : (enum kind)k;
            us[kind][r] = run(kind, iters);
            printf("  round %d %-8s %7.2f us\n", r + 1, kind_name[kind], us[kind][r]);
        }
    double mk = median(us[KERNEL], rounds), mp = median(us[PAGEPIPE], rounds);
    printf("median: kernel %.2f us, pagepipe %.2f us, ratio (kernel/pagepipe) %.2fx\n", mk, mp,
           mk / mp);
    return 0;
}
