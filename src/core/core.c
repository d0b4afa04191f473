/* core.c -- error line, checked allocation, file I/O, RNG. See core.h. */
#include "core/core.h"
#include "core/oom.h"

#include <errno.h>
#include <fcntl.h>
#include <libgen.h>
#include <math.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

static _Thread_local char g_errmsg[1024];

int tn_err(const char *fmt, ...) {
    char tmp[sizeof g_errmsg];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(tmp, sizeof tmp, fmt, ap); /* via tmp: fmt's arguments may point into g_errmsg */
    va_end(ap);
    /* one line, whatever a file put into a name we quote: control characters are shown as '?' */
    for (char *p = tmp; *p; p++)
        if ((unsigned char)*p < 0x20) *p = '?';
    memcpy(g_errmsg, tmp, sizeof tmp);
    return -1;
}

const char *tn_errmsg(void) { return g_errmsg[0] ? g_errmsg : "unknown error"; }

const char *tn_shown(const char *s, char buf[static 96]) {
    size_t i = 0;
    for (; s[i] && i < 80; i++) buf[i] = (unsigned char)s[i] < 0x20 ? '?' : s[i];
    if (s[i]) buf[i++] = '.', buf[i++] = '.', buf[i++] = '.';
    buf[i] = 0;
    return buf;
}

void tn_die(const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    fputs("tandem: error: ", stderr);
    vfprintf(stderr, fmt, ap);
    fputc('\n', stderr);
    va_end(ap);
    exit(1);
}

void *tn_xmalloc(size_t n) {
    void *p = malloc(n ? n : 1);
    if (!p) tn_die_oom(n);
    return p;
}

void *tn_xcalloc(size_t n, size_t size) {
    void *p = calloc(n ? n : 1, size ? size : 1);
    if (!p) tn_die_oom(n > SIZE_MAX / (size ? size : 1) ? SIZE_MAX : n * size);
    return p;
}

void *tn_xrealloc(void *p, size_t n) {
    void *q = realloc(p, n ? n : 1);
    if (!q) tn_die_oom(n);
    return q;
}

char *tn_xstrdup(const char *s) {
    size_t n = strlen(s) + 1;
    return memcpy(tn_xmalloc(n), s, n);
}

float *tn_xalloc_floats(size_t n) {
    if (n > SIZE_MAX / sizeof(float) - 64) tn_die("slab of %zu floats is too large", n);
    size_t bytes = (n * sizeof(float) + 63) & ~(size_t)63;
    void *p = NULL;
    if (posix_memalign(&p, 64, bytes ? bytes : 64) != 0) tn_die_oom(bytes);
    memset(p, 0, bytes);
    return p;
}

void tn_free_aligned(void *p) { free(p); }

char *tn_read_file(const char *path, size_t *len, size_t max_bytes) {
    /* O_NONBLOCK: opening a FIFO without a writer (or some devices) would otherwise wait forever before the
     * regular-file check below could refuse it */
    int fd = open(path, O_RDONLY | O_NONBLOCK | O_CLOEXEC);
    FILE *f = fd >= 0 ? fdopen(fd, "rb") : NULL;
    if (!f) {
        tn_err("%s: cannot open: %s", path, strerror(errno));
        if (fd >= 0) close(fd);
        return NULL;
    }
    struct stat st;
    if (fstat(fileno(f), &st) != 0 || !S_ISREG(st.st_mode)) {
        fclose(f);
        tn_err("%s: not a regular file", path);
        return NULL;
    }
    fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) & ~O_NONBLOCK);
    size_t n = (size_t)st.st_size;
    if (max_bytes && n > max_bytes) {
        fclose(f);
        tn_err("%s: file is %zu bytes, more than the %zu accepted", path, n, max_bytes);
        return NULL;
    }
    char *buf = malloc(n + 1);
    if (!buf) {
        fclose(f);
        tn_err("%s: out of memory reading %zu bytes", path, n);
        return NULL;
    }
    size_t got = fread(buf, 1, n, f);
    int bad = ferror(f);
    fclose(f);
    if (got != n || bad) {
        free(buf);
        tn_err("%s: read failed (%zu of %zu bytes)", path, got, n);
        return NULL;
    }
    buf[n] = 0;
    if (len) *len = n;
    return buf;
}

struct tn_atomic_file {
    FILE *f;
    char *path, *tmp;
};

tn_atomic_file *tn_atomic_open(const char *path) {
    tn_atomic_file *a = tn_xcalloc(1, sizeof *a);
    a->path = tn_xstrdup(path);
    size_t n = strlen(path) + 32;
    a->tmp = tn_xmalloc(n);
    snprintf(a->tmp, n, "%s.tmp.%ld", path, (long)getpid());
    a->f = fopen(a->tmp, "wb");
    if (!a->f) {
        tn_err("%s: cannot create: %s", a->tmp, strerror(errno));
        free(a->path);
        free(a->tmp);
        free(a);
        return NULL;
    }
    return a;
}

int tn_atomic_write(tn_atomic_file *a, const void *data, size_t n) {
    if (n && fwrite(data, 1, n, a->f) != n) return tn_err("%s: write failed: %s", a->tmp, strerror(errno));
    return 0;
}

static void atomic_free(tn_atomic_file *a) {
    free(a->path);
    free(a->tmp);
    free(a);
}

void tn_atomic_abort(tn_atomic_file *a) {
    if (!a) return;
    if (a->f) fclose(a->f);
    unlink(a->tmp);
    atomic_free(a);
}

static void fsync_parent_dir(const char *path) {
    char *copy = tn_xstrdup(path);
    int fd = open(dirname(copy), O_RDONLY | O_DIRECTORY);
    if (fd >= 0) {
        fsync(fd); /* best effort: some filesystems refuse fsync on folders */
        close(fd);
    }
    free(copy);
}

int tn_atomic_commit(tn_atomic_file *a) {
    int rc = 0;
    if (fflush(a->f) != 0 || fsync(fileno(a->f)) != 0)
        rc = tn_err("%s: write failed: %s", a->tmp, strerror(errno));
    if (fclose(a->f) != 0 && rc == 0) rc = tn_err("%s: close failed: %s", a->tmp, strerror(errno));
    a->f = NULL;
    if (rc == 0 && rename(a->tmp, a->path) != 0) rc = tn_err("%s: rename failed: %s", a->path, strerror(errno));
    if (rc != 0) {
        unlink(a->tmp);
    } else {
        fsync_parent_dir(a->path);
    }
    atomic_free(a);
    return rc;
}

int tn_write_file_atomic(const char *path, const void *data, size_t n) {
    tn_atomic_file *a = tn_atomic_open(path);
    if (!a) return -1;
    if (tn_atomic_write(a, data, n) != 0) {
        tn_atomic_abort(a);
        return -1;
    }
    return tn_atomic_commit(a);
}

int tn_mkdirs(const char *path) {
    char *p = tn_xstrdup(path);
    for (char *s = p + 1;; s++) {
        if (*s == '/' || *s == 0) {
            char c = *s;
            *s = 0;
            if (mkdir(p, 0777) != 0 && errno != EEXIST) {
                int e = errno;
                tn_err("%s: cannot create folder: %s", p, strerror(e));
                free(p);
                return -1;
            }
            *s = c;
            if (!c) break;
        }
    }
    free(p);
    struct stat st;
    if (stat(path, &st) != 0 || !S_ISDIR(st.st_mode)) return tn_err("%s: exists and is not a folder", path);
    return 0;
}

char *tn_path_join(const char *dir, const char *name) {
    size_t n = strlen(dir) + strlen(name) + 2;
    char *p = tn_xmalloc(n);
    snprintf(p, n, "%s/%s", dir, name);
    return p;
}

int tn_file_exists(const char *path) {
    struct stat st;
    return stat(path, &st) == 0;
}

double tn_now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static uint64_t splitmix64(uint64_t *x) {
    uint64_t z = (*x += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

void tn_rng_seed(tn_rng *r, uint64_t seed) {
    for (int i = 0; i < 4; i++) r->s[i] = splitmix64(&seed);
}

static uint64_t rotl(uint64_t x, int k) { return (x << k) | (x >> (64 - k)); }

uint64_t tn_rng_next(tn_rng *r) {
    uint64_t *s = r->s, out = rotl(s[1] * 5, 7) * 9, t = s[1] << 17;
    s[2] ^= s[0];
    s[3] ^= s[1];
    s[1] ^= s[2];
    s[0] ^= s[3];
    s[2] ^= t;
    s[3] = rotl(s[3], 45);
    return out;
}

double tn_rng_uniform(tn_rng *r) { return (double)(tn_rng_next(r) >> 11) * 0x1.0p-53; }

double tn_rng_normal(tn_rng *r) {
    double u1 = tn_rng_uniform(r), u2 = tn_rng_uniform(r);
    if (u1 < 1e-300) u1 = 1e-300;
    return sqrt(-2.0 * log(u1)) * cos(6.283185307179586 * u2);
}

float tn_hash_uniform(uint64_t seed, uint64_t counter) {
    uint64_t x = seed ^ (counter * 0xD1B54A32D192ED03ull);
    return (float)(splitmix64(&x) >> 40) * 0x1.0p-24f;
}

uint64_t tn_hash64(const void *data, size_t n, uint64_t seed) {
    const unsigned char *p = data;
    uint64_t h = seed ^ (0x9E3779B97F4A7C15ull * (n + 1));
    size_t i = 0;
    for (; i + 8 <= n; i += 8) {
        uint64_t w;
        memcpy(&w, p + i, 8);
        h = (h ^ (w * 0xBF58476D1CE4E5B9ull)) * 0x94D049BB133111EBull;
        h ^= h >> 29;
    }
    uint64_t tail = 0;
    memcpy(&tail, p + i, n - i);
    h = (h ^ (tail * 0xBF58476D1CE4E5B9ull)) * 0x94D049BB133111EBull;
    return h ^ (h >> 31);
}
