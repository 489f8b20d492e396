/* The floor for the benchmark: walk every process's executable VMAs (with
 * argument "all": every VMA) with PROCMAP_QUERY (names fetched, no build
 * ids), encode nothing, write nothing. Independent of mmap2-synth's code on
 * purpose. */
#define _GNU_SOURCE
#include <dirent.h>
#include <fcntl.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/ioctl.h>
#include <unistd.h>

struct procmap_query {
    uint64_t size, query_flags, query_addr, vma_start, vma_end, vma_flags, vma_page_size,
        vma_offset, inode;
    uint32_t dev_major, dev_minor, vma_name_size, build_id_size;
    uint64_t vma_name_addr, build_id_addr;
};
#define PROCMAP_QUERY 0xC0686611UL

int main(int argc, char **argv) {
    int all = argc > 1 && argv[1][0] == 'a';
    DIR *d = opendir("/proc");
    if (!d) return 1;
    struct dirent *e;
    char path[64], name[4096];
    unsigned long vmas = 0, procs = 0;
    while ((e = readdir(d))) {
        char *end;
        long pid = strtol(e->d_name, &end, 10);
        if (*end || pid <= 0 || pid == getpid()) continue;
        snprintf(path, sizeof path, "/proc/%ld/maps", pid);
        int fd = open(path, O_RDONLY);
        if (fd < 0) continue;
        procs++;
        uint64_t addr = 0;
        for (;;) {
            struct procmap_query q = {0};
            q.size = sizeof q;
            q.query_flags = all ? 0x10 : 0x10 | 0x04; /* COVERING_OR_NEXT | EXECUTABLE */
            q.query_addr = addr;
            q.vma_name_size = sizeof name;
            q.vma_name_addr = (uint64_t)(uintptr_t)name;
            if (ioctl(fd, PROCMAP_QUERY, &q) < 0) break;
            vmas++;
            addr = q.vma_end;
        }
        close(fd);
    }
    closedir(d);
    fprintf(stderr, "floor: %lu processes, %lu %s VMAs\n", procs, vmas, all ? "" : "exec");
    return 0;
}
