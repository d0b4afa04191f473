/* fuzz_lf_common -- shared by the fuzz targets of the LLaMA-Factory data pipeline: aligning a dataset
 * (lf_align_dataset) and checking what comes out. */
#ifndef TN_FUZZ_LF_COMMON_H
#define TN_FUZZ_LF_COMMON_H

#include "data/lf_internal.h"
#include "fuzz_util.h"

/* Aligns one in-memory file (bytes NUL-terminated, as tn_read_file hands them out) with ds; refusals
 * must name the file, accepted examples must be well-formed. */
/* Error lines are one line everywhere now (tn_err masks control characters), so nothing is tolerated. */
static inline void fz_lf_init(void) { *fz_multiline_known() = 0; }

static inline void fz_align(const lf_dsattr *ds, const char *path, const char *bytes, size_t n, int type, int max_samples) {
    lf_file f = {(char *)path, (char *)bytes, n, type};
    lf_examples ex = {0};
    fz_err_reset();
    if (lf_align_dataset(ds, &f, 1, max_samples, NULL, &ex) != 0) {
        fz_check_error(path);
    } else {
        FZ_ASSERT(ex.n >= 1 && (max_samples <= 0 || ex.n <= max_samples));
        for (int i = 0; i < ex.n; i++) {
            const lf_example *e = &ex.ex[i];
            FZ_ASSERT(e->file && e->system && e->tools && e->rec >= 0);
            if (e->bad) continue;
            FZ_ASSERT(e->n_prompt >= 1 && e->n_resp >= 0 && e->msg);
            for (int k = 0; k < e->n_prompt + e->n_resp; k++) {
                FZ_ASSERT(e->msg[k].s != NULL);
                FZ_ASSERT(e->msg[k].role >= LF_USER && e->msg[k].role <= LF_FUNCTION);
            }
        }
    }
    lf_examples_free(&ex);
}

#endif
