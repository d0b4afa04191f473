/* fuzz_safetensors -- safetensors headers and data offsets (src/model/safetensors.c).
 *
 * Input starting with '{': a model.safetensors.index.json, opened with st_set_open in a folder that
 * holds two valid shards (model-00001-of-00002.safetensors: a, b; model-00002-of-00002.safetensors:
 * c). Any other input: a whole .safetensors file for st_open. Every tensor of what opens is then read
 * with st_read_f32 + st_read_f64 (float dtypes) or st_read_i64 (integer dtypes): ASan checks that no
 * byte outside the file is touched; the tensors' byte ranges must lie inside the data section. */
#include "fuzz_util.h"
#include "model/safetensors.h"

static void read_all(const st_file *f) {
    for (int i = 0; i < f->n; i++) {
        const st_tensor *t = &f->tensors[i];
        FZ_ASSERT(t->begin <= t->end && t->end <= f->size - f->data_start);
        FZ_ASSERT((uint64_t)t->numel * st_dtype_size(t->dtype) == t->end - t->begin);
        FZ_ASSERT(st_find(f, t->name) != NULL);
        int is_float = t->dtype == ST_F32 || t->dtype == ST_F16 || t->dtype == ST_BF16 || t->dtype == ST_F64;
        /* numel <= file size: the buffer is bounded by the input */
        void *buf = malloc((size_t)t->numel * 8 + 8);
        if (!buf) abort();
        fz_err_reset();
        if (is_float) {
            FZ_ASSERT(st_read_f32(f, t, buf, t->numel) == 0);
            FZ_ASSERT(st_read_f64(f, t, buf, t->numel) == 0);
            FZ_ASSERT(st_read_i64(f, t, buf, t->numel) == -1);  /* wrong kind: refused */
        } else {
            FZ_ASSERT(st_read_i64(f, t, buf, t->numel) == 0);
            FZ_ASSERT(st_read_f32(f, t, buf, t->numel) == -1);
        }
        FZ_ASSERT(st_read_f32(f, t, buf, t->numel + 1) == -1);  /* wrong count: refused */
        free(buf);
    }
}

static const char *index_dir(void) {
    static char *dir;
    if (dir) return dir;
    dir = fz_path("idx");
    FZ_ASSERT(tn_mkdirs(dir) == 0);
    float a[2] = {1, 2}, b[2] = {3, 4};
    int64_t c[3] = {5, 6, 7};
    st_entry e1[2] = {{.name = "a", .dtype = ST_F32, .src_dtype = ST_F32, .ndim = 1, .shape = {2}, .data = a},
                      {.name = "b", .dtype = ST_BF16, .src_dtype = ST_F32, .ndim = 2, .shape = {1, 2}, .data = b}};
    st_entry e2[1] = {{.name = "c", .dtype = ST_I32, .src_dtype = ST_I64, .ndim = 1, .shape = {3}, .data = c}};
    char *p1 = tn_path_join(dir, "model-00001-of-00002.safetensors"), *p2 = tn_path_join(dir, "model-00002-of-00002.safetensors");
    FZ_ASSERT(st_write(p1, e1, 2, NULL) == 0 && st_write(p2, e2, 1, NULL) == 0);
    free(p1), free(p2);
    return dir;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (size > 0 && data[0] == '{') {
        const char *dir = index_dir();
        char *ip = tn_path_join(dir, "model.safetensors.index.json");
        fz_write(ip, data, size);
        st_set s;
        fz_err_reset();
        if (st_set_open(&s, dir) != 0) {
            fz_check_error("idx");  /* the index or the shard at fault */
        } else {
            FZ_ASSERT(s.nfiles >= 1 && s.nfiles <= 2);
            for (int i = 0; i < s.nfiles; i++) read_all(&s.files[i]);
            st_set_close(&s);
        }
        free(ip);
        return 0;
    }
    char *p = fz_path("fuzz.safetensors");
    fz_write(p, data, size);
    st_file f;
    fz_err_reset();
    if (st_open(&f, p) != 0) {
        fz_check_error("fuzz.safetensors");
    } else {
        read_all(&f);
        st_close(&f);
    }
    free(p);
    return 0;
}
