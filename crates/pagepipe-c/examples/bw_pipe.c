/* lmbench's bw_pipe over the C API beside the kernel pipe: a parent writes TOTAL bytes (256
 * MiB) in 64 KiB writes to a forked child that reads them; MB/s from the first write to the
 * child's end of file. Kernel and pagepipe alternate, ROUNDS rounds each; prints each round,
 * the medians and the ratio. Both pipes have the default 64 KiB capacity.
 *
 *   bw_pipe [--exact | --whole] [--mib N] [--rounds N] [--chunk BYTES]
 *
 * Default (as lmbench): one 64 KiB buffer on each side, reused, nothing checked.
 * --exact: the parent sends 16 distinct blocks in turn, every 4 KiB page stamped with its
 *   offset in the stream; the child compares every byte of every chunk as it arrives (a
 *   mismatch, a short stream or extra bytes fail the run).
 * --whole: the parent sends TOTAL bytes from its own memory and the child reads them into a
 *   TOTAL-byte buffer (touched before the clock starts), compared after the clock stops. */
#include "bench.h"

#include <sys/mman.h>

struct shared {
    double end; /* when the child's last read returned */
};

enum mode { LMBENCH, EXACT, WHOLE };
static const char *const mode_name[] = {
    "lmbench buffers (one 64 KiB buffer per side, reused)",
    "byte-exact: every byte compared as it arrives (16 distinct blocks, each 4 KiB page "
    "stamped with its offset in the stream)",
    "byte-exact: the whole stream from and into TOTAL-byte buffers, compared after"};

enum { BLOCKS = 16, PAGE = 4096 };

static unsigned char pattern(size_t i) { return (unsigned char)(i * 131 + (i >> 16)); }

/* Block `b` of the EXACT mode (chunk bytes), before stamping. */
static void fill_block(unsigned char *blk, size_t b, size_t chunk) {
    for (size_t i = 0; i < chunk; i++) blk[i] = pattern(b * chunk + i + 1);
}

/* Stamps each 4 KiB page of a chunk with its offset in the stream. */
static void stamp(unsigned char *chunk_buf, size_t chunk, size_t off) {
    for (size_t p = 0; p + 8 <= chunk; p += PAGE) {
        unsigned long long at = off + p;
        memcpy(chunk_buf + p, &at, 8);
    }
}

/* Whether a received chunk is exactly what was sent at `off`. */
static int chunk_ok(const unsigned char *got, const unsigned char *blk, size_t chunk, size_t off) {
    for (size_t p = 0; p < chunk; p += PAGE) {
        size_t len = chunk - p < PAGE ? chunk - p : PAGE;
        unsigned long long at = off + p;
        if (len >= 8) {
            if (memcmp(got + p, &at, 8) != 0 || memcmp(got + p + 8, blk + p + 8, len - 8) != 0)
                return 0;
        } else if (memcmp(got + p, blk + p, len) != 0) {
            return 0;
        }
    }
    return 1;
}

static double run(enum kind kind, size_t total, size_t chunk, enum mode mode) {
    struct shared *sh =
        mmap(NULL, sizeof *sh, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    if (sh == MAP_FAILED) die("mmap");
    int ready[2];
    if (pipe(ready) != 0) die("pipe");
    struct bpipe p;
    bpipe_open(&p, kind, 65536);
    /* Sender's and receiver's data, made before the fork and the clock. */
    size_t blocks_len = mode == EXACT ? BLOCKS * chunk : mode == WHOLE ? total : chunk;
    unsigned char *blocks = malloc(blocks_len);
    if (!blocks) die("malloc");
    if (mode == EXACT)
        for (size_t b = 0; b < BLOCKS; b++) fill_block(blocks + b * chunk, b, chunk);
    else
        for (size_t i = 0; i < blocks_len; i++) blocks[i] = pattern(i);
    pid_t pid = fork();
    if (pid < 0) die("fork");
    if (pid == 0) {
        bpipe_close_writer(&p);
        close(ready[0]);
        unsigned char *buf = malloc(mode == WHOLE ? total : chunk);
        if (!buf) _exit(3);
        memset(buf, 0, mode == WHOLE ? total : chunk);
        if (write(ready[1], "r", 1) != 1) _exit(3);
        size_t got = 0;
        if (mode == EXACT) {
            for (size_t off = 0; off < total; off += chunk) {
                if (bpipe_read_exact(&p, buf, chunk) != 0) _exit(4);
                if (!chunk_ok(buf, blocks + (off / chunk % BLOCKS) * chunk, chunk, off)) _exit(5);
            }
            got = total;
        }
        while (got < total) {
            unsigned char *dst = mode == WHOLE ? buf + got : buf;
            ssize_t n = bpipe_read(&p, dst, mode == WHOLE ? total - got : chunk);
            if (n <= 0) _exit(4);
            got += (size_t)n;
        }
        unsigned char extra;
        if (bpipe_read(&p, &extra, 1) != 0) _exit(6); /* end of file, nothing more */
        sh->end = now_s();
        if (mode == WHOLE && memcmp(buf, blocks, total) != 0) _exit(5);
        _exit(0);
    }
    bpipe_close_reader(&p);
    close(ready[1]);
    char c;
    if (read(ready[0], &c, 1) != 1) die("child not ready");
    close(ready[0]);
    double start = now_s();
    for (size_t off = 0; off < total; off += chunk) {
        unsigned char *src = blocks;
        if (mode == EXACT) {
            src = blocks + (off / chunk % BLOCKS) * chunk;
            stamp(src, chunk, off);
        } else if (mode == WHOLE) {
            src = blocks + off;
        }
        if (bpipe_write_all(&p, src, chunk) != 0) die("write");
    }
    bpipe_close_writer(&p);
    int rc = reap(pid);
    if (rc != 0) {
        fprintf(stderr, "%s: child failed (%d%s)\n", kind_name[kind], rc,
                rc == 5 ? ": bytes differ" : "");
        exit(1);
    }
    double mbs = (double)total / (sh->end - start) / 1e6;
    free(blocks);
    munmap(sh, sizeof *sh);
    return mbs;
}

int main(int argc, char **argv) {
    size_t mib = 256, chunk = 65536;
    int rounds = 5;
    enum mode mode = LMBENCH;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--exact")) mode = EXACT;
        else if (!strcmp(argv[i], "--whole")) mode = WHOLE;
        else if (!strcmp(argv[i], "--mib") && i + 1 < argc) mib = strtoul(argv[++i], NULL, 0);
        else if (!strcmp(argv[i], "--rounds") && i + 1 < argc) rounds = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--chunk") && i + 1 < argc) chunk = strtoul(argv[++i], NULL, 0);
        else {
            fprintf(stderr, "usage: %s [--exact | --whole] [--mib N] [--rounds N] [--chunk BYTES]\n", argv[0]);
            return 2;
        }
    }
    size_t total = mib << 20;
    if (chunk == 0 || total % chunk || rounds < 1 || rounds > 100) {
        fprintf(stderr, "the total must be a multiple of the chunk; 1-100 rounds\n");
        return 2;
    }
    printf("bw_pipe: %zu MiB parent -> forked child, %zu B writes, 64 KiB pipes;\n  %s\n", mib,
           chunk, mode_name[mode]);
    double mb[2][100];
    for (int r = 0; r < rounds; r++) {
        for (int k = 0; k < 2; k++) {
            enum kind kind = (r % 2) ? (enum kind)(1 - k) : (enum kind)k; /* alternate order */
            mb[kind][r] = run(kind, total, chunk, mode);
            printf("  round %d %-8s %9.0f MB/s\n", r + 1, kind_name[kind], mb[kind][r]);
        }
    }
    double mk = median(mb[KERNEL], rounds), mp = median(mb[PAGEPIPE], rounds);
    printf("median: kernel %.0f MB/s, pagepipe %.0f MB/s, ratio %.2fx\n", mk, mp, mp / mk);
    return 0;
}
