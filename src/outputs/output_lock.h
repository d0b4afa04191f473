/* output_lock -- one job per output_dir.
 *
 * Two jobs writing one output_dir mix their checkpoints, logs and results without a word (one can even
 * resume from the other's live checkpoint). So a job holds an exclusive lock on output_dir/.tandem.lock
 * for its whole life: rank 0 of `tandem train` (or of an mpirun/srun launch), or the launcher of
 * `tandem launch`, whose rank 0 then finds the lock held by its own launcher and goes on. A second job
 * stops at once with one line naming the folder and the holder (host, pid). The lock is an fcntl record
 * lock (open-file-description lock where the kernel has it): the kernel drops it when the holder dies, so
 * `kill -9` leaves no stale lock (the file stays then, holding the last holder's identity, and the next job takes
 * it). A job that ends removes the file while still holding the lock, so a finished output_dir (an adapter folder
 * to upload) does not carry it; a job that opened the file just before is told by its inode and locks afresh.
 *
 * Shared folders: on NFS (v4, or v3 with the lock manager) fcntl locks are granted by the server, so the
 * lock holds across machines; a holder's machine that crashes releases it when the server's lease ends
 * (NFSv4: about 90 s). On a mount without locking (`nolock`) the lock is only seen on that machine; a file
 * system that refuses locks gets a warning, and the job goes on unlocked. */
#ifndef TN_OUTPUT_LOCK_H
#define TN_OUTPUT_LOCK_H

#define TN_OUTPUT_LOCK_FILE ".tandem.lock"

typedef struct tn_output_lock tn_output_lock;

/* Takes output_dir's lock for this process, creating output_dir when missing. ours: an identity
 * (proc_identity.h) whose holding counts as this job's (the launcher of this rank), or NULL. NULL + tn_err
 * ("<source>: output_dir DIR is in use by another tandem job (pid P on host H) ...") when another job holds
 * it or it cannot be created. */
tn_output_lock *tn_output_lock_take(const char *output_dir, const char *ours, const char *source_path);
/* Releases it (NULL is fine). An output_dir this lock created and nothing else wrote into is removed. */
void tn_output_lock_release(tn_output_lock *l);

#endif
