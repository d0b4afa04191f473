/* previous_run.c -- see previous_run.h. */
#include "outputs/previous_run.h"

#include <dirent.h>
#include <errno.h>
#include <fnmatch.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "core/core.h"

/* What the end of a run writes into output_dir (job.c save_outputs, model_io.c, results.c), and predict's results.
 * Patterns: sharded weights and every loss plot. */
static const char *const FINAL_FILES[] = {
    "all_results.json", "train_results.json", "eval_results.json", "trainer_state.json", "training_*.png",
    "predict_results.json", "generated_predictions.jsonl", "model.safetensors", "model-*-of-*.safetensors",
    "model.safetensors.index.json", "adapter_model.safetensors", "adapter_config.json", "config.json",
    "generation_config.json", "tokenizer.json", "tokenizer_config.json", "special_tokens_map.json", "vocab.json",
    "merges.txt", "tokenizer.model", "chat_template.jinja", NULL};

static int is_final(const char *name) {
    for (int i = 0; FINAL_FILES[i]; i++)
        if (fnmatch(FINAL_FILES[i], name, 0) == 0) return 1;
    return 0;
}

int tn_previous_run_clear(const char *output_dir, int *removed) {
    *removed = 0;
    DIR *d = opendir(output_dir);
    if (!d) return errno == ENOENT ? 0 : tn_err("%s: cannot list it: %s", output_dir, strerror(errno));
    int rc = 0;
    for (struct dirent *e; rc == 0 && (e = readdir(d));) {
        if (!is_final(e->d_name)) continue;
        char *p = tn_path_join(output_dir, e->d_name);
        struct stat st;
        if (lstat(p, &st) == 0 && S_ISDIR(st.st_mode)) { /* not a file a run wrote: left to fail the write */
            free(p);
            continue;
        }
        if (unlink(p) == 0) ++*removed;
        else if (errno != ENOENT)
            rc = tn_err("%s: cannot remove the earlier run's %s before this run writes its own: %s", output_dir,
                        e->d_name, strerror(errno));
        free(p);
    }
    closedir(d);
    return rc;
}
