/* The TSC's rate in MHz against CLOCK_MONOTONIC, over about one second (x86-64). bench/vs_perftest.py
 * compares it with /proc/cpuinfo's "cpu MHz", which perftest divides its cycle counts by. */
#include <stdio.h>
#include <time.h>
#include <x86intrin.h>

static double now_us(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec * 1e6 + t.tv_nsec / 1e3;
}

int main(void)
{
    double t0 = now_us();
    unsigned long long c0 = __rdtsc();
    double t1;
    while ((t1 = now_us()) - t0 < 1e6)
        ;
    unsigned long long c1 = __rdtsc();
    printf("%.3f\n", (double)(c1 - c0) / (t1 - t0));
    return 0;
}
