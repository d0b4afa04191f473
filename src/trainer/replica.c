/* replica.c -- see replica.h. */
#include "trainer/replica.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/core.h"

uint64_t tn_build_fingerprint(void) {
    FILE *f = fopen("/proc/self/exe", "rb");
    if (!f) {
        tn_err("/proc/self/exe: cannot read this program to fingerprint the build");
        return 0;
    }
    uint64_t h = 0x7A6E64656D;
    unsigned char buf[1 << 16];
    size_t n;
    while ((n = fread(buf, 1, sizeof buf, f)) > 0) h = tn_hash64(buf, n, h);
    int bad = ferror(f);
    fclose(f);
    if (bad) {
        tn_err("/proc/self/exe: read error while fingerprinting the build");
        return 0;
    }
    return h ? h : 1;
}

int tn_replica_check_fingerprints(tn_comm *c, uint64_t build, uint64_t config, uint64_t secret) {
    const tn_comm_info *in = tn_comm_get_info(c);
    uint64_t mine[3] = {build, config, secret};
    uint64_t *all = tn_xmalloc((size_t)in->size * sizeof mine);
    if (tn_comm_allgather(c, mine, sizeof mine, all) != 0) {
        free(all);
        return tn_err("start-up fingerprint exchange failed: %s", tn_errmsg());
    }
    int rc = 0;
    for (int r = 1; r < in->size && rc == 0; r++) {
        if (all[3 * r + 2] != all[2])
            rc = tn_err("rank %d on host %s presents another job secret than rank 0 on host %s: refused (it belongs "
                        "to another job, or TANDEM_JOB_SECRET differs)", r, tn_comm_host_of(c, r), tn_comm_host_of(c, 0));
        else if (all[3 * r] != all[0])
            rc = tn_err("rank %d on host %s runs a different tandem build than rank 0 on host %s "
                        "(fingerprint %016" PRIx64 " vs %016" PRIx64 "): install the same binary on every machine",
                        r, tn_comm_host_of(c, r), tn_comm_host_of(c, 0), all[3 * r], all[0]);
        else if (all[3 * r + 1] != all[1])
            rc = tn_err("rank %d on host %s was started with a different config than rank 0 on host %s "
                        "(YAML + overrides fingerprint %016" PRIx64 " vs %016" PRIx64 "): give every machine the same file",
                        r, tn_comm_host_of(c, r), tn_comm_host_of(c, 0), all[3 * r + 1], all[1]);
    }
    free(all);
    return rc;
}

/* Hash of the frozen weights as the backend holds them, read back in pieces (backend memory may be a GPU's). */
static uint64_t frozen_hash(const tn_model *m) {
    const size_t piece = (size_t)1 << 22;
    size_t frozen = m->n_total - m->n_trainable;
    float *host = tn_xmalloc((frozen < piece ? frozen : piece) * sizeof *host + 1);
    uint64_t h = 0;
    for (size_t off = 0; off < frozen; off += piece) {
        size_t n = frozen - off < piece ? frozen - off : piece;
        m->be->download(host, m->slab + m->n_trainable + off, n);
        h = tn_hash64(host, n * sizeof *host, h);
    }
    free(host);
    return h;
}

int tn_replica_sync_params(tn_comm *c, tn_model *m) {
    const tn_comm_info *in = tn_comm_get_info(c);
    if (in->size == 1) return 0;
    /* trainable tensors are the slab's prefix: one broadcast (in pieces that fit an int count) */
    const size_t piece = (size_t)1 << 28;
    for (size_t off = 0; off < m->n_trainable; off += piece) {
        size_t n = m->n_trainable - off < piece ? m->n_trainable - off : piece;
        if (tn_comm_bcast(c, m->slab + off, n * sizeof(float), 0) != 0)
            return tn_err("broadcast of the initial parameters failed: %s", tn_errmsg());
    }
    uint64_t h = frozen_hash(m);
    uint64_t *all = tn_xmalloc((size_t)in->size * sizeof h);
    int rc = tn_comm_allgather(c, &h, sizeof h, all);
    if (rc != 0) rc = tn_err("frozen-weight fingerprint exchange failed: %s", tn_errmsg());
    for (int r = 1; r < in->size && rc == 0; r++)
        if (all[r] != all[0])
            rc = tn_err("rank %d on host %s loaded different frozen base weights than rank 0 on host %s: "
                        "every machine needs the same model files", r, tn_comm_host_of(c, r), tn_comm_host_of(c, 0));
    free(all);
    return rc;
}

int tn_replica_first_failure(tn_comm *c, int failed) {
    const tn_comm_info *in = tn_comm_get_info(c);
    /* max over ranks of (size - rank) for the failing ones picks the lowest failing rank */
    int64_t v = failed ? (int64_t)(in->size - in->rank) : 0;
    if (in->size > 1 && tn_comm_allreduce_max_i64(c, &v, 1) != 0) return in->rank; /* cannot agree: report self */
    return v ? (int)(in->size - v) : -1;
}

int tn_replica_agree(tn_comm *c, int rc) {
    if (!c) return rc ? -1 : 0; /* one process */
    int first = tn_replica_first_failure(c, rc != 0);
    if (first < 0) return 0;
    return first == tn_comm_get_info(c)->rank ? -1 : -2;
}

int tn_replica_sync_position(tn_comm *c, tn_adamw *opt, int *step, int64_t *samples_seen, int moments) {
    if (tn_comm_get_info(c)->size == 1) return 0;
    int64_t pos[3] = {*step, *samples_seen, opt->step};
    if (tn_comm_bcast(c, pos, sizeof pos, 0) != 0) return tn_err("broadcast of the resume position failed: %s", tn_errmsg());
    *step = (int)pos[0], *samples_seen = pos[1], opt->step = (int)pos[2];
    if (opt->step == 0 || !moments) return 0; /* fresh start: moments are zero on every rank */
    const size_t piece = (size_t)1 << 28;
    float *slabs[2] = {opt->m, opt->v};
    for (int s = 0; s < 2; s++)
        for (size_t off = 0; off < opt->n; off += piece) {
            size_t n = opt->n - off < piece ? opt->n - off : piece;
            if (tn_comm_bcast(c, slabs[s] + off, n * sizeof(float), 0) != 0)
                return tn_err("broadcast of the optimizer state failed: %s", tn_errmsg());
        }
    return 0;
}
