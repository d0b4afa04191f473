/* test_unit_huge_file -- the shared-memory file on a huge-page tmpfs of its own (src/core/huge_file.h), the one ZeRO-3
 * maps on a machine (comm_share.c): its size and zeros, a second mapping through /proc/self/fd seeing the first one's
 * writes, every byte of a size that is not whole huge pages writable (the tmpfs's size limit rounds up, not down:
 * SIGBUS otherwise), and the mapping's pages 2 MB ones (ShmemPmdMapped in /proc/self/smaps) whatever
 * /sys/kernel/mm/transparent_hugepage/shmem_enabled says, unless it says "deny". As root the same again as an
 * unprivileged user (uid 65534), who needs a user namespace: where the system refuses those the call must refuse
 * cleanly, with a reason. */
#include <fcntl.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <grp.h>
#include <sys/wait.h>
#include <unistd.h>

#include "core/huge_file.h"
#include "testlib.h"

#define MB ((size_t)1 << 20)
#define HUGE (2 * MB)

static long read_long(const char *path, long otherwise) {
    FILE *f = fopen(path, "r");
    long v = otherwise;
    if (f) {
        if (fscanf(f, "%ld", &v) != 1) v = otherwise;
        fclose(f);
    }
    return v;
}

/* THP exists and shmem_enabled is not "deny" (which takes huge pages from every mount). */
static int thp_possible(void) {
    char mode[160] = "";
    FILE *f = fopen("/sys/kernel/mm/transparent_hugepage/shmem_enabled", "r");
    if (!f) return 0;
    if (!fgets(mode, sizeof mode, f)) mode[0] = 0;
    fclose(f);
    return mode[0] && !strstr(mode, "[deny]");
}

/* The system lets an unprivileged user make a user namespace (Debian's default; Ubuntu's AppArmor may not). */
static int userns_allowed(void) {
    return read_long("/proc/sys/user/max_user_namespaces", 0) > 0 &&
           read_long("/proc/sys/kernel/unprivileged_userns_clone", 1) == 1 &&
           read_long("/proc/sys/kernel/apparmor_restrict_unprivileged_userns", 0) == 0;
}

/* kB of the mapping starting at addr that sit in PMD-mapped (2 MB) shared pages, -1 when not found. */
static long pmd_kb(const void *addr) {
    FILE *f = fopen("/proc/self/smaps", "r");
    if (!f) return -1;
    char line[512];
    int in = 0;
    long kb = -1;
    while (fgets(line, sizeof line, f)) {
        unsigned long lo, hi;
        if (sscanf(line, "%lx-%lx ", &lo, &hi) == 2) in = lo == (uintptr_t)addr;
        else if (in && sscanf(line, "ShmemPmdMapped: %ld kB", &kb) == 1) break;
    }
    fclose(f);
    return kb;
}

/* fd mapped at a 2 MB-aligned address (what the CPU backend's slab has), or NULL. */
static unsigned char *map_aligned(int fd, size_t bytes) {
    unsigned char *r = mmap(NULL, bytes + HUGE, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (r == MAP_FAILED) return NULL;
    unsigned char *at = (unsigned char *)(((uintptr_t)r + HUGE - 1) & ~(uintptr_t)(HUGE - 1));
    void *p = mmap(at, bytes, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_FIXED, fd, 0);
    return p == MAP_FAILED ? NULL : p;
}

/* Everything about one file; returns the number of failed checks (0 = all held). */
static int check_file(size_t bytes, int want_huge) {
    int before = tl_failures;
    char why[256] = "";
    int fd = tn_huge_file(bytes, why, sizeof why);
    if (!CHECKF(fd >= 0, "tn_huge_file(%zu): %s", bytes, why)) return tl_failures - before;
    struct stat st;
    CHECK(fstat(fd, &st) == 0 && (size_t)st.st_size == bytes);
    CHECK(fcntl(fd, F_GETFD) & FD_CLOEXEC);
    unsigned char *a = map_aligned(fd, bytes);
    if (CHECK(a != NULL)) {
        CHECK(a[0] == 0 && a[bytes / 2] == 0 && a[bytes - 1] == 0);
        for (size_t i = 0; i < bytes; i++) a[i] = (unsigned char)(i * 7 + 3); /* every byte: no SIGBUS */
        char path[64];
        snprintf(path, sizeof path, "/proc/self/fd/%d", fd);
        int fd2 = open(path, O_RDWR | O_CLOEXEC); /* what another local rank does */
        unsigned char *b = fd2 >= 0 ? map_aligned(fd2, bytes) : NULL;
        if (CHECKF(b != NULL, "a second mapping through %s", path)) {
            size_t bad = 0;
            for (size_t i = 0; i < bytes; i++) bad += b[i] != (unsigned char)(i * 7 + 3);
            CHECKF(bad == 0, "%zu bytes differ between the two mappings", bad);
            munmap(b, bytes);
        }
        if (fd2 >= 0) close(fd2);
        long kb = pmd_kb(a);
        printf("  %zu bytes: %ld kB in 2 MB pages (expected %s)\n", bytes, kb, want_huge ? "> 0" : "any");
        if (want_huge) CHECK(kb >= (long)(HUGE >> 10));
        munmap(a, bytes);
    }
    close(fd);
    return tl_failures - before;
}

/* As uid 65534 in a child: 0 all held, 1 checks failed, 3 refused with a reason, 4 refused without one. */
static int as_nobody(size_t bytes, int want_huge) {
    fflush(stdout);
    pid_t pid = fork();
    if (pid == 0) {
        if (setgroups(0, NULL) != 0 || setresgid(65534, 65534, 65534) != 0 || setresuid(65534, 65534, 65534) != 0)
            _exit(5);
        /* a process that changed its uid is not dumpable, so its /proc/self files stay root's; a user's process
         * started normally is dumpable */
        if (prctl(PR_SET_DUMPABLE, 1) != 0) _exit(6);
        char why[256] = "";
        int fd = tn_huge_file(bytes, why, sizeof why);
        if (fd < 0) {
            printf("  as uid 65534: refused: %s\n", why);
            fflush(stdout);
            _exit(why[0] ? 3 : 4);
        }
        close(fd);
        int failed = check_file(bytes, want_huge);
        fflush(stdout);
        _exit(failed ? 1 : 0);
    }
    int status = 0;
    if (pid < 0 || waitpid(pid, &status, 0) != pid || !WIFEXITED(status)) return -1;
    return WEXITSTATUS(status);
}

static void on_sigbus(int sig) {
    (void)sig;
    static const char msg[] = "check failed: SIGBUS writing the file: the tmpfs's size limit is below its size\n";
    if (write(1, msg, sizeof msg - 1) < 0) _exit(2);
    _exit(1);
}

int main(void) {
    signal(SIGBUS, on_sigbus);
    int huge = thp_possible();
    printf("shmem huge pages possible on some mount: %s\n", huge ? "yes" : "no (no THP, or shmem_enabled deny)");
    check_file(8 * MB, huge);
    check_file(3 * MB + 4096, huge);          /* not whole huge pages: the tail is writable */
    char why[64] = "";
    int tiny = tn_huge_file(0, why, sizeof why); /* an empty buffer is a file of 0 bytes, not an error */
    CHECK(tiny >= 0);
    if (tiny >= 0) close(tiny);
    if (geteuid() == 0) {
        int allowed = userns_allowed(), rc = as_nobody(4 * MB, huge);
        printf("as uid 65534 (user namespaces %s): %d\n", allowed ? "allowed" : "refused by the system", rc);
        if (allowed) CHECKF(rc == 0, "as uid 65534 the file must work through a user namespace (child exit %d)", rc);
        else CHECKF(rc == 0 || rc == 3, "as uid 65534 it must work or refuse with a reason (child exit %d)", rc);
    }
    return tl_done("test_unit_huge_file");
}
