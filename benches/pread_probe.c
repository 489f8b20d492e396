/* Reading a cached file: pread through a buffer of KIB KiB (mode 0) against
 * mmap windows of KIB KiB (1: plain, 2: MAP_POPULATE, 3: MADV_WILLNEED),
 * touching every cache line. The probe behind READ_CHUNK (src/perf/stream.rs).
 *   gcc -O2 -o pread_probe benches/pread_probe.c
 *   ./pread_probe FILE MODE KIB      (the file cached first: cat FILE >/dev/null)
 * Here, a 25 MB recording: pread 3.4 ms through 64-128 KiB, 17-23 ms through
 * 256 KiB to 4 MiB; mmap 3.4-4 ms. */
#define _GNU_SOURCE
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

static double now(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec + t.tv_nsec / 1e9;
}

int main(int argc, char **argv) {
    if (argc < 4) {
        fprintf(stderr, "usage: %s FILE MODE KIB\n", argv[0]);
        return 2;
    }
    int fd = open(argv[1], O_RDONLY);
    struct stat st;
    if (fd < 0 || fstat(fd, &st) < 0) return 1;
    size_t n = st.st_size, w = (size_t)atoi(argv[3]) << 10;
    int mode = atoi(argv[2]);
    unsigned long sum = 0;
    double t0 = now();
    if (mode == 0) {
        char *b = malloc(w);
        for (size_t o = 0; o < n; o += w) {
            ssize_t r = pread(fd, b, w, o);
            for (ssize_t i = 0; i < r; i += 64) sum += b[i];
        }
    } else {
        for (size_t o = 0; o < n; o += w) {
            size_t l = n - o < w ? n - o : w;
            char *p = mmap(0, l, PROT_READ, MAP_PRIVATE | (mode == 2 ? MAP_POPULATE : 0), fd, o);
            if (p == MAP_FAILED) return 1;
            if (mode == 3) madvise(p, l, MADV_WILLNEED);
            for (size_t i = 0; i < l; i += 64) sum += p[i];
            munmap(p, l);
        }
    }
    printf("mode %d, %zu KiB: %.2f ms (sum %lu)\n", mode, w >> 10, (now() - t0) * 1e3, sum);
    return 0;
}
