/* comm_notes.c -- small records from every rank to rank 0 that nobody waits for (comm.h: notes to rank 0). A
 * sender copies its record into one of TN_NOTES_IN_FLIGHT slots and starts an MPI_Isend; a slot is reused once
 * MPI_Test says its send completed, and with every slot busy (rank 0 has stopped receiving for a while: a
 * checkpoint write) the record is dropped, so a step never waits for the receiver. Rank 0 takes arrived
 * notes with MPI_Improbe + MPI_Mrecv, which never block. */
#include <string.h>

#include "comm/comm_impl.h"
#include "core/core.h"

enum { TAG_NOTE = 7201 };

int tn_notes_init(tn_comm *c) {
    for (int i = 0; i < TN_NOTES_IN_FLIGHT; i++) c->note_rq[i] = MPI_REQUEST_NULL;
    int rc = MPI_Comm_dup(c->world, &c->notes);
    return rc == MPI_SUCCESS ? 0 : tn_comm_mpi_err(rc, "MPI_Comm_dup (notes)");
}

/* Sends still in flight are left to MPI (small, so already buffered); notes nobody took are discarded. */
void tn_notes_free(tn_comm *c) {
    if (c->notes == MPI_COMM_NULL) return;
    for (int i = 0; i < TN_NOTES_IN_FLIGHT; i++)
        if (c->note_rq[i] != MPI_REQUEST_NULL) MPI_Request_free(&c->note_rq[i]);
    if (c->info.rank == 0) {
        unsigned char sink[TN_COMM_NOTE_MAX];
        int from;
        while (tn_comm_note_recv(c, sink, sizeof sink, &from) > 0) {
        }
    }
    MPI_Comm_free(&c->notes);
}

int tn_comm_note_send(tn_comm *c, const void *buf, size_t bytes) {
    if (bytes > TN_COMM_NOTE_MAX) return tn_err("comm: a note of %zu bytes is over the %d allowed", bytes, TN_COMM_NOTE_MAX);
    if (c->info.rank == 0) return tn_err("comm: rank 0 sends no notes (it receives them)");
    int slot = -1;
    for (int i = 0; i < TN_NOTES_IN_FLIGHT && slot < 0; i++) {
        int done = 1;
        if (c->note_rq[i] != MPI_REQUEST_NULL && MPI_Test(&c->note_rq[i], &done, MPI_STATUS_IGNORE) != MPI_SUCCESS)
            return tn_err("comm: MPI_Test of a note failed");
        if (done) slot = i;
    }
    if (slot < 0) {
        c->notes_dropped++;
        return 0;
    }
    memcpy(c->note_buf[slot], buf, bytes);
    int rc = MPI_Isend(c->note_buf[slot], (int)bytes, MPI_BYTE, 0, TAG_NOTE, c->notes, &c->note_rq[slot]);
    return rc == MPI_SUCCESS ? 1 : tn_comm_mpi_err(rc, "MPI_Isend (note)");
}

int tn_comm_note_recv(tn_comm *c, void *buf, size_t cap, int *from) {
    int flag = 0, n = 0;
    MPI_Message msg;
    MPI_Status st;
    int rc = MPI_Improbe(MPI_ANY_SOURCE, TAG_NOTE, c->notes, &flag, &msg, &st);
    if (rc != MPI_SUCCESS) return tn_comm_mpi_err(rc, "MPI_Improbe (notes)");
    if (!flag) return 0;
    MPI_Get_count(&st, MPI_BYTE, &n);
    unsigned char whole[TN_COMM_NOTE_MAX];
    if (n < 0 || n > TN_COMM_NOTE_MAX) n = TN_COMM_NOTE_MAX; /* a sender obeys the limit; MPI truncates otherwise */
    rc = MPI_Mrecv(whole, n, MPI_BYTE, &msg, MPI_STATUS_IGNORE);
    if (rc != MPI_SUCCESS) return tn_comm_mpi_err(rc, "MPI_Mrecv (note)");
    size_t k = (size_t)n < cap ? (size_t)n : cap;
    memcpy(buf, whole, k);
    *from = st.MPI_SOURCE;
    return (int)k > 0 ? (int)k : 1;
}

uint64_t tn_comm_notes_dropped(const tn_comm *c) { return c->notes_dropped; }
