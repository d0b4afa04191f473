/* image_ckpt -- checkpoints of the image-classifier job (trainer/image_job.c): checkpoint-N/ holds the model
 * (config.json + model.safetensors with the BN running statistics and num_batches_tracked), the optimizer state
 * (optimizer.safetensors: AdamW's exp_avg / exp_avg_sq, or SGD's momentum_buffer, flat over the parameter slab) and
 * trainer_state.json (global_step). The job's data order and augmentation are functions of (seed, epoch, index) and
 * its learning rate of the step, so resuming from checkpoint-N continues exactly as the run that wrote it. Each file
 * is written atomically; a checkpoint is complete once trainer_state.json is there (written last). */
#include "trainer/image_ckpt.h"

#include <cjson/cJSON.h>
#include <dirent.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "core/core.h"
#include "trainer/checkpoint.h"
#include "model/safetensors.h"

int tn_image_ckpt_save(const char *output_dir, int step, tn_resnet *m, const float *opt_a, const float *opt_b,
                       const tn_backend *be) {
    char name[32];
    snprintf(name, sizeof name, "checkpoint-%d", step);
    char *dir = tn_path_join(output_dir, name);
    int rc = tn_resnet_save(m, dir);
    size_t n = tn_resnet_n_params(m);
    float *a = tn_xmalloc(n * sizeof *a), *b = tn_xmalloc(n * sizeof *b);
    be->download(a, opt_a, n), be->download(b, opt_b, n);
    st_entry e[2] = {{.name = "opt_a", .dtype = ST_F32, .src_dtype = ST_F32, .ndim = 1, .shape = {(int64_t)n}, .data = a},
                     {.name = "opt_b", .dtype = ST_F32, .src_dtype = ST_F32, .ndim = 1, .shape = {(int64_t)n}, .data = b}};
    char *op = tn_path_join(dir, "optimizer.safetensors"), *sp = tn_path_join(dir, "trainer_state.json");
    if (rc == 0) rc = st_write(op, e, 2, NULL);
    char state[64];
    snprintf(state, sizeof state, "{\n  \"global_step\": %d\n}\n", step);
    if (rc == 0) rc = tn_write_file_atomic(sp, state, strlen(state));
    if (rc == 0) printf("tandem: saved %s\n", dir);
    free(a), free(b), free(op), free(sp), free(dir);
    return rc;
}

/* the global_step of dir/trainer_state.json; -1 with tn_err when absent or malformed */
static int read_step(const char *dir) {
    char *p = tn_path_join(dir, "trainer_state.json");
    char *text = tn_read_file(p, NULL, 1 << 20);
    cJSON *j = text ? cJSON_Parse(text) : NULL;
    const cJSON *s = j ? cJSON_GetObjectItemCaseSensitive(j, "global_step") : NULL;
    int step = cJSON_IsNumber(s) && s->valuedouble >= 1 ? (int)s->valuedouble : -1;
    if (text && step < 0) tn_err("%s: no positive 'global_step'", p);
    cJSON_Delete(j), free(text), free(p);
    return step;
}

int tn_image_ckpt_load(const char *dir, tn_resnet *m, float *opt_a, float *opt_b, const tn_backend *be) {
    int step = read_step(dir);
    if (step < 0) return -1;
    if (tn_resnet_load(m, dir)) return -1;
    char *op = tn_path_join(dir, "optimizer.safetensors");
    st_file f = {0};
    int rc = st_open(&f, op);
    size_t n = tn_resnet_n_params(m);
    float *h = tn_xmalloc(n * sizeof *h);
    const char *names[2] = {"opt_a", "opt_b"};
    float *dst[2] = {opt_a, opt_b};
    for (int i = 0; rc == 0 && i < 2; i++) {
        const st_tensor *t = st_find(&f, names[i]);
        if (!t || t->numel != (int64_t)n)
            rc = tn_err("%s: tensor '%s' missing or not %zu values (another model?)", op, names[i], n);
        else if ((rc = st_read_f32(&f, t, h, (int64_t)n)) == 0)
            be->upload(dst[i], h, n);
    }
    if (f.map || f.tensors) st_close(&f);
    free(h), free(op);
    return rc ? -1 : step;
}

int tn_image_ckpt_latest(const char *output_dir, char *out, size_t n) {
    DIR *d = opendir(output_dir);
    int best = -1;
    if (!d) return -1;
    for (struct dirent *e; (e = readdir(d)) != NULL;) {
        int k;
        char tail;
        if (sscanf(e->d_name, "checkpoint-%d%c", &k, &tail) != 1 || k <= best) continue;
        char *p = tn_path_join(output_dir, e->d_name), *s = tn_path_join(p, "trainer_state.json");
        if (tn_file_exists(s)) best = k, snprintf(out, n, "%s", p);
        free(p), free(s);
    }
    closedir(d);
    return best;
}

/* a checkpoint folder holds plain files only (tn_image_ckpt_save, plus a writer's temporaries): one pass checks that,
 * the next removes them, then the folder; a folder with anything else in it (a sub-folder) is left whole, reported */
static int rm_ckpt(const char *dir) {
    int rc = 0;
    for (int pass = 0; rc == 0 && pass < 2; pass++) {
        DIR *d = opendir(dir);
        if (!d) return tn_err("%s: cannot open to remove: %s", dir, strerror(errno));
        for (struct dirent *e; rc == 0 && (e = readdir(d)) != NULL;) {
            if (strcmp(e->d_name, ".") == 0 || strcmp(e->d_name, "..") == 0) continue;
            char *p = tn_path_join(dir, e->d_name);
            struct stat st;
            if (pass == 0 && (lstat(p, &st) != 0 || S_ISDIR(st.st_mode)))
                rc = tn_err("%s: not a checkpoint file; the folder is not removed", p);
            else if (pass == 1 && unlink(p) != 0)
                rc = tn_err("%s: cannot remove: %s", p, strerror(errno));
            free(p);
        }
        closedir(d);
    }
    if (rc == 0 && rmdir(dir) != 0) rc = tn_err("%s: cannot remove: %s", dir, strerror(errno));
    return rc;
}

int tn_image_ckpt_prune(const char *output_dir, int limit) {
    if (limit <= 0) return 0;
    int *steps, n = tn_checkpoint_steps(output_dir, &steps), kept = 0, rc = 0;
    for (int i = 0; rc == 0 && i < n; i++) {
        char name[32];
        snprintf(name, sizeof name, "checkpoint-%d", steps[i]);
        char *dir = tn_path_join(output_dir, name), *state = tn_path_join(dir, "trainer_state.json");
        int complete = tn_file_exists(state);
        if (complete && kept < limit) kept++;
        else if (kept >= 1) rc = rm_ckpt(dir); /* never before a complete one is kept */
        free(dir), free(state);
    }
    free(steps);
    return rc;
}
