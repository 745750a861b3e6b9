/* The host's placement of this VM's two vCPUs, in one number: two threads pinned to CPU 0 and
 * CPU 1 hand one cache line back and forth 200,000 times; it prints nanoseconds per round trip.
 * On the development VM it reads 95-250 when the vCPUs share a cache and 380-530 when the host
 * has put them on core complexes that do not, and it changes from minute to minute.
 * scripts/placement-ab.sh runs it around every measurement to sort runs by placement.
 *
 *   cc -O2 -pthread scripts/core-rtt.c -o /tmp/core-rtt && /tmp/core-rtt */
#define _GNU_SOURCE
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdio.h>
#include <time.h>

enum { ROUNDS = 200000 };
static _Alignas(64) atomic_long token;

static void pin(int cpu) {
    cpu_set_t set;
    CPU_ZERO(&set);
    CPU_SET(cpu, &set);
    pthread_setaffinity_np(pthread_self(), sizeof set, &set);
}

/* Odd values are the pinger's, even ones the ponger's. */
static void *ponger(void *arg) {
    (void)arg;
    pin(1);
    for (long i = 0; i < ROUNDS; i++) {
        while (atomic_load_explicit(&token, memory_order_acquire) != 2 * i + 1)
            ;
        atomic_store_explicit(&token, 2 * i + 2, memory_order_release);
    }
    return NULL;
}

int main(void) {
    pthread_t t;
    struct timespec a, b;
    pin(0);
    pthread_create(&t, NULL, ponger, NULL);
    clock_gettime(CLOCK_MONOTONIC, &a);
    for (long i = 0; i < ROUNDS; i++) {
        atomic_store_explicit(&token, 2 * i + 1, memory_order_release);
        while (atomic_load_explicit(&token, memory_order_acquire) != 2 * i + 2)
            ;
    }
    clock_gettime(CLOCK_MONOTONIC, &b);
    pthread_join(t, NULL);
    printf("%.0f\n", ((b.tv_sec - a.tv_sec) * 1e9 + (b.tv_nsec - a.tv_nsec)) / ROUNDS);
    return 0;
}
