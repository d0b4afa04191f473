/* core -- what every stage shares: error reporting, checked allocation, whole-file and atomic I/O.
 *
 * Error discipline (as in SQLite/Redis): a function that can fail returns int (0 ok, -1 failure) or a
 * pointer (NULL failure) and records ONE human-readable line with tn_err(); the caller either adds
 * nothing and propagates, or reports tn_errmsg() and stops. Messages name the file, key or line and
 * what was expected. Allocation failure of working memory is fatal (tn_xmalloc prints and exits). */
#ifndef TN_CORE_H
#define TN_CORE_H

#include <stddef.h>
#include <stdint.h>

#if defined(__GNUC__)
#define TN_PRINTF(a, b) __attribute__((format(printf, a, b)))
#else
#define TN_PRINTF(a, b)
#endif

/* Record the current error (replaces any earlier one). Always returns -1 so `return tn_err(...)` works. */
int tn_err(const char *fmt, ...) TN_PRINTF(1, 2);
const char *tn_errmsg(void);
/* A name or key from a file, fit for a one-line message: at most 80 bytes (then "..."), control characters
 * as '?'. Returns buf. */
const char *tn_shown(const char *s, char buf[static 96]);

/* Fatal: print "tandem: error: ..." and exit(1). For broken invariants and out-of-memory only. */
_Noreturn void tn_die(const char *fmt, ...) TN_PRINTF(1, 2);

void *tn_xmalloc(size_t n);              /* never returns NULL */
void *tn_xcalloc(size_t n, size_t size); /* overflow-checked */
void *tn_xrealloc(void *p, size_t n);
char *tn_xstrdup(const char *s);
/* 64-byte aligned (AVX-friendly) zeroed block for slabs; free with tn_free_aligned. */
float *tn_xalloc_floats(size_t n);
void tn_free_aligned(void *p);

/* Read a whole file (NUL-terminated for convenience; *len excludes the NUL). max_bytes bounds the size
 * accepted (0 = no bound). Returns NULL with tn_err set. */
char *tn_read_file(const char *path, size_t *len, size_t max_bytes);

/* Atomic write: PATH.tmp.<pid>, write, fsync, rename over PATH, fsync the folder. */
typedef struct tn_atomic_file tn_atomic_file;
tn_atomic_file *tn_atomic_open(const char *path);
int tn_atomic_write(tn_atomic_file *f, const void *data, size_t n);
int tn_atomic_commit(tn_atomic_file *f);  /* closes; 0 ok */
void tn_atomic_abort(tn_atomic_file *f);  /* closes and removes the temporary */
int tn_write_file_atomic(const char *path, const void *data, size_t n);

int tn_mkdirs(const char *path);          /* mkdir -p */
char *tn_path_join(const char *dir, const char *name); /* malloc'ed */
int tn_file_exists(const char *path);

double tn_now(void);                      /* monotonic seconds */

/* Deterministic RNG (splitmix64 seeding + xoshiro256**), identical on every rank and build. */
typedef struct { uint64_t s[4]; } tn_rng;
void tn_rng_seed(tn_rng *r, uint64_t seed);
uint64_t tn_rng_next(tn_rng *r);
double tn_rng_uniform(tn_rng *r);         /* [0, 1) */
double tn_rng_normal(tn_rng *r);          /* N(0, 1), Box-Muller */
/* 64-bit hash of bytes (8 bytes per round, not cryptographic): fingerprints of builds, configs, weights. */
uint64_t tn_hash64(const void *data, size_t n, uint64_t seed);

/* Stateless hash of (seed, counter) -> uniform [0,1): lets backward regenerate a dropout mask. */
float tn_hash_uniform(uint64_t seed, uint64_t counter);

#endif
