/* test_unit_image_ckpt -- save_total_limit for the image classifier's checkpoints (trainer/image_ckpt.c
 * tn_image_ckpt_prune), as HF's Trainer: the newest N complete checkpoint-* folders stay (complete: trainer_state.json
 * written, the file tn_image_ckpt_save writes last), older ones and older incomplete ones go; a newer incomplete one
 * (a save in progress, or a crash's leftover) is not counted and not removed; nothing goes before one complete
 * checkpoint is kept; limit 0 keeps all; a folder holding a sub-folder is not a checkpoint tandem wrote: it is left,
 * and the error names it. Folders are made here by hand, so the expected survivors are known independently. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/core.h"
#include "testlib.h"
#include "trainer/image_ckpt.h"

static char root[512];

static void make_ckpt(const char *out, int step, int complete) {
    char d[600], f[700];
    snprintf(d, sizeof d, "%s/checkpoint-%d", out, step);
    CHECK(tn_mkdirs(d) == 0);
    snprintf(f, sizeof f, "%s/model.safetensors", d);
    CHECK(tn_write_file_atomic(f, "x", 1) == 0);
    if (complete) {
        snprintf(f, sizeof f, "%s/trainer_state.json", d);
        char js[64];
        int n = snprintf(js, sizeof js, "{\"global_step\": %d}", step);
        CHECK(tn_write_file_atomic(f, js, (size_t)n) == 0);
    }
}

static int has(const char *out, int step) {
    char d[600];
    snprintf(d, sizeof d, "%s/checkpoint-%d", out, step);
    return tn_file_exists(d);
}

int main(void) {
    snprintf(root, sizeof root, "%s", tl_tmpdir());
    char out[560];
    /* 1..4 complete, 0 incomplete (older), 5 incomplete (newer): limit 2 keeps 4, 3 and 5 */
    snprintf(out, sizeof out, "%s/a", root);
    for (int s = 1; s <= 4; s++) make_ckpt(out, s, 1);
    make_ckpt(out, 0, 0), make_ckpt(out, 5, 0);
    CHECK(tn_image_ckpt_prune(out, 2) == 0);
    CHECKF(has(out, 4) && has(out, 3), "the newest two complete checkpoints are kept");
    CHECKF(!has(out, 2) && !has(out, 1), "older complete checkpoints are removed");
    CHECKF(!has(out, 0), "an incomplete checkpoint older than a kept one is removed");
    CHECKF(has(out, 5), "a newer incomplete checkpoint is neither counted nor removed");
    /* limit 0 (HF's None): all kept; limit 1 then leaves only 4 (and 5) */
    CHECK(tn_image_ckpt_prune(out, 0) == 0);
    CHECK(has(out, 4) && has(out, 3));
    CHECK(tn_image_ckpt_prune(out, 1) == 0);
    CHECK(has(out, 4) && !has(out, 3) && has(out, 5));
    /* only incomplete ones: nothing removed */
    snprintf(out, sizeof out, "%s/b", root);
    make_ckpt(out, 1, 0), make_ckpt(out, 2, 0);
    CHECK(tn_image_ckpt_prune(out, 1) == 0);
    CHECK(has(out, 1) && has(out, 2));
    /* an old folder with a sub-folder in it: left, and the error names the entry */
    snprintf(out, sizeof out, "%s/c", root);
    make_ckpt(out, 1, 1), make_ckpt(out, 2, 1);
    char sub[640];
    snprintf(sub, sizeof sub, "%s/checkpoint-1/mine", out);
    CHECK(tn_mkdirs(sub) == 0);
    CHECK(tn_image_ckpt_prune(out, 1) == -1);
    CHECKF(strstr(tn_errmsg(), "checkpoint-1/mine") != NULL, "error names the sub-folder: %s", tn_errmsg());
    CHECK(has(out, 2) && tn_file_exists(sub));
    snprintf(sub, sizeof sub, "%s/checkpoint-1/trainer_state.json", out);
    CHECKF(tn_file_exists(sub), "the refused folder is left whole");
    /* an absent output_dir: nothing to do */
    snprintf(out, sizeof out, "%s/absent", root);
    CHECK(tn_image_ckpt_prune(out, 3) == 0);
    char cmd[600];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", root);
    if (system(cmd) != 0) fprintf(stderr, "test_unit_image_ckpt: could not remove %s\n", root);
    return tl_done("test_unit_image_ckpt");
}
