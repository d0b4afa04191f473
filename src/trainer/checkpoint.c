/* checkpoint.c -- see checkpoint.h. */
#define _XOPEN_SOURCE 700
#include "trainer/checkpoint.h"

#include <cjson/cJSON.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <inttypes.h>
#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "core/core.h"
#include "model/safetensors.h"

#define MANIFEST "tandem_manifest.json"
#define OPTIMIZER "optimizer.safetensors"

static int rm_entry(const char *path, const struct stat *sb, int flag, struct FTW *ftw) {
    (void)sb, (void)flag, (void)ftw;
    return remove(path);
}

static int rm_tree(const char *path) {
    if (!tn_file_exists(path)) return 0;
    return nftw(path, rm_entry, 16, FTW_DEPTH | FTW_PHYS) == 0 ? 0 : tn_err("%s: cannot remove: %s", path, strerror(errno));
}

static int fsync_dir(const char *dir) {
    int fd = open(dir, O_RDONLY | O_DIRECTORY);
    if (fd < 0) return tn_err("%s: cannot open folder: %s", dir, strerror(errno));
    int rc = fsync(fd);
    close(fd);
    return rc == 0 ? 0 : tn_err("%s: fsync: %s", dir, strerror(errno));
}

/* A manifest number that is a whole count in [0, max]: checked before any cast (1e300 or -1 in a damaged
 * manifest must be an error, not undefined behaviour). max <= 2^53 keeps the double exact. */
static int json_count(const cJSON *j, double max) {
    return cJSON_IsNumber(j) && j->valuedouble >= 0 && j->valuedouble <= max && j->valuedouble == floor(j->valuedouble);
}

/* A name the manifest lists must be a file of the checkpoint folder itself: no path (../../x, /dev/zero)
 * and no control characters (they would break the one-line error). */
static int plain_file_name(const char *s) {
    for (const char *p = s; *p; p++)
        if ((unsigned char)*p < 0x20) return 0;
    return s[0] && strchr(s, '/') == NULL && strcmp(s, ".") != 0 && strcmp(s, "..") != 0;
}

static int hash_file(const char *path, uint64_t *hash, uint64_t *size) {
    FILE *f = fopen(path, "rb");
    if (!f) return tn_err("%s: cannot open: %s", path, strerror(errno));
    static unsigned char buf[1 << 20];
    uint64_t h = 0x63686B70, n = 0;
    size_t got;
    while ((got = fread(buf, 1, sizeof buf, f)) > 0) h = tn_hash64(buf, got, h), n += got;
    int bad = ferror(f);
    fclose(f);
    if (bad) return tn_err("%s: read error", path);
    *hash = h, *size = n;
    return 0;
}

int tn_checkpoint_write_moments(const char *dir, int shard, int n_shards, size_t total, const tn_span *spans, int k,
                                const float *m, const float *v) {
    char name[64];
    if (n_shards == 1) snprintf(name, sizeof name, "%s", OPTIMIZER);
    else snprintf(name, sizeof name, "optimizer-%05d-of-%05d.safetensors", shard, n_shards);
    size_t n = tn_span_total(spans, k);
    /* the shard's place in the trainable slab: one range as {lo, total}; spans as {total, lo0, n0, lo1, n1, ...} */
    int64_t *where = tn_xmalloc(((size_t)k * 2 + 2) * sizeof *where), w = k == 1 ? 2 : 2 * (int64_t)k + 1;
    if (k == 1) where[0] = (int64_t)spans[0].lo, where[1] = (int64_t)total;
    else where[0] = (int64_t)total;
    for (int i = 0; i < k && k != 1; i++) where[1 + 2 * i] = (int64_t)spans[i].lo, where[2 + 2 * i] = (int64_t)spans[i].n;
    st_entry e[3] = {{.name = "exp_avg", .dtype = ST_F32, .src_dtype = ST_F32, .ndim = 1, .shape = {(int64_t)n}, .data = m},
                     {.name = "exp_avg_sq", .dtype = ST_F32, .src_dtype = ST_F32, .ndim = 1, .shape = {(int64_t)n}, .data = v},
                     {.name = k == 1 ? "slab_range" : "slab_spans", .dtype = ST_I64, .src_dtype = ST_I64, .ndim = 1,
                      .shape = {w}, .data = where}};
    const char *meta[] = {"format", k == 1 ? "tandem-optimizer-2" : "tandem-optimizer-3", NULL};
    char *path = tn_path_join(dir, name);
    int rc = st_write(path, e, 3, meta);
    free(path), free(where);
    return rc;
}

static int write_optimizer(const char *dir, const tn_adamw *opt) {
    float *m = tn_xalloc_floats(opt->n ? opt->n : 1), *v = tn_xalloc_floats(opt->n ? opt->n : 1);
    opt->be->download(m, opt->m, opt->n);
    opt->be->download(v, opt->v, opt->n);
    int rc = tn_checkpoint_write_moments(dir, 0, 1, opt->n, &(tn_span){0, opt->n}, 1, m, v);
    free(m), free(v);
    return rc;
}

/* The file's spans of the slab ({lo, n} pairs, its packed order) from "slab_spans", "slab_range" or neither
 * (format 1: the whole slab); NULL + tn_err naming path when they do not fit total or the file's numel. */
static tn_span *file_spans(const char *path, st_file *f, int64_t numel, size_t total, int *k) {
    const st_tensor *tr = st_find(f, "slab_range"), *ts = st_find(f, "slab_spans");
    int64_t n = ts ? ts->numel : 2, *w = tn_xmalloc((size_t)(n > 2 ? n : 2) * sizeof *w);
    w[0] = 0, w[1] = numel;
    int bad = (ts && (n < 3 || n % 2 == 0 || st_read_i64(f, ts, w, n) != 0)) ||
              (!ts && tr && (tr->numel != 2 || st_read_i64(f, tr, w, 2) != 0));
    *k = ts ? (int)(n - 1) / 2 : 1;
    tn_span *sp = tn_xmalloc((size_t)*k * sizeof *sp);
    int64_t sum = 0, end = 0, whole = ts ? w[0] : (tr ? w[1] : numel);
    for (int i = 0; i < *k && !bad; i++) {
        int64_t lo = ts ? w[1 + 2 * i] : w[0], len = ts ? w[2 + 2 * i] : numel;
        bad = lo < end || len < 0 || lo + len > whole; /* in slab order, inside the slab */
        sp[i] = (tn_span){(size_t)(lo > 0 ? lo : 0), (size_t)(len > 0 ? len : 0)}, sum += len, end = lo + len;
    }
    free(w);
    if (bad) tn_err("%s: bad '%s'", path, ts ? "slab_spans" : "slab_range");
    else if (whole != (int64_t)total || sum != numel)
        bad = tn_err("%s: moments do not match this model's %zu trainable values (another model or LoRA config?)",
                     path, total) != 0;
    if (bad) free(sp), sp = NULL;
    return sp;
}

/* Moments of one file (optimizer.safetensors or a shard) copied where they overlap the k wanted spans
 * (packed into m, v). */
static int read_moment_file(const char *path, size_t total, const tn_span *want, int k, float *m, float *v,
                            size_t *copied) {
    st_file f;
    if (st_open(&f, path) != 0) return -1;
    const st_tensor *tm = st_find(&f, "exp_avg"), *tv = st_find(&f, "exp_avg_sq");
    int nf = 0;
    tn_span *have = NULL;
    int rc = 0;
    if (!tm || !tv || tm->dtype != ST_F32 || tv->dtype != ST_F32 || tm->numel != tv->numel)
        rc = tn_err("%s: moments do not match this model's %zu trainable values (another model or LoRA config?)", path,
                    total);
    else if (!(have = file_spans(path, &f, tm->numel, total, &nf))) rc = -1;
    const uint8_t *data = f.map + f.data_start;
    size_t from = 0; /* packed offset of file span i */
    for (int i = 0; rc == 0 && i < nf; from += have[i].n, i++) {
        size_t at = 0; /* packed offset of the wanted span j */
        for (int j = 0; j < k; at += want[j].n, j++) {
            size_t a = have[i].lo > want[j].lo ? have[i].lo : want[j].lo;
            size_t b = have[i].lo + have[i].n < want[j].lo + want[j].n ? have[i].lo + have[i].n : want[j].lo + want[j].n;
            if (b <= a) continue; /* F32 little endian in the file, as in memory on x86-64 */
            size_t src = (from + a - have[i].lo) * sizeof(float), dst = at + (a - want[j].lo);
            memcpy(m + dst, data + tm->begin + src, (b - a) * sizeof(float));
            memcpy(v + dst, data + tv->begin + src, (b - a) * sizeof(float));
            *copied += b - a;
        }
    }
    free(have);
    st_close(&f);
    return rc;
}

int tn_checkpoint_read_moments(const char *dir, size_t total, const tn_span *spans, int k, float *m, float *v) {
    size_t n = tn_span_total(spans, k);
    char *one = tn_path_join(dir, OPTIMIZER);
    size_t copied = 0;
    int rc = 0, files = 0;
    if (tn_file_exists(one)) {
        files = 1;
        rc = read_moment_file(one, total, spans, k, m, v, &copied);
    } else {
        DIR *d = opendir(dir);
        struct dirent *de;
        while (d && rc == 0 && (de = readdir(d))) {
            int q, K;
            char tail[32];
            if (sscanf(de->d_name, "optimizer-%d-of-%d.%31s", &q, &K, tail) != 3 || strcmp(tail, "safetensors") != 0)
                continue;
            char *p = tn_path_join(dir, de->d_name);
            files++;
            rc = read_moment_file(p, total, spans, k, m, v, &copied);
            free(p);
        }
        if (d) closedir(d);
    }
    free(one);
    if (rc == 0 && !files) return tn_err("%s: no optimizer state (saved with save_only_model: true?)", dir);
    if (rc == 0 && copied != n)
        return tn_err("%s: the optimizer shards cover %zu of the %zu moments needed (a shard file is missing)", dir,
                      copied, n);
    return rc;
}

static int write_manifest(const char *dir, const tn_ckpt_state *st) {
    cJSON *root = cJSON_CreateObject(), *files = cJSON_CreateObject();
    cJSON_AddNumberToObject(root, "format", 1);
    cJSON_AddNumberToObject(root, "step", st->step);
    cJSON_AddNumberToObject(root, "samples_seen", (double)st->samples_seen);
    cJSON_AddNumberToObject(root, "adam_step", st->adam_step);
    char fp[32];
    snprintf(fp, sizeof fp, "%016" PRIx64, st->config_fingerprint);
    cJSON_AddStringToObject(root, "config_fingerprint", fp);
    if (st->recipe) { /* "key=value" lines -> {"key": "value"}: what the run was trained with (recipe.h) */
        cJSON *r = cJSON_AddObjectToObject(root, "recipe");
        for (const char *l = st->recipe; *l;) {
            size_t len = strcspn(l, "\n"), k = strcspn(l, "=");
            if (k < len) {
                char key[64], val[PATH_MAX + 64];
                snprintf(key, sizeof key, "%.*s", (int)k, l);
                snprintf(val, sizeof val, "%.*s", (int)(len - k - 1), l + k + 1);
                cJSON_AddStringToObject(r, key, val);
            }
            l += len + (l[len] == '\n');
        }
    }
    cJSON_AddItemToObject(root, "files", files);
    DIR *d = opendir(dir);
    if (!d) {
        cJSON_Delete(root);
        return tn_err("%s: cannot list: %s", dir, strerror(errno));
    }
    int rc = 0;
    struct dirent *de;
    while (rc == 0 && (de = readdir(d))) {
        if (de->d_name[0] == '.' || strcmp(de->d_name, MANIFEST) == 0) continue;
        char *p = tn_path_join(dir, de->d_name);
        uint64_t h = 0, size = 0;
        rc = hash_file(p, &h, &size);
        free(p);
        if (rc) break;
        char hs[32];
        snprintf(hs, sizeof hs, "%016" PRIx64, h);
        cJSON *f = cJSON_CreateObject();
        cJSON_AddNumberToObject(f, "size", (double)size);
        cJSON_AddStringToObject(f, "hash", hs);
        cJSON_AddItemToObject(files, de->d_name, f);
    }
    closedir(d);
    if (rc == 0) {
        char *text = cJSON_Print(root);
        char *p = tn_path_join(dir, MANIFEST);
        rc = tn_write_file_atomic(p, text, strlen(text));
        free(p), free(text);
    }
    cJSON_Delete(root);
    return rc;
}

char *tn_checkpoint_begin(const char *output_dir, int step) {
    char partial[80];
    snprintf(partial, sizeof partial, "checkpoint-%d.partial", step);
    char *tmp = tn_path_join(output_dir, partial);
    if (rm_tree(tmp) != 0 || tn_mkdirs(tmp) != 0) {
        char msg[1024];
        snprintf(msg, sizeof msg, "%s", tn_errmsg());
        tn_err("saving checkpoint-%d failed: %s", step, msg);
        free(tmp);
        return NULL;
    }
    return tmp;
}

void tn_checkpoint_abandon(char *tmp) {
    if (tmp) rm_tree(tmp);
    free(tmp);
}

int tn_checkpoint_save(const char *output_dir, const tn_model *m, const tn_adamw *opt, const tn_ckpt_state *st,
                       int with_optimizer, tn_ckpt_extra_fn extra, void *ctx) {
    char *tmp = tn_checkpoint_begin(output_dir, st->step);
    return tmp ? tn_checkpoint_commit(output_dir, tmp, m, with_optimizer ? opt : NULL, st, extra, ctx) : -1;
}

int tn_checkpoint_commit(const char *output_dir, char *tmp, const tn_model *m, const tn_adamw *opt,
                         const tn_ckpt_state *st, tn_ckpt_extra_fn extra, void *ctx) {
    char name[64];
    snprintf(name, sizeof name, "checkpoint-%d", st->step);
    char *final = tn_path_join(output_dir, name);
    int rc = m->lora.r ? tn_model_save_adapter(m, tmp) : tn_model_save_hf(m, tmp, 0);
    if (rc == 0 && opt) rc = write_optimizer(tmp, opt);
    if (rc == 0 && extra) rc = extra(ctx, tmp);
    if (rc == 0) rc = write_manifest(tmp, st);
    if (rc == 0) rc = fsync_dir(tmp);
    /* an older checkpoint of the same step (a resumed run saving again) makes way only now */
    if (rc == 0) rc = rm_tree(final);
    if (rc == 0 && rename(tmp, final) != 0) rc = tn_err("%s: cannot rename to %s: %s", tmp, final, strerror(errno));
    if (rc == 0) rc = fsync_dir(output_dir);
    if (rc != 0) {
        char msg[1024];
        snprintf(msg, sizeof msg, "%s", tn_errmsg());
        rm_tree(tmp); /* best effort: never leave a half checkpoint */
        tn_err("saving %s failed: %s", name, msg);
    }
    free(final), free(tmp);
    return rc;
}

int tn_checkpoint_verify(const char *dir) {
    char *p = tn_path_join(dir, MANIFEST);
    size_t n = 0;
    char *text = tn_file_exists(p) ? tn_read_file(p, &n, 1 << 20) : NULL;
    free(p);
    if (!text) return tn_err("%s: no %s (the checkpoint was not completed)", dir, MANIFEST);
    cJSON *root = cJSON_ParseWithLength(text, n);
    free(text);
    const cJSON *files = cJSON_GetObjectItemCaseSensitive(root, "files");
    if (!root || !cJSON_IsObject(files)) {
        cJSON_Delete(root);
        return tn_err("%s/%s: not a tandem manifest (expected an object with 'files')", dir, MANIFEST);
    }
    int rc = 0;
    const cJSON *f;
    cJSON_ArrayForEach(f, files) {
        const cJSON *size = cJSON_GetObjectItemCaseSensitive(f, "size"), *hash = cJSON_GetObjectItemCaseSensitive(f, "hash");
        char nb[96];
        if (!plain_file_name(f->string)) {
            rc = tn_err("%s/%s: entry '%s' is not a file name in the checkpoint folder", dir, MANIFEST, tn_shown(f->string, nb));
            break;
        }
        if (!json_count(size, 9007199254740992.0) || !cJSON_IsString(hash)) {
            rc = tn_err("%s/%s: entry '%s' lacks size/hash (a byte count and a hash string)", dir, MANIFEST, f->string);
            break;
        }
        char *fp = tn_path_join(dir, f->string);
        uint64_t h = 0, sz = 0;
        if (hash_file(fp, &h, &sz) != 0) rc = tn_err("%s: listed in the manifest but unreadable", fp);
        else if (sz != (uint64_t)size->valuedouble)
            rc = tn_err("%s: %" PRIu64 " bytes, the manifest says %.0f (truncated or overwritten)", fp, sz, size->valuedouble);
        else {
            char hs[32];
            snprintf(hs, sizeof hs, "%016" PRIx64, h);
            if (strcmp(hs, hash->valuestring) != 0) rc = tn_err("%s: contents differ from the manifest's hash (corrupted)", fp);
        }
        free(fp);
        if (rc) break;
    }
    cJSON_Delete(root);
    return rc;
}

int tn_checkpoint_steps(const char *output_dir, int **steps) {
    *steps = NULL;
    DIR *d = opendir(output_dir);
    if (!d) return 0;
    int n = 0, cap = 0;
    struct dirent *de;
    while ((de = readdir(d))) {
        int step;
        char tail;
        if (sscanf(de->d_name, "checkpoint-%d%c", &step, &tail) != 1 || step < 0) continue;
        if (n == cap) *steps = tn_xrealloc(*steps, (size_t)(cap = cap ? 2 * cap : 16) * sizeof **steps);
        (*steps)[n++] = step;
    }
    closedir(d);
    for (int i = 1; i < n; i++) /* insertion sort, descending */
        for (int j = i; j > 0 && (*steps)[j] > (*steps)[j - 1]; j--) {
            int t = (*steps)[j];
            (*steps)[j] = (*steps)[j - 1], (*steps)[j - 1] = t;
        }
    return n;
}

int tn_checkpoint_any(const char *output_dir) {
    int *steps, n = tn_checkpoint_steps(output_dir, &steps);
    free(steps);
    return n > 0;
}

int tn_checkpoint_latest(const char *output_dir, char *out, size_t size) {
    int *steps, n = tn_checkpoint_steps(output_dir, &steps), found = 0;
    for (int i = 0; i < n && !found; i++) {
        char name[64];
        snprintf(name, sizeof name, "checkpoint-%d", steps[i]);
        char *dir = tn_path_join(output_dir, name);
        if (tn_checkpoint_verify(dir) == 0) {
            snprintf(out, size, "%s", dir);
            found = 1;
        } else {
            fprintf(stderr, "tandem: warning: skipping %s: %s\n", dir, tn_errmsg());
        }
        free(dir);
    }
    free(steps);
    return found;
}

/* dir's manifest parsed, or NULL when it is missing or not JSON (tn_checkpoint_verify says which). */
static cJSON *read_manifest(const char *dir) {
    char *mp = tn_path_join(dir, MANIFEST);
    size_t n = 0;
    char *text = tn_read_file(mp, &n, 1 << 20);
    free(mp);
    cJSON *root = text ? cJSON_ParseWithLength(text, n) : NULL;
    free(text);
    return root;
}

int tn_checkpoint_load(const char *dir, tn_model *m, tn_adamw *opt, tn_ckpt_state *st) {
    if (tn_checkpoint_verify(dir) != 0) return -1;
    if ((m->lora.r ? tn_model_load_adapter(m, dir) : tn_model_load_hf(m, dir)) != 0) return -1;
    /* this rank's moments (opt's spans: all, or its shard), from one file or from shards written at any world
     * size and layout */
    float *mh = tn_xalloc_floats(opt->n ? opt->n : 1), *vh = tn_xalloc_floats(opt->n ? opt->n : 1);
    int rc = tn_checkpoint_read_moments(dir, m->n_trainable, opt->spans, opt->n_spans, mh, vh);
    if (rc == 0) opt->be->upload(opt->m, mh, opt->n), opt->be->upload(opt->v, vh, opt->n);
    free(mh), free(vh);
    if (rc) return rc;
    /* the position comes from the manifest (verified above) */
    cJSON *root = read_manifest(dir);
    const cJSON *step = cJSON_GetObjectItemCaseSensitive(root, "step"),
                *seen = cJSON_GetObjectItemCaseSensitive(root, "samples_seen"),
                *adam = cJSON_GetObjectItemCaseSensitive(root, "adam_step");
    if (!json_count(step, INT_MAX) || !json_count(seen, 9007199254740992.0) || !json_count(adam, INT_MAX)) {
        cJSON_Delete(root);
        return tn_err("%s/%s: step, samples_seen or adam_step is missing or not a whole count", dir, MANIFEST);
    }
    st->step = (int)step->valuedouble;
    st->samples_seen = (int64_t)seen->valuedouble;
    st->adam_step = (int)adam->valuedouble;
    opt->step = st->adam_step;
    cJSON_Delete(root);
    return 0;
}

int tn_checkpoint_recipe(const char *dir, char *out, size_t n) {
    cJSON *root = read_manifest(dir);
    out[0] = '\0';
    if (!root) return 0; /* no manifest: tn_checkpoint_verify/_load name the problem */
    const cJSON *r = cJSON_GetObjectItemCaseSensitive(root, "recipe"), *e;
    if (!cJSON_IsObject(r)) r = NULL;
    size_t used = 0;
    cJSON_ArrayForEach(e, r) {
        if (!cJSON_IsString(e) || strchr(e->string, '=') || strchr(e->string, '\n') || strchr(e->valuestring, '\n'))
            continue; /* not written by tandem: nothing to compare */
        int k = snprintf(out + used, n - used, "%s=%s\n", e->string, e->valuestring);
        if (k < 0 || (size_t)k >= n - used) break;
        used += (size_t)k;
    }
    out[used] = '\0';
    cJSON_Delete(root);
    return 0;
}

int tn_checkpoint_prune(const char *output_dir, int limit) {
    if (limit <= 0) return 0;
    int *steps, n = tn_checkpoint_steps(output_dir, &steps), kept = 0, rc = 0;
    for (int i = 0; i < n; i++) {
        char name[64];
        snprintf(name, sizeof name, "checkpoint-%d", steps[i]);
        char *dir = tn_path_join(output_dir, name);
        int good = tn_checkpoint_verify(dir) == 0;
        if (good && kept < limit) kept++;
        else if (kept >= 1 && rm_tree(dir) != 0) rc = -1; /* never before a verified one is kept */
        free(dir);
    }
    free(steps);
    return rc;
}
