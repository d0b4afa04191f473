/* fuzz_checkpoint -- the checkpoint manifest (src/trainer/checkpoint.c): the input is written as
 * DIR/tandem_manifest.json next to one 64-byte file, weights.bin, that a manifest may list, and
 * tn_checkpoint_verify(DIR) runs. Refusals must name the folder; the folder holds nothing else, so a
 * manifest that verifies lists weights.bin at most. */
#include "fuzz_util.h"
#include "trainer/checkpoint.h"

static const char *ckpt_dir(void) {
    static char *dir;
    if (dir) return dir;
    dir = fz_path("checkpoint-7");
    FZ_ASSERT(tn_mkdirs(dir) == 0);
    char *w = tn_path_join(dir, "weights.bin");
    char bytes[64];
    for (int i = 0; i < 64; i++) bytes[i] = (char)(i * 37 + 11);
    fz_write(w, bytes, sizeof bytes);
    free(w);
    return dir;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    const char *dir = ckpt_dir();
    char *p = tn_path_join(dir, "tandem_manifest.json");
    fz_write(p, data, size);
    fz_err_reset();
    if (tn_checkpoint_verify(dir) != 0) fz_check_error("checkpoint-7");
    free(p);
    return 0;
}
