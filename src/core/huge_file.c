/* huge_file.c -- see huge_file.h. */
#include "core/huge_file.h"

#include <errno.h>
#include <fcntl.h>
#include <sched.h>
#include <stdio.h>
#include <string.h>
#include <sys/mount.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#define HUGE_PAGE ((size_t)2 << 20)

/* The tmpfs's size limit: the file rounded up to whole huge pages (the default, half the RAM, would cut a larger
 * buffer short with SIGBUS instead of refusing it here). */
static void size_option(size_t bytes, char *out, size_t cap) {
    size_t pages = (bytes + HUGE_PAGE - 1) / HUGE_PAGE;
    snprintf(out, cap, "%zuk", (pages ? pages : 1) * (HUGE_PAGE >> 10));
}

/* In this process: a detached tmpfs mounted huge=always and an unlinked file on it, or -1 with errno set and
 * *step naming the call that failed. Only system calls: the namespaced child runs it between fork and _exit. */
static int mount_and_open(const char *size, const char **step) {
    int fs = fsopen("tmpfs", FSOPEN_CLOEXEC), mnt = -1, fd = -1, err = 0;
    if (fs < 0) return *step = "fsopen(tmpfs)", -1;
    if (fsconfig(fs, FSCONFIG_SET_STRING, "huge", "always", 0) != 0) *step = "tmpfs option huge=always";
    else if (fsconfig(fs, FSCONFIG_SET_STRING, "size", size, 0) != 0) *step = "tmpfs option size";
    else if (fsconfig(fs, FSCONFIG_CMD_CREATE, NULL, NULL, 0) != 0) *step = "creating the tmpfs";
    else if ((mnt = fsmount(fs, FSMOUNT_CLOEXEC, 0)) < 0) *step = "fsmount";
    else if ((fd = openat(mnt, ".", O_TMPFILE | O_RDWR | O_CLOEXEC, 0600)) < 0) *step = "a file on the tmpfs";
    if (fd < 0) err = errno;
    if (mnt >= 0) close(mnt);
    close(fs);
    errno = err;
    return fd;
}

/* ---- the unprivileged way: a child in its own user + mount namespace ---- */

static int write_all(const char *path, const char *text) {
    int fd = open(path, O_WRONLY | O_CLOEXEC);
    if (fd < 0) return -1;
    size_t n = strlen(text);
    int ok = write(fd, text, n) == (ssize_t)n;
    close(fd);
    return ok ? 0 : -1;
}

static int send_fd(int sock, int fd) {
    char byte = 0, ctl[CMSG_SPACE(sizeof fd)];
    memset(ctl, 0, sizeof ctl);
    struct iovec io = {&byte, 1};
    struct msghdr msg = {.msg_iov = &io, .msg_iovlen = 1, .msg_control = ctl, .msg_controllen = sizeof ctl};
    struct cmsghdr *h = CMSG_FIRSTHDR(&msg);
    h->cmsg_level = SOL_SOCKET, h->cmsg_type = SCM_RIGHTS, h->cmsg_len = CMSG_LEN(sizeof fd);
    memcpy(CMSG_DATA(h), &fd, sizeof fd);
    return sendmsg(sock, &msg, 0) == 1 ? 0 : -1;
}

/* The child's answer: a file descriptor, or (no descriptor) the errno and step index it failed at. */
static int recv_fd(int sock, int *err, int *step) {
    int reply[2] = {0, 0}, fd = -1;
    char ctl[CMSG_SPACE(sizeof fd)];
    struct iovec io = {reply, sizeof reply};
    struct msghdr msg = {.msg_iov = &io, .msg_iovlen = 1, .msg_control = ctl, .msg_controllen = sizeof ctl};
    ssize_t got = recvmsg(sock, &msg, MSG_CMSG_CLOEXEC);
    struct cmsghdr *h = got > 0 ? CMSG_FIRSTHDR(&msg) : NULL;
    if (h && h->cmsg_level == SOL_SOCKET && h->cmsg_type == SCM_RIGHTS) memcpy(&fd, CMSG_DATA(h), sizeof fd);
    else if (got == (ssize_t)sizeof reply && reply[1] >= 0 && reply[1] <= 5) *err = reply[0], *step = reply[1];
    else *err = got < 0 ? errno : ECHILD, *step = 0; /* the child died before answering */
    return fd;
}

static const char *const CHILD_STEPS[] = {"the child's socket", "unshare(user + mount namespace)", "setgroups deny",
                                          "uid_map", "gid_map", "the tmpfs"};

/* Between fork and _exit: system calls only (the parent has threads). Reports failure as {errno, step}. */
static _Noreturn void child(int sock, const char *uid_map, const char *gid_map, const char *size) {
    int step, fd = -1;
    const char *unused;
    if (unshare(CLONE_NEWUSER | CLONE_NEWNS) != 0) step = 1;
    else if (write_all("/proc/self/setgroups", "deny") != 0) step = 2;
    else if (write_all("/proc/self/uid_map", uid_map) != 0) step = 3;
    else if (write_all("/proc/self/gid_map", gid_map) != 0) step = 4;
    else if ((fd = mount_and_open(size, &unused)) < 0) step = 5;
    else if (send_fd(sock, fd) == 0) _exit(0);
    else step = 0;
    int reply[2] = {errno, step};
    _exit(write(sock, reply, sizeof reply) == (ssize_t)sizeof reply ? 1 : 2);
}

static int in_namespaces(const char *size, char *why, size_t cap) {
    char uid_map[64], gid_map[64];
    snprintf(uid_map, sizeof uid_map, "0 %u 1", (unsigned)geteuid());
    snprintf(gid_map, sizeof gid_map, "0 %u 1", (unsigned)getegid());
    int sv[2];
    if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv) != 0) {
        snprintf(why, cap, "socketpair: %s", strerror(errno));
        return -1;
    }
    pid_t pid = fork();
    int err = errno, step = 0, fd = -1;
    if (pid == 0) child(sv[1], uid_map, gid_map, size);
    close(sv[1]);
    if (pid > 0) fd = recv_fd(sv[0], &err, &step);
    close(sv[0]);
    int status = 0;
    if (pid > 0) while (waitpid(pid, &status, 0) < 0 && errno == EINTR) {}
    if (fd < 0)
        snprintf(why, cap, "%s%s: %s", pid < 0 ? "fork" : "as this user, ", pid < 0 ? "" : CHILD_STEPS[step],
                 strerror(err));
    return fd;
}

int tn_huge_file(size_t bytes, char *why, size_t cap) {
    char size[32];
    size_option(bytes, size, sizeof size);
    const char *step = "";
    int fd = mount_and_open(size, &step);
    if (fd < 0 && errno == EPERM) fd = in_namespaces(size, why, cap); /* not root: a namespace of our own */
    else if (fd < 0) snprintf(why, cap, "%s: %s", step, strerror(errno));
    if (fd >= 0 && ftruncate(fd, (off_t)bytes) != 0) {
        snprintf(why, cap, "sizing the file: %s", strerror(errno));
        close(fd);
        fd = -1;
    }
    return fd;
}
