/* rank_watch -- a rank stops itself when whoever started it is gone.
 *
 * A rank whose launcher died (kill -9 of `tandem launch`, or of mpirun) must not train on to the end, still
 * writing into output_dir. A thread of each rank looks, every 200 ms, at
 *   - the `tandem launch` process that started the job (TANDEM_LAUNCHER, proc_identity.h), when it runs on
 *     this machine and was alive when the rank started;
 *   - under Open MPI (OMPI_COMM_WORLD_SIZE set), the rank's parent (mpirun or orted): when it dies, the rank
 *     is handed to another parent.
 * When one is gone the rank names it in one line and exits (status 1) within a second; a checkpoint or
 * final save in progress is first given up to TN_WATCH_SAVE_GRACE_S seconds to finish (a checkpoint still
 * unfinished then stays in checkpoint-N.partial/, which resume never takes). A plain `tandem train` (no
 * launcher, no mpirun) is not watched: `nohup tandem train ... &` outlives its shell as before. */
#ifndef TN_RANK_WATCH_H
#define TN_RANK_WATCH_H

#define TN_WATCH_SAVE_GRACE_S 10

/* Starts the watch when there is something to watch (call before MPI starts: the parent is read first). */
void tn_rank_watch_start(void);
/* Marks a save in progress (1) or done (0). */
void tn_rank_watch_saving(int on);

#endif
