/* comm_share.c -- one copy of a buffer for all the ranks of a machine (comm.h: tn_comm_share_machine). ZeRO-3 on one
 * machine keeps its parameters so (zero.c): every rank reads the same pages and writes only its own chunks, so
 * there is nothing to gather.
 *
 * Local rank 0 copies the range into an unlinked file on a huge-page tmpfs of its own (core/huge_file.h: 2 MB pages
 * whatever shmem_enabled says), or into an anonymous memory file (memfd_create) where that is refused, through a
 * mapping at a fresh address;
 * the other local ranks open it through /proc/<its pid>/fd/<fd> (the same user's process: what Open MPI's
 * single-copy transport already needs), check its size and map it too. Only when every rank of the world has its
 * mapping ready does each move it over its own range with mremap(MREMAP_FIXED), which replaces the old pages in one
 * step, so a failure leaves the range as it was and pointers into it (the model's weight tensors) stay valid.
 * The file lives as long as a mapping does: nothing to clean up, even after a crash.
 * Memory placement, not a transport: nothing is sent; the caller orders the writes (each rank's own chunks) and
 * the reads with its collectives. A machine whose kernel or sandbox refuses any step keeps private copies: the
 * call returns 0 (not shared) on every rank, with the reason in *why; shared, *why says how to get 2 MB pages where
 * the file ended up on 4 KB ones (empty otherwise). */
#include <errno.h>
#include <fcntl.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "comm/comm_impl.h"
#include "core/core.h"
#include "core/huge_file.h"

#define HUGE_WHY 256 /* bytes of the reason a huge-page tmpfs was refused */

typedef struct {
    int32_t ok, node, local_rank, pid, fd, huge; /* huge: local rank 0's file is on its own huge-page tmpfs */
} share_id;

/* The file at a fresh address (NULL: reason in why). Marked for transparent huge pages, which matters for the
 * memfd only, and only where the kernel allows them for shared memory (shmem_enabled "advise" or more; Debian's
 * default is "never"): 2 MB pages, as the CPU backend's private slab has (a 4 KB page table costs the weights'
 * GEMMs page walks: docs/performance.md, "ZeRO-3 on one machine: one shared copy"). */
static void *map_file(int fd, size_t bytes, char *why, size_t cap) {
    void *p = mmap(NULL, bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    if (p == MAP_FAILED) {
        snprintf(why, cap, "mapping the shared file: %s", strerror(errno));
        return NULL;
    }
#ifdef MADV_HUGEPAGE
    (void)madvise(p, bytes, MADV_HUGEPAGE); /* a hint: EINVAL where THP is off */
#endif
    return p;
}

/* Local rank 0: the file, mapped at *at and holding the range's bytes, or -1 (reason in why). *huge: on its own
 * huge-page tmpfs; otherwise huge_why says why not. */
static int fill_file(const void *addr, size_t bytes, void **at, int32_t *huge, char *huge_why, char *why, size_t cap) {
    int fd = tn_huge_file(bytes, huge_why, HUGE_WHY);
    *huge = fd >= 0;
    if (fd < 0 && (fd = memfd_create("tandem-shared", MFD_CLOEXEC)) < 0) {
        snprintf(why, cap, "memfd_create: %s", strerror(errno));
        return -1;
    }
    if (!*huge && ftruncate(fd, (off_t)bytes) != 0) {
        snprintf(why, cap, "sizing the shared file: %s", strerror(errno));
        close(fd);
        return -1;
    }
    if (!(*at = map_file(fd, bytes, why, cap))) {
        close(fd);
        return -1;
    }
    memcpy(*at, addr, bytes); /* faults the pages in through the hinted mapping */
    return fd;
}

/* Another local rank: local rank 0's file, of the right size, mapped at *at, or -1 (reason in why). */
static int open_peer_file(const share_id *root, size_t bytes, void **at, char *why, size_t cap) {
    char path[64];
    snprintf(path, sizeof path, "/proc/%d/fd/%d", (int)root->pid, (int)root->fd);
    int fd = open(path, O_RDWR | O_CLOEXEC);
    if (fd < 0) {
        snprintf(why, cap, "opening %s: %s", path, strerror(errno));
        return -1;
    }
    struct stat st;
    if (fstat(fd, &st) != 0 || (size_t)st.st_size != bytes) {
        snprintf(why, cap, "%s is not the %zu-byte shared file", path, bytes);
        close(fd);
        return -1;
    }
    if (!(*at = map_file(fd, bytes, why, cap))) {
        close(fd);
        return -1;
    }
    return fd;
}

/* The file's mapping at `from` moved over [addr, addr + bytes): 0, or -1 with the range untouched and `from`
 * unmapped (reason in why). */
static int move_over(void *from, void *addr, size_t bytes, char *why, size_t cap) {
    if (mremap(from, bytes, bytes, MREMAP_MAYMOVE | MREMAP_FIXED, addr) != MAP_FAILED) return 0;
    snprintf(why, cap, "moving the shared file onto the buffer: %s", strerror(errno));
    munmap(from, bytes);
    return -1;
}

/* A memfd gets transparent huge pages only where shmem_enabled allows them, the file on tmpfs of our own unless it
 * says "deny": say how to allow them when they are not had (an empty line otherwise). huge_why: why the tmpfs was
 * refused (empty on other ranks than local rank 0, which do not know). */
static void page_note(int huge, const char *huge_why, char *why, size_t cap) {
    const char *knob = "/sys/kernel/mm/transparent_hugepage/shmem_enabled";
    char mode[128] = "";
    FILE *f = fopen(knob, "r");
    if (f) {
        if (!fgets(mode, sizeof mode, f)) mode[0] = 0;
        fclose(f);
    }
    why[0] = 0;
    const char *off = strstr(mode, "[deny]") ? "deny" : huge ? NULL : strstr(mode, "[never]") ? "never" : NULL;
    if (off)
        snprintf(why, cap, "on 4 KB pages: %s is %s%s%s%s; `echo advise > %s` (root) gives them 2 MB pages", knob, off,
                 huge_why[0] ? " and a huge-page tmpfs of its own was refused (" : "", huge_why,
                 huge_why[0] ? ")" : "", knob);
}

/* Back to private pages with the same contents (another rank could not map the file). 0, or -1. */
static int make_private(void *addr, size_t bytes) {
    void *fresh = mmap(NULL, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (fresh == MAP_FAILED) return -1;
    memcpy(fresh, addr, bytes);
    if (mremap(fresh, bytes, bytes, MREMAP_MAYMOVE | MREMAP_FIXED, addr) != MAP_FAILED) return 0;
    munmap(fresh, bytes);
    return -1;
}

/* Every rank's verdict: 1 when all are ok (0: why keeps this rank's own reason, or names the first rank that failed). */
static int all_ok(tn_comm *c, share_id *me, share_id *all, char *why, size_t cap) {
    if (tn_comm_allgather(c, me, sizeof *me, all) != 0) {
        snprintf(why, cap, "%s", tn_errmsg());
        return -1;
    }
    for (int r = 0; r < c->info.size; r++)
        if (!all[r].ok) {
            if (r != c->info.rank) snprintf(why, cap, "rank %d could not share it", r);
            return 0;
        }
    return 1;
}

int tn_comm_share_machine(tn_comm *c, void *addr, size_t bytes, char *why, size_t cap) {
    long page = sysconf(_SC_PAGESIZE);
    why[0] = 0;
    share_id me = {1, c->info.node, c->info.local_rank, (int32_t)getpid(), -1, 0};
    char huge_why[HUGE_WHY] = "";
    void *at = NULL; /* this rank's mapping of the file until it is moved over the range */
    if (c->info.local_size < 2)
        me.ok = 0, snprintf(why, cap, "alone on the machine");
    else if (page <= 0 || (uintptr_t)addr % (uintptr_t)page || bytes % (size_t)page || !bytes)
        me.ok = 0, snprintf(why, cap, "the buffer is not whole pages");
    else if (c->info.local_rank == 0)
        me.fd = fill_file(addr, bytes, &at, &me.huge, huge_why, why, cap), me.ok = me.fd >= 0;
    share_id *all = tn_xcalloc((size_t)c->info.size, sizeof *all);
    int rc = all_ok(c, &me, all, why, cap); /* local rank 0's file is ready everywhere */
    const share_id *root = NULL;
    for (int r = 0; r < c->info.size; r++)
        if (all[r].node == me.node && all[r].local_rank == 0) root = &all[r];
    int fd = me.fd;
    if (rc == 1) { /* every rank takes part in each verdict */
        if (c->info.local_rank != 0) {
            fd = root ? open_peer_file(root, bytes, &at, why, cap) : -1;
            me.ok = fd >= 0;
            if (!root) snprintf(why, cap, "no local rank 0 on this machine");
        }
        rc = all_ok(c, &me, all, why, cap);
    }
    if (rc == 1) {
        me.ok = move_over(at, addr, bytes, why, cap) == 0;
        at = NULL;
        rc = all_ok(c, &me, all, why, cap); /* local rank 0 closes its file only once everyone has mapped it */
        if (rc != 1 && me.ok && make_private(addr, bytes) != 0)
            tn_die("comm: a machine's shared buffer is half set up (%s) and cannot be made private again", why);
    }
    if (rc == 1) page_note(root && root->huge, huge_why, why, cap);
    if (at) munmap(at, bytes);
    if (fd >= 0) close(fd);
    free(all);
    return rc < 0 ? tn_err("comm: sharing a buffer inside the machine: %s", why) : rc;
}
