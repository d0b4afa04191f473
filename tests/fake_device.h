/* fake_device -- a device whose "memory" is host pages kept PROT_NONE except inside its own copies, for tests of the
 * code that handles accelerator memory on a CPU-only machine: any direct touch of a device buffer by host code
 * (a memcpy, a loop, MPI, shared memory) crashes the test instead of passing by accident. Header-only: each test
 * that includes it has its own device. fd_to_host / fd_to_device count the bytes copied unless fd_quiet is set
 * (a test's own reads and writes). fd_to_host_async copies nothing until fd_copied says the copy has landed (the
 * third poll, or a wait), and poisons the host buffer with NaN meanwhile: code that reads it before then computes
 * NaN. fd_host_alloc / fd_host_free stand for pinned memory and count what is held. */
#ifndef TN_FAKE_DEVICE_H
#define TN_FAKE_DEVICE_H

#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "core/core.h"

#define FD_MAX_BUFS 64
static struct {
    char *p;
    size_t bytes, mapped;
} fd_bufs[FD_MAX_BUFS];
static size_t fd_to_host_bytes, fd_to_device_bytes; /* copies the code under test asked for */
static int fd_quiet;

static inline int fd_find(const void *p) {
    for (int k = 0; k < FD_MAX_BUFS; k++)
        if (fd_bufs[k].p && (const char *)p >= fd_bufs[k].p && (const char *)p < fd_bufs[k].p + fd_bufs[k].bytes)
            return k;
    return -1;
}

static inline void *fd_alloc(size_t bytes) {
    size_t page = (size_t)sysconf(_SC_PAGESIZE), mapped = (bytes + page - 1) / page * page;
    void *p = mmap(NULL, mapped ? mapped : page, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (p == MAP_FAILED) tn_die("mmap failed");
    int k = 0;
    while (k < FD_MAX_BUFS && fd_bufs[k].p) k++;
    if (k == FD_MAX_BUFS) tn_die("fake device: more than %d buffers", FD_MAX_BUFS);
    fd_bufs[k].p = p, fd_bufs[k].bytes = bytes ? bytes : 1, fd_bufs[k].mapped = mapped ? mapped : page;
    return p;
}

static inline void fd_free(void *p) {
    int k = fd_find(p);
    if (k < 0) tn_die("fake device: free of %p, not a device buffer", p);
    munmap(fd_bufs[k].p, fd_bufs[k].mapped);
    fd_bufs[k].p = NULL;
}

static inline void fd_open(int k, int prot) {
    if (mprotect(fd_bufs[k].p, fd_bufs[k].mapped, prot) != 0) tn_die("fake device: mprotect failed");
}

static inline int fd_owns(const void *p) { return fd_find(p) >= 0; }

/* [dev, dev + bytes) must lie in one buffer: its index */
static inline int fd_range(const void *dev, size_t bytes, const char *what) {
    int k = fd_find(dev);
    if (k < 0 || (const char *)dev + bytes > fd_bufs[k].p + fd_bufs[k].bytes)
        tn_die("fake device: %s outside a device buffer", what);
    return k;
}

static inline void fd_to_host(void *host, const void *dev, size_t bytes) {
    int k = fd_range(dev, bytes, "to_host");
    fd_open(k, PROT_READ);
    memcpy(host, dev, bytes);
    fd_open(k, PROT_NONE);
    if (!fd_quiet) fd_to_host_bytes += bytes;
}

static inline void fd_to_device(void *dev, const void *host, size_t bytes) {
    int k = fd_range(dev, bytes, "to_device");
    fd_open(k, PROT_READ | PROT_WRITE);
    memcpy(dev, host, bytes);
    fd_open(k, PROT_NONE);
    if (!fd_quiet) fd_to_device_bytes += bytes;
}

#include <stdlib.h>

#define FD_MAX_COPIES 256
static struct {
    void *host;
    const void *dev;
    size_t bytes;
    int polls_left;
} fd_copies[FD_MAX_COPIES];
static int fd_pinned_held; /* host buffers from fd_host_alloc not freed yet */
static int fd_async_copies, fd_polls_refused; /* copies queued; polls that found one still in flight */

static inline void *fd_to_host_async(void *host, const void *dev, size_t bytes) {
    fd_range(dev, bytes, "to_host_async");
    int k = 0;
    while (k < FD_MAX_COPIES && fd_copies[k].host) k++;
    if (k == FD_MAX_COPIES) tn_die("fake device: more than %d copies in flight", FD_MAX_COPIES);
    memset(host, 0xff, bytes); /* NaN until the copy lands */
    fd_copies[k].host = host, fd_copies[k].dev = dev, fd_copies[k].bytes = bytes, fd_copies[k].polls_left = 2;
    fd_async_copies++;
    return &fd_copies[k];
}

static inline int fd_copied(void *token, int wait) {
    __typeof__(&fd_copies[0]) c = token;
    if (!wait && c->polls_left-- > 0) {
        fd_polls_refused++;
        return 0;
    }
    fd_to_host(c->host, c->dev, c->bytes); /* it lands now */
    c->host = NULL;
    return 1;
}

static inline void *fd_host_alloc(size_t bytes) {
    fd_pinned_held++;
    return tn_xmalloc(bytes);
}

static inline void fd_host_free(void *p) {
    fd_pinned_held--;
    free(p);
}

#endif
