/* fuzz_util -- what the libFuzzer targets of fuzz/ share: a NUL-terminated copy of the input, a private
 * scratch folder for parsers that only take a path, and the error contract every parser must keep.
 *
 * Contract checked after a parser refuses its input (returns -1 / NULL): tn_err recorded a message, the
 * message is one line, and it names the file (or "command line" for overrides). A breach is reported
 * like a crash (abort), so libFuzzer keeps the input as a reproducer.
 *
 * The scratch folder is $TANDEM_FUZZ_TMP (made if missing) or a fresh /dev/shm/tandem-fuzz-PID (tmpfs:
 * no disk writes per execution), /tmp when /dev/shm is absent; a fresh folder is removed at exit. */
#ifndef TN_FUZZ_UTIL_H
#define TN_FUZZ_UTIL_H

#include <errno.h>
#include <ftw.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "core/core.h"

/* The input as a C string (embedded NULs stay; strlen stops at the first). */
static inline char *fz_cstr(const uint8_t *d, size_t n) {
    char *s = malloc(n + 1);
    if (!s) abort();
    if (n) memcpy(s, d, n);
    s[n] = '\0';
    return s;
}

/* Static storage for the scratch folder's path ("" until made). */
static inline char *fz_dir_buf(void) {
    static char path[512];
    return path;
}

static inline int fz_rm_entry(const char *p, const struct stat *sb, int flag, struct FTW *ftw) {
    (void)sb, (void)flag, (void)ftw;
    return remove(p);
}

static inline void fz_rm_dir(void) {
    if (fz_dir_buf()[0]) nftw(fz_dir_buf(), fz_rm_entry, 16, FTW_DEPTH | FTW_PHYS);
}

/* The scratch folder (made on first use). */
static inline const char *fz_dir(void) {
    char *fz_dir_path = fz_dir_buf();
    const size_t cap = 512;
    if (fz_dir_path[0]) return fz_dir_path;
    const char *env = getenv("TANDEM_FUZZ_TMP");
    if (env && env[0]) {
        snprintf(fz_dir_path, cap, "%s/%ld", env, (long)getpid());
        if (tn_mkdirs(fz_dir_path) != 0) {
            fprintf(stderr, "fuzz: cannot create %s: %s\n", fz_dir_path, tn_errmsg());
            abort();
        }
    } else {
        struct stat st;
        const char *base = stat("/dev/shm", &st) == 0 && S_ISDIR(st.st_mode) ? "/dev/shm" : "/tmp";
        snprintf(fz_dir_path, cap, "%s/tandem-fuzz-%ld-XXXXXX", base, (long)getpid());
        if (!mkdtemp(fz_dir_path)) {
            fprintf(stderr, "fuzz: cannot create a scratch folder in %s: %s\n", base, strerror(errno));
            abort();
        }
    }
    atexit(fz_rm_dir);
    return fz_dir_path;
}

/* fz_dir()/name (malloc'ed). */
static inline char *fz_path(const char *name) { return tn_path_join(fz_dir(), name); }

/* Writes the whole file or aborts (a harness failure, not a finding). */
static inline void fz_write(const char *path, const void *d, size_t n) {
    FILE *f = fopen(path, "wb");
    if (!f || (n && fwrite(d, 1, n, f) != n) || fclose(f) != 0) {
        fprintf(stderr, "fuzz: cannot write %s: %s\n", path, strerror(errno));
        abort();
    }
}

/* Clears the recorded error so fz_check_error can tell whether the parser set one. */
static inline void fz_err_reset(void) { tn_err("%s", ""); }

/* Set by a target whose parser has a known, reported multi-line message (a control character of the
 * input echoed into it) that it may not fix itself: such messages are then noted once, not fatal. */
static inline int *fz_multiline_known(void) {
    static int known;
    return &known;
}

/* After a refusal: one recorded line that names `must_name`. */
static inline void fz_check_error(const char *must_name) {
    const char *m = tn_errmsg();
    const char *why = NULL;
    static int noted;
    if (getenv("TANDEM_FUZZ_VERBOSE")) fprintf(stderr, "fuzz: refused: %s\n", m);  /* replaying seeds by hand */
    if (strcmp(m, "unknown error") == 0) why = "no error message was recorded";
    else if ((strchr(m, '\n') || strchr(m, '\r')) && *fz_multiline_known()) {
        if (!noted++) fprintf(stderr, "fuzz: note: known multi-line error (reported, not fatal here): [%s]\n", m);
    } else if (strchr(m, '\n') || strchr(m, '\r')) why = "the error message is more than one line";
    else if (must_name && !strstr(m, must_name)) why = "the error message does not name the input";
    if (!why) return;
    fprintf(stderr, "fuzz: error contract broken: %s (expected '%s'): [%s]\n", why, must_name ? must_name : "",
            m);
    abort();
}

/* Invariant broken on accepted input: report like a crash. */
#define FZ_ASSERT(cond)                                                                                  \
    do {                                                                                                 \
        if (!(cond)) {                                                                                   \
            fprintf(stderr, "fuzz: %s:%d: invariant broken: %s\n", __FILE__, __LINE__, #cond);          \
            abort();                                                                                     \
        }                                                                                                \
    } while (0)

#endif
