/* huge_file -- an unlinked memory file whose pages are 2 MB transparent huge pages whatever the system setting for
 * shared memory says.
 *
 * Shared memory (memfd, MAP_SHARED|MAP_ANONYMOUS) gets huge pages only where
 * /sys/kernel/mm/transparent_hugepage/shmem_enabled allows them, and the kernel's default (Debian's too) is "never":
 * a buffer every rank of a machine maps then sits on 4 KB pages, whose page walks cost the weights' GEMMs 3-5% of a
 * step on the VMs measured (docs/performance.md). That setting governs only the kernel's internal mount; a tmpfs of
 * one's own follows its `huge=` option. So the file is made on a private tmpfs mounted `huge=always`: with the new
 * mount API (fsopen / fsmount, Linux 5.2) the mount is never attached to any directory, and an O_TMPFILE file on it
 * keeps it alive exactly as long as the file is open or mapped. Root mounts it directly; any other user does it in
 * a short-lived child inside its own user and mount namespace (unprivileged user namespaces, Debian's default), which
 * hands the file back over a socket. Only "deny" in shmem_enabled takes huge pages from every mount. */
#ifndef TN_HUGE_FILE_H
#define TN_HUGE_FILE_H

#include <stddef.h>

/* An open read-write file of `bytes` bytes (zeros) on its own huge-page tmpfs, close-on-exec, or -1 with the reason
 * in why (no new mount API, no namespaces in this sandbox, ...): the caller falls back to memfd_create. Other
 * processes of the same user reach it through /proc/<pid>/fd/<fd>, as a memfd. */
int tn_huge_file(size_t bytes, char *why, size_t cap);

#endif
