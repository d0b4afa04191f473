/* output_lock.c -- see output_lock.h. */
#include "outputs/output_lock.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "core/core.h"
#include "launch/proc_identity.h"

struct tn_output_lock {
    int fd;        /* -1: held by this job's launcher, not by this process */
    int held;      /* this process holds the lock (and so removes the file at the end) */
    int made_dir;  /* output_dir did not exist before */
    char *dir, *path;
};

/* An exclusive lock on the whole file, without waiting: 0 taken, 1 held by another, -1 locks unsupported. */
static int try_lock(int fd) {
    struct flock fl = {.l_type = F_WRLCK, .l_whence = SEEK_SET, .l_start = 0, .l_len = 0};
#ifdef F_OFD_SETLK
    /* open-file-description locks: not dropped when this process closes another descriptor of the file */
    if (fcntl(fd, F_OFD_SETLK, &fl) == 0) return 0;
    if (errno == EAGAIN || errno == EACCES) return 1;
    if (errno != EINVAL) return -1;
    memset(&fl, 0, sizeof fl);
    fl.l_type = F_WRLCK, fl.l_whence = SEEK_SET;
#endif
    if (fcntl(fd, F_SETLK, &fl) == 0) return 0;
    return errno == EAGAIN || errno == EACCES ? 1 : -1;
}

/* The holder's identity from the file (it writes it right after locking: retried briefly). */
static void read_holder(int fd, char *out, size_t n) {
    out[0] = '\0';
    for (int tries = 0; tries < 20 && !out[0]; tries++) {
        ssize_t got = pread(fd, out, n - 1, 0);
        out[got > 0 ? got : 0] = '\0';
        out[strcspn(out, "\n")] = '\0';
        if (!out[0]) nanosleep(&(struct timespec){0, 10000000L}, NULL);
    }
}

/* fd is still the file at path (not unlinked or replaced since it was opened). */
static int still_at(int fd, const char *path) {
    struct stat a, b;
    return fstat(fd, &a) == 0 && stat(path, &b) == 0 && a.st_dev == b.st_dev && a.st_ino == b.st_ino;
}

tn_output_lock *tn_output_lock_take(const char *output_dir, const char *ours, const char *source_path) {
    const char *src = source_path && source_path[0] ? source_path : "<config>";
    int made = !tn_file_exists(output_dir);
    if (tn_mkdirs(output_dir) != 0) {
        tn_err("%s: output_dir %s: %s", src, output_dir, tn_errmsg());
        return NULL;
    }
    char *path = tn_path_join(output_dir, TN_OUTPUT_LOCK_FILE);
    int fd = -1, got = -1;
    /* the holder unlinks the file when it ends: a lock taken on a file that is no longer at path (unlinked between
     * our open and our lock) locks nothing, so it is taken again on the file now there */
    for (int tries = 0; tries < 100; tries++) {
        fd = open(path, O_RDWR | O_CREAT | O_CLOEXEC, 0644);
        if (fd < 0) break;
        got = try_lock(fd);
        if (still_at(fd, path)) break;
        close(fd);
        fd = -1;
    }
    if (fd < 0) {
        tn_err("%s: output_dir %s: cannot create %s: %s", src, output_dir, TN_OUTPUT_LOCK_FILE, strerror(errno));
        free(path);
        return NULL;
    }
    tn_output_lock *l = tn_xcalloc(1, sizeof *l);
    l->fd = fd, l->made_dir = made, l->dir = tn_xstrdup(output_dir), l->path = path;
    if (got == 0) {
        l->held = 1;
        char id[TN_IDENTITY_MAX + 1];
        tn_identity_self(id);
        strcat(id, "\n");
        /* fsync: a job on another machine of a shared folder reads it after opening the file */
        if (ftruncate(fd, 0) != 0 || pwrite(fd, id, strlen(id), 0) != (ssize_t)strlen(id) || fsync(fd) != 0)
            fprintf(stderr, "tandem: warning: %s: cannot record this job in it: %s\n", path, strerror(errno));
        return l;
    }
    if (got < 0) { /* e.g. an NFS mount without the lock manager */
        fprintf(stderr, "tandem: warning: output_dir %s cannot be locked (%s): a second job writing into it "
                        "at the same time would not be stopped\n", output_dir, strerror(errno));
        return l;
    }
    char holder[TN_IDENTITY_MAX], host[256];
    pid_t pid;
    unsigned long long start;
    read_holder(fd, holder, sizeof holder);
    if (ours && strcmp(holder, ours) == 0) { /* this rank's own launcher holds it for the job */
        close(fd);
        l->fd = -1;
        return l;
    }
    if (tn_identity_parse(holder, host, &pid, &start) == 0)
        tn_err("%s: output_dir %s is in use by another tandem job (pid %d on host %s): wait for it to end, stop it, "
               "or choose another output_dir", src, output_dir, (int)pid, host);
    else
        tn_err("%s: output_dir %s is in use by another tandem job (its %s names no holder yet): wait for it to end, "
               "stop it, or choose another output_dir", src, output_dir, TN_OUTPUT_LOCK_FILE);
    l->made_dir = 0;
    tn_output_lock_release(l);
    return NULL;
}

/* Only the lock file in dir. */
static int holds_only_lock(const char *dir) {
    DIR *d = opendir(dir);
    if (!d) return 0;
    int only = 1;
    for (struct dirent *e; only && (e = readdir(d));)
        only = !strcmp(e->d_name, ".") || !strcmp(e->d_name, "..") || !strcmp(e->d_name, TN_OUTPUT_LOCK_FILE);
    closedir(d);
    return only;
}

void tn_output_lock_release(tn_output_lock *l) {
    if (!l) return;
    /* a folder made for a job that wrote nothing (it failed early) goes again, still under the lock */
    if (l->made_dir && l->fd >= 0 && holds_only_lock(l->dir) && unlink(l->path) == 0) rmdir(l->dir);
    /* the file goes while still locked, so no folder a job finished (an adapter to upload) keeps it; a job that
     * opened it meanwhile sees it unlinked and takes the lock on a new one (tn_output_lock_take) */
    else if (l->held) unlink(l->path);
    if (l->fd >= 0) close(l->fd);
    free(l->dir), free(l->path);
    free(l);
}
