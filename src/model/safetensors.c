/* safetensors.c -- see safetensors.h.
 *
 * Reading trusts nothing in the file: the header is copied out of the mapping and parsed by cJSON, and
 * every number is checked (integral, within 2^53 so the double cJSON hands back is exact, products
 * overflow-checked) before any byte of tensor data is touched. Writing mirrors the Rust/Python
 * reference: "__metadata__" first, tensors sorted by name and packed back to back, compact header
 * space-padded to a multiple of 8 so the data section starts 8-byte aligned. */
#include "model/safetensors.h"

#include "core/core.h"

#include <cjson/cJSON.h>
#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ != __ORDER_LITTLE_ENDIAN__
#error "safetensors.c copies tensor bytes as-is and so needs a little-endian host"
#endif

#define ST_MAX_HEADER ((uint64_t)100 << 20)   /* the Rust reference caps the header at 100 MB too */
#define ST_MAX_EXACT 9007199254740992.0       /* 2^53: beyond it a JSON number is no longer exact */
#define ST_SINGLE "model.safetensors"
#define ST_INDEX "model.safetensors.index.json"

static const char *const k_dtype_names[] = {"F32", "F16", "BF16", "F64", "I64", "I32", "I16", "I8", "U8", "BOOL"};
static const size_t k_dtype_sizes[] = {4, 2, 2, 8, 8, 4, 2, 1, 1, 1};
#define ST_NDTYPES ((int)(sizeof k_dtype_sizes / sizeof k_dtype_sizes[0]))

const char *st_dtype_name(st_dtype t) { return (unsigned)t < ST_NDTYPES ? k_dtype_names[t] : "?"; }
size_t st_dtype_size(st_dtype t) { return (unsigned)t < ST_NDTYPES ? k_dtype_sizes[t] : 0; }

static int dtype_is_float(st_dtype t) { return t == ST_F32 || t == ST_F16 || t == ST_BF16 || t == ST_F64; }

static int dtype_from_name(const char *s, st_dtype *t) {
    for (int i = 0; i < ST_NDTYPES; i++)
        if (strcmp(s, k_dtype_names[i]) == 0) {
            *t = (st_dtype)i;
            return 0;
        }
    return -1;
}

/* ---- fp16 / bf16 ---- */

static float bits_f32(uint32_t u) {
    float f;
    memcpy(&f, &u, 4);
    return f;
}

static uint32_t f32_bits(float f) {
    uint32_t u;
    memcpy(&u, &f, 4);
    return u;
}

float st_bf16_to_f32(uint16_t h) { return bits_f32((uint32_t)h << 16); }

float st_f16_to_f32(uint16_t h) {
    uint32_t sign = (uint32_t)(h & 0x8000) << 16, exp = (h >> 10) & 0x1f, man = h & 0x3ff;
    if (exp == 0x1f) return bits_f32(sign | 0x7f800000u | (man << 13)); /* inf / nan, payload kept */
    if (exp) return bits_f32(sign | ((exp + 112) << 23) | (man << 13)); /* rebias 15 -> 127 */
    float v = (float)man * 0x1p-24f;                                     /* zero or subnormal: exact */
    return sign ? -v : v;
}

uint16_t st_f32_to_bf16(float f) {
    uint32_t x = f32_bits(f);
    if ((x & 0x7fffffffu) > 0x7f800000u) return (uint16_t)((x >> 16) | 0x40); /* nan stays (quiet) nan */
    x += 0x7fffu + ((x >> 16) & 1);                                           /* round to nearest even */
    return (uint16_t)(x >> 16);
}

uint16_t st_f32_to_f16(float f) {
    uint32_t x = f32_bits(f), sign = (x >> 16) & 0x8000;
    x &= 0x7fffffffu;
    if (x > 0x7f800000u) return (uint16_t)(sign | 0x7e00 | ((x >> 13) & 0x3ff)); /* nan */
    if (x >= 0x477ff000u) return (uint16_t)(sign | 0x7c00); /* >= 65520 (incl. inf) rounds to inf */
    if (x < 0x38800000u) {                                  /* below 2^-14: fp16 subnormal or zero */
        uint32_t e = x >> 23;
        if (e < 102) return (uint16_t)sign;                 /* <= 2^-25 / 2: rounds to zero */
        uint32_t m = (x & 0x7fffffu) | 0x800000u, shift = 126 - e; /* h = m * 2^(e-126) */
        uint32_t h = m >> shift, rem = m & ((1u << shift) - 1), half = 1u << (shift - 1);
        if (rem > half || (rem == half && (h & 1))) h++;    /* may carry into the smallest normal: fine */
        return (uint16_t)(sign | h);
    }
    uint32_t h = (x >> 13) - (112u << 10), rem = x & 0x1fff;
    if (rem > 0x1000 || (rem == 0x1000 && (h & 1))) h++; /* a carry into the exponent is still correct */
    return (uint16_t)(sign | h);
}

/* ---- small helpers ---- */

static const char *shape_str(const int64_t *shape, int ndim, char buf[static 256]) {
    size_t k = 0;
    buf[k++] = '[';
    for (int i = 0; i < ndim; i++)
        k += (size_t)snprintf(buf + k, 256 - k, i ? ", %lld" : "%lld", (long long)shape[i]);
    snprintf(buf + k, 256 - k, "]");
    return buf;
}

/* A JSON number that is a non-negative integer exactly representable in the double cJSON stores. */
static int json_u53(const cJSON *j, uint64_t *out) {
    if (!cJSON_IsNumber(j)) return -1;
    double d = j->valuedouble;
    if (!(d >= 0 && d <= ST_MAX_EXACT) || d != floor(d)) return -1;
    *out = (uint64_t)d;
    return 0;
}

static int cmp_str_ptr(const void *a, const void *b) {
    return strcmp(*(const char *const *)a, *(const char *const *)b);
}

/* ---- reading ---- */

static int map_file(st_file *f) {
    int fd = open(f->path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) return tn_err("%s: cannot open: %s", f->path, strerror(errno));
    struct stat st;
    if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
        close(fd);
        return tn_err("%s: not a regular file", f->path);
    }
    if (st.st_size < 8) {
        close(fd);
        return tn_err("%s: file is %lld bytes, too short for a safetensors header length", f->path,
                      (long long)st.st_size);
    }
    void *p = mmap(NULL, (size_t)st.st_size, PROT_READ, MAP_PRIVATE, fd, 0);
    int e = errno;
    close(fd); /* the mapping keeps the file alive */
    if (p == MAP_FAILED) return tn_err("%s: cannot mmap: %s", f->path, strerror(e));
    f->map = p;
    f->size = (size_t)st.st_size;
    return 0;
}

static int parse_shape(const st_file *f, const char *nm, const cJSON *shape, st_tensor *t) {
    if (!cJSON_IsArray(shape)) return tn_err("%s: tensor '%s': 'shape' is missing or not an array", f->path, nm);
    int nd = cJSON_GetArraySize(shape);
    if (nd > ST_MAX_DIMS)
        return tn_err("%s: tensor '%s': shape has %d dimensions, at most %d supported", f->path, nm, nd, ST_MAX_DIMS);
    uint64_t numel = 1;
    int i = 0;
    for (const cJSON *d = shape->child; d; d = d->next, i++) {
        uint64_t v;
        if (json_u53(d, &v) != 0)
            return tn_err("%s: tensor '%s': shape[%d] is not a non-negative integer", f->path, nm, i);
        if (__builtin_mul_overflow(numel, v, &numel) || numel > (uint64_t)INT64_MAX)
            return tn_err("%s: tensor '%s': shape overflows 64 bits", f->path, nm);
        t->shape[i] = (int64_t)v;
    }
    t->ndim = nd;
    t->numel = (int64_t)numel;
    return 0;
}

static int parse_offsets(const st_file *f, const char *nm, const cJSON *offs, st_tensor *t) {
    char sb[256];
    if (!cJSON_IsArray(offs) || cJSON_GetArraySize(offs) != 2 || json_u53(offs->child, &t->begin) != 0 ||
        json_u53(offs->child->next, &t->end) != 0)
        return tn_err("%s: tensor '%s': 'data_offsets' is not an array of two non-negative integers", f->path, nm);
    uint64_t bytes;
    if (__builtin_mul_overflow((uint64_t)t->numel, (uint64_t)st_dtype_size(t->dtype), &bytes))
        return tn_err("%s: tensor '%s': shape %s x %s overflows 64 bits", f->path, nm,
                      shape_str(t->shape, t->ndim, sb), st_dtype_name(t->dtype));
    if (t->end < t->begin || t->end - t->begin != bytes)
        return tn_err("%s: tensor '%s': data_offsets [%llu, %llu] do not match shape %s x %s (%llu bytes)", f->path,
                      nm, (unsigned long long)t->begin, (unsigned long long)t->end, shape_str(t->shape, t->ndim, sb),
                      st_dtype_name(t->dtype), (unsigned long long)bytes);
    uint64_t avail = f->size - f->data_start;
    if (t->end > avail)
        return tn_err("%s: tensor '%s': data_offsets [%llu, %llu] run past the end of the data (%llu bytes)", f->path,
                      nm, (unsigned long long)t->begin, (unsigned long long)t->end, (unsigned long long)avail);
    return 0;
}

static int parse_tensor(const st_file *f, const cJSON *item, st_tensor *t) {
    char nb[96];
    const char *nm = tn_shown(item->string, nb);
    if (!cJSON_IsObject(item)) return tn_err("%s: tensor '%s': entry is not an object", f->path, nm);
    const cJSON *dt = cJSON_GetObjectItemCaseSensitive(item, "dtype");
    if (!cJSON_IsString(dt)) return tn_err("%s: tensor '%s': 'dtype' is missing or not a string", f->path, nm);
    char db[96];
    if (dtype_from_name(dt->valuestring, &t->dtype) != 0)
        return tn_err("%s: tensor '%s': unsupported dtype '%s' (accepted: F32, F16, BF16, F64, I64, I32, I16, I8, "
                      "U8, BOOL)", f->path, nm, tn_shown(dt->valuestring, db));
    if (parse_shape(f, nm, cJSON_GetObjectItemCaseSensitive(item, "shape"), t) != 0) return -1;
    return parse_offsets(f, nm, cJSON_GetObjectItemCaseSensitive(item, "data_offsets"), t);
}

static int check_metadata(const st_file *f, const cJSON *md) {
    if (!cJSON_IsObject(md)) return tn_err("%s: '__metadata__' is not an object", f->path);
    char kb[96];
    for (const cJSON *m = md->child; m; m = m->next)
        if (!cJSON_IsString(m)) return tn_err("%s: '__metadata__': value of '%s' is not a string", f->path, tn_shown(m->string, kb));
    return 0;
}

/* Names are unique: cJSON keeps duplicate keys, so sort a copy of the names and compare neighbours. */
static int check_unique(const st_file *f) {
    const char **names = tn_xcalloc((size_t)f->n, sizeof *names);
    for (int i = 0; i < f->n; i++) names[i] = f->tensors[i].name;
    qsort(names, (size_t)f->n, sizeof *names, cmp_str_ptr);
    int rc = 0;
    char nb[96];
    for (int i = 1; i < f->n && rc == 0; i++)
        if (strcmp(names[i - 1], names[i]) == 0) rc = tn_err("%s: tensor '%s' appears twice in the header", f->path, tn_shown(names[i], nb));
    free(names);
    return rc;
}

/* The data section as the reference lays it out and its validate() demands: tensors packed back to back
 * from byte 0 to the end, in offset order. Two tensors sharing bytes, or a range shifted so that bytes
 * belong to no tensor, mean a damaged or hostile header: refused, naming the tensors. */
static int by_offsets(const void *a, const void *b) {
    const st_tensor *x = *(const st_tensor *const *)a, *y = *(const st_tensor *const *)b;
    if (x->begin != y->begin) return x->begin < y->begin ? -1 : 1;
    return x->end < y->end ? -1 : x->end > y->end;
}

static int check_layout(const st_file *f) {
    const st_tensor **order = tn_xcalloc((size_t)f->n ? (size_t)f->n : 1, sizeof *order);
    for (int i = 0; i < f->n; i++) order[i] = &f->tensors[i];
    qsort(order, (size_t)f->n, sizeof *order, by_offsets);
    uint64_t next = 0, avail = f->size - f->data_start;
    const st_tensor *prev = NULL;
    char a[96], b[96];
    int rc = 0;
    for (int i = 0; i < f->n && rc == 0; i++) {
        const st_tensor *t = order[i];
        if (prev && t->begin < next)
            rc = tn_err("%s: tensors '%s' data_offsets [%llu, %llu] and '%s' [%llu, %llu] overlap (share bytes)", f->path,
                        tn_shown(prev->name, a), (unsigned long long)prev->begin, (unsigned long long)prev->end,
                        tn_shown(t->name, b), (unsigned long long)t->begin, (unsigned long long)t->end);
        else if (t->begin != next)
            rc = tn_err("%s: tensor '%s': data_offsets [%llu, %llu] are misaligned: bytes [%llu, %llu) before it belong "
                        "to no tensor (safetensors packs tensors back to back from byte 0)", f->path, tn_shown(t->name, a),
                        (unsigned long long)t->begin, (unsigned long long)t->end, (unsigned long long)next,
                        (unsigned long long)t->begin);
        next = t->end, prev = t;
    }
    if (rc == 0 && next != avail)
        rc = tn_err("%s: bytes [%llu, %llu) at the end of the data belong to no tensor%s%s%s (misaligned data_offsets "
                    "or a damaged file)", f->path, (unsigned long long)next, (unsigned long long)avail,
                    prev ? "; the last one, '" : "", prev ? tn_shown(prev->name, a) : "", prev ? "', ends before" : "");
    free(order);
    return rc;
}

static int parse_entries(st_file *f, const cJSON *root) {
    int n = 0, nmeta = 0;
    for (const cJSON *it = root->child; it; it = it->next) {
        if (strcmp(it->string, "__metadata__") == 0) {
            if (++nmeta > 1) return tn_err("%s: '__metadata__' appears twice in the header", f->path);
            if (check_metadata(f, it) != 0) return -1;
        } else {
            n++;
        }
    }
    f->tensors = tn_xcalloc((size_t)n ? (size_t)n : 1, sizeof *f->tensors);
    for (const cJSON *it = root->child; it; it = it->next) {
        if (strcmp(it->string, "__metadata__") == 0) continue;
        st_tensor *t = &f->tensors[f->n];
        if (parse_tensor(f, it, t) != 0) return -1;
        t->name = tn_xstrdup(it->string);
        f->n++;
    }
    return check_unique(f) == 0 ? check_layout(f) : -1;
}

static int parse_header(st_file *f) {
    uint64_t n;
    memcpy(&n, f->map, 8);
    if (n > ST_MAX_HEADER)
        return tn_err("%s: header length %llu is absurd (more than 100 MB); not a safetensors file?", f->path,
                      (unsigned long long)n);
    if (n > f->size - 8)
        return tn_err("%s: header length %llu runs past the end of the file (%zu bytes); truncated?", f->path,
                      (unsigned long long)n, f->size);
    f->data_start = 8 + (size_t)n;
    if (memchr(f->map + 8, 0, (size_t)n)) return tn_err("%s: header contains a NUL byte; not a safetensors file?", f->path);
    char *text = tn_xmalloc((size_t)n + 1); /* cJSON wants a NUL-terminated string */
    memcpy(text, f->map + 8, (size_t)n);
    text[n] = 0;
    const char *end = NULL;
    cJSON *root = cJSON_ParseWithOpts(text, &end, 1);
    int rc;
    if (!root)
        rc = tn_err("%s: header is not valid JSON (at byte %zu of %llu)", f->path, end ? (size_t)(end - text) : 0,
                    (unsigned long long)n);
    else if (!cJSON_IsObject(root))
        rc = tn_err("%s: header is not a JSON object", f->path);
    else
        rc = parse_entries(f, root);
    cJSON_Delete(root);
    free(text);
    return rc;
}

int st_open(st_file *f, const char *path) {
    memset(f, 0, sizeof *f);
    f->path = tn_xstrdup(path);
    if (map_file(f) != 0 || parse_header(f) != 0) {
        st_close(f);
        return -1;
    }
    return 0;
}

void st_close(st_file *f) {
    if (!f) return;
    if (f->map) munmap(f->map, f->size);
    for (int i = 0; i < f->n; i++) free(f->tensors[i].name);
    free(f->tensors);
    free(f->path);
    memset(f, 0, sizeof *f);
}

const st_tensor *st_find(const st_file *f, const char *name) {
    for (int i = 0; i < f->n; i++)
        if (strcmp(f->tensors[i].name, name) == 0) return &f->tensors[i];
    return NULL;
}

static int check_read(const st_file *f, const st_tensor *t, int64_t n, int want_float) {
    char nb[96];
    if (n != t->numel)
        return tn_err("%s: tensor '%s': asked for %lld elements, the tensor has %lld", f->path, tn_shown(t->name, nb),
                      (long long)n, (long long)t->numel);
    if (dtype_is_float(t->dtype) != want_float)
        return tn_err("%s: tensor '%s' is %s; cannot read it as %s", f->path, tn_shown(t->name, nb),
                      st_dtype_name(t->dtype), want_float ? "floating point" : "integers");
    return 0;
}

static const uint8_t *tensor_bytes(const st_file *f, const st_tensor *t) { return f->map + f->data_start + t->begin; }

/* Elements are loaded with memcpy: a hostile (or merely odd) file may leave them unaligned. */
static double load_float(const uint8_t *p, st_dtype t, int64_t i) {
    uint16_t h;
    float x;
    double d;
    switch (t) {
    case ST_F16: memcpy(&h, p + 2 * i, 2); return st_f16_to_f32(h);
    case ST_BF16: memcpy(&h, p + 2 * i, 2); return st_bf16_to_f32(h);
    case ST_F32: memcpy(&x, p + 4 * i, 4); return x;
    default: memcpy(&d, p + 8 * i, 8); return d;
    }
}

static int64_t load_int(const uint8_t *p, st_dtype t, int64_t i) {
    int64_t q;
    int32_t w;
    int16_t s;
    switch (t) {
    case ST_I64: memcpy(&q, p + 8 * i, 8); return q;
    case ST_I32: memcpy(&w, p + 4 * i, 4); return w;
    case ST_I16: memcpy(&s, p + 2 * i, 2); return s;
    case ST_I8: return (int8_t)p[i];
    case ST_U8: return p[i];
    default: return p[i] != 0; /* BOOL */
    }
}

int st_read_f32(const st_file *f, const st_tensor *t, float *dst, int64_t n) {
    if (check_read(f, t, n, 1) != 0) return -1;
    const uint8_t *p = tensor_bytes(f, t);
    if (t->dtype == ST_F32) {
        if (n) memcpy(dst, p, (size_t)n * 4);
        return 0;
    }
#pragma omp parallel for schedule(static) if (n > (1 << 20))
    for (int64_t i = 0; i < n; i++) dst[i] = (float)load_float(p, t->dtype, i);
    return 0;
}

int st_read_f64(const st_file *f, const st_tensor *t, double *dst, int64_t n) {
    if (check_read(f, t, n, 1) != 0) return -1;
    const uint8_t *p = tensor_bytes(f, t);
#pragma omp parallel for schedule(static) if (n > (1 << 20))
    for (int64_t i = 0; i < n; i++) dst[i] = load_float(p, t->dtype, i);
    return 0;
}

int st_read_i64(const st_file *f, const st_tensor *t, int64_t *dst, int64_t n) {
    if (check_read(f, t, n, 0) != 0) return -1;
    const uint8_t *p = tensor_bytes(f, t);
    for (int64_t i = 0; i < n; i++) dst[i] = load_int(p, t->dtype, i);
    return 0;
}

/* ---- writing ---- */

static void json_string(FILE *o, const char *s) {
    fputc('"', o);
    for (const unsigned char *p = (const unsigned char *)s; *p; p++) {
        if (*p == '"' || *p == '\\')
            fprintf(o, "\\%c", *p);
        else if (*p < 0x20)
            fprintf(o, "\\u%04x", *p);
        else
            fputc(*p, o);
    }
    fputc('"', o);
}

static FILE *memstream(char **buf, size_t *len) {
    FILE *o = open_memstream(buf, len);
    if (!o) tn_die("out of memory (open_memstream)");
    return o;
}

/* Checks one entry and returns its stored size in *bytes. */
static int check_entry(const char *path, const st_entry *e, uint64_t *bytes) {
    char nb[96];
    const char *nm = tn_shown(e->name, nb);
    if (strcmp(e->name, "__metadata__") == 0) return tn_err("%s: '__metadata__' cannot be a tensor name", path);
    if ((unsigned)e->dtype >= ST_NDTYPES) return tn_err("%s: tensor '%s': invalid stored dtype %d", path, nm, (int)e->dtype);
    if (e->src_dtype != ST_F32 && e->src_dtype != ST_F64 && e->src_dtype != ST_I64)
        return tn_err("%s: tensor '%s': in-memory data must be F32, F64 or I64, not %s", path, nm, st_dtype_name(e->src_dtype));
    if (dtype_is_float(e->dtype) != dtype_is_float(e->src_dtype))
        return tn_err("%s: tensor '%s': cannot store %s data as %s", path, nm, st_dtype_name(e->src_dtype),
                      st_dtype_name(e->dtype));
    if (e->ndim < 0 || e->ndim > ST_MAX_DIMS)
        return tn_err("%s: tensor '%s': ndim %d is outside 0..%d", path, nm, e->ndim, ST_MAX_DIMS);
    uint64_t numel = 1;
    for (int i = 0; i < e->ndim; i++)
        if (e->shape[i] < 0 || __builtin_mul_overflow(numel, (uint64_t)e->shape[i], &numel))
            return tn_err("%s: tensor '%s': shape[%d] = %lld is negative or overflows", path, nm, i, (long long)e->shape[i]);
    if (numel > (uint64_t)INT64_MAX || __builtin_mul_overflow(numel, (uint64_t)st_dtype_size(e->dtype), bytes))
        return tn_err("%s: tensor '%s': size overflows 64 bits", path, nm);
    if (numel && !e->data) return tn_err("%s: tensor '%s': data is NULL", path, nm);
    return 0;
}

static int cmp_entry_ptr(const void *a, const void *b) {
    return strcmp((*(const st_entry *const *)a)->name, (*(const st_entry *const *)b)->name);
}

/* Validates all entries, returns them sorted by name (caller frees) with their stored sizes. */
static const st_entry **sort_entries(const char *path, const st_entry *entries, int n, uint64_t **sizes) {
    if (n < 0 || (n > 0 && !entries)) {
        tn_err("%s: invalid tensor list (n = %d)", path, n);
        return NULL;
    }
    const st_entry **v = tn_xcalloc((size_t)n + 1, sizeof *v);
    *sizes = tn_xcalloc((size_t)n + 1, sizeof **sizes);
    int rc = 0;
    for (int i = 0; i < n && rc == 0; i++) {
        v[i] = &entries[i];
        if (!v[i]->name) rc = tn_err("%s: tensor #%d has no name", path, i);
    }
    if (rc == 0) qsort(v, (size_t)n, sizeof *v, cmp_entry_ptr);
    char nb[96];
    for (int i = 0; i < n && rc == 0; i++) {
        rc = check_entry(path, v[i], &(*sizes)[i]);
        if (rc == 0 && i && strcmp(v[i - 1]->name, v[i]->name) == 0)
            rc = tn_err("%s: tensor '%s' is given twice", path, tn_shown(v[i]->name, nb));
    }
    if (rc == 0) return v;
    free(v);
    free(*sizes);
    *sizes = NULL;
    return NULL;
}

/* Compact header, keys in the reference's order, space-padded so the data starts 8-byte aligned. */
static char *build_header(const st_entry *const *v, const uint64_t *sizes, int n, const char *const *metadata,
                          size_t *len) {
    char *buf = NULL;
    FILE *o = memstream(&buf, len);
    const char *format = "pt";
    for (const char *const *m = metadata; m && m[0] && m[1]; m += 2)
        if (strcmp(m[0], "format") == 0) format = m[1];
    fputs("{\"__metadata__\":{\"format\":", o);
    json_string(o, format);
    for (const char *const *m = metadata; m && m[0] && m[1]; m += 2) {
        if (strcmp(m[0], "format") == 0) continue;
        fputc(',', o);
        json_string(o, m[0]);
        fputc(':', o);
        json_string(o, m[1]);
    }
    fputc('}', o);
    uint64_t off = 0;
    for (int i = 0; i < n; i++) {
        fputc(',', o);
        json_string(o, v[i]->name);
        fprintf(o, ":{\"dtype\":\"%s\",\"shape\":[", st_dtype_name(v[i]->dtype));
        for (int d = 0; d < v[i]->ndim; d++) fprintf(o, d ? ",%lld" : "%lld", (long long)v[i]->shape[d]);
        fprintf(o, "],\"data_offsets\":[%llu,%llu]}", (unsigned long long)off, (unsigned long long)(off + sizes[i]));
        off += sizes[i];
    }
    fputc('}', o);
    fflush(o);
    while (*len % 8) fputc(' ', o), fflush(o);
    fclose(o);
    return buf;
}

/* Elements [i0, i0 + cnt) of float data e into out, in the stored dtype. */
static void convert_floats(const st_entry *e, int64_t i0, int64_t cnt, uint8_t *out) {
    for (int64_t k = 0; k < cnt; k++) {
        double d = e->src_dtype == ST_F32 ? ((const float *)e->data)[i0 + k] : ((const double *)e->data)[i0 + k];
        float x = (float)d; /* F64 data bound for F16/BF16 is rounded twice (via fp32): fine for weights */
        uint16_t h;
        switch (e->dtype) {
        case ST_F64: memcpy(out + 8 * k, &d, 8); break;
        case ST_F32: memcpy(out + 4 * k, &x, 4); break;
        case ST_F16: h = st_f32_to_f16(x); memcpy(out + 2 * k, &h, 2); break;
        default: h = st_f32_to_bf16(x); memcpy(out + 2 * k, &h, 2); break;
        }
    }
}

/* Elements [i0, i0 + cnt) of int64 data e into out, narrowed to the stored dtype (range-checked). */
static int convert_ints(const char *path, const st_entry *e, int64_t i0, int64_t cnt, uint8_t *out) {
    int64_t lo = 0, hi = 1; /* BOOL */
    switch (e->dtype) {
    case ST_I32: lo = INT32_MIN, hi = INT32_MAX; break;
    case ST_I16: lo = INT16_MIN, hi = INT16_MAX; break;
    case ST_I8: lo = INT8_MIN, hi = INT8_MAX; break;
    case ST_U8: hi = UINT8_MAX; break;
    default: break;
    }
    size_t es = st_dtype_size(e->dtype);
    for (int64_t k = 0; k < cnt; k++) {
        int64_t v = ((const int64_t *)e->data)[i0 + k];
        char nb[96];
        if (v < lo || v > hi)
            return tn_err("%s: tensor '%s': element %lld = %lld does not fit in %s", path, tn_shown(e->name, nb),
                          (long long)(i0 + k), (long long)v, st_dtype_name(e->dtype));
        int32_t w = (int32_t)v;
        int16_t s = (int16_t)v;
        uint8_t *q = out + (size_t)k * es;
        if (es == 4) memcpy(q, &w, 4);
        else if (es == 2) memcpy(q, &s, 2);
        else *q = (uint8_t)v;
    }
    return 0;
}

static int write_data(tn_atomic_file *a, const char *path, const st_entry *e, uint8_t *chunk, int64_t chunk_elems) {
    int64_t numel = 1;
    for (int d = 0; d < e->ndim; d++) numel *= e->shape[d];
    size_t es = st_dtype_size(e->dtype);
    if (e->dtype == e->src_dtype) return tn_atomic_write(a, e->data, (size_t)numel * es); /* no conversion */
    for (int64_t i = 0; i < numel; i += chunk_elems) {
        int64_t cnt = numel - i < chunk_elems ? numel - i : chunk_elems;
        if (dtype_is_float(e->dtype))
            convert_floats(e, i, cnt, chunk);
        else if (convert_ints(path, e, i, cnt, chunk) != 0)
            return -1;
        if (tn_atomic_write(a, chunk, (size_t)cnt * es) != 0) return -1;
    }
    return 0;
}

/* Writes already validated, sorted entries. */
static int write_sorted(const char *path, const st_entry *const *v, const uint64_t *sizes, int n,
                        const char *const *metadata) {
    size_t hlen;
    char *header = build_header(v, sizes, n, metadata, &hlen);
    tn_atomic_file *a = tn_atomic_open(path);
    if (!a) {
        free(header);
        return -1;
    }
    enum { CHUNK = 8192 };
    uint8_t *chunk = tn_xmalloc(CHUNK * 8);
    uint64_t hl = hlen;
    int rc = tn_atomic_write(a, &hl, 8) || tn_atomic_write(a, header, hlen) ? -1 : 0;
    for (int i = 0; i < n && rc == 0; i++) rc = write_data(a, path, v[i], chunk, CHUNK);
    free(chunk);
    free(header);
    if (rc != 0) {
        tn_atomic_abort(a);
        return -1;
    }
    return tn_atomic_commit(a);
}

int st_write(const char *path, const st_entry *entries, int n, const char *const *metadata) {
    uint64_t *sizes;
    const st_entry **v = sort_entries(path, entries, n, &sizes);
    if (!v) return -1;
    int rc = write_sorted(path, v, sizes, n, metadata);
    free(v);
    free(sizes);
    return rc;
}

/* ---- model folders ---- */

static int open_single(st_set *s, const char *path) {
    s->files = tn_xcalloc(1, sizeof *s->files);
    if (st_open(&s->files[0], path) != 0) return -1;
    s->nfiles = 1;
    return 0;
}

/* A shard name from the index must stay inside the folder, and control characters (which no shard
 * name has) would break the one-line error that names it. */
static int plain_file_name(const char *s) {
    for (const char *p = s; *p; p++)
        if ((unsigned char)*p < 0x20) return 0;
    return s[0] && strchr(s, '/') == NULL && strcmp(s, ".") != 0 && strcmp(s, "..") != 0;
}

/* Distinct shard names of the weight map, sorted; each shard is then opened once. */
static int open_shards(st_set *s, const char *dir, const char *ipath, const cJSON *wm, const char ***names) {
    int n = cJSON_GetArraySize(wm), k = 0;
    const char **v = tn_xcalloc((size_t)n + 1, sizeof *v);
    char nb[96];
    for (const cJSON *e = wm->child; e; e = e->next) {
        if (!cJSON_IsString(e) || !plain_file_name(e->valuestring)) {
            free(v);
            return tn_err("%s: weight_map entry '%s' is not a plain shard file name", ipath, tn_shown(e->string, nb));
        }
        v[k++] = e->valuestring;
    }
    qsort(v, (size_t)k, sizeof *v, cmp_str_ptr);
    int m = 0;
    for (int i = 0; i < k; i++)
        if (m == 0 || strcmp(v[m - 1], v[i]) != 0) v[m++] = v[i];
    *names = v;
    s->files = tn_xcalloc((size_t)m + 1, sizeof *s->files);
    for (int i = 0; i < m; i++) {
        char *p = tn_path_join(dir, v[i]);
        int rc = st_open(&s->files[i], p);
        free(p);
        if (rc != 0) return -1;
        s->nfiles++;
    }
    return 0;
}

typedef struct {
    const char *name;
    int file;
} name_loc;

static int cmp_name_loc(const void *a, const void *b) {
    return strcmp(((const name_loc *)a)->name, ((const name_loc *)b)->name);
}

/* Every weight_map entry must be in its shard, and no tensor may be in two shards (lookups would be
 * ambiguous). Sorting all names once keeps this O(n log n) for big models. */
static int check_weight_map(const st_set *s, const char *ipath, const cJSON *wm, const char **shard_names) {
    int total = 0;
    for (int i = 0; i < s->nfiles; i++) total += s->files[i].n;
    name_loc *all = tn_xcalloc((size_t)total + 1, sizeof *all);
    int k = 0, rc = 0;
    for (int i = 0; i < s->nfiles; i++)
        for (int j = 0; j < s->files[i].n; j++) all[k++] = (name_loc){s->files[i].tensors[j].name, i};
    qsort(all, (size_t)total, sizeof *all, cmp_name_loc);
    char nb[96], ab[96], bb[96];
    for (int i = 1; i < total && rc == 0; i++)
        if (strcmp(all[i - 1].name, all[i].name) == 0)
            rc = tn_err("%s: tensor '%s' is in both %s and %s", ipath, tn_shown(all[i].name, nb),
                        tn_shown(shard_names[all[i - 1].file], ab), tn_shown(shard_names[all[i].file], bb));
    for (const cJSON *e = wm->child; e && rc == 0; e = e->next) {
        name_loc key = {e->string, 0};
        const name_loc *hit = bsearch(&key, all, (size_t)total, sizeof *all, cmp_name_loc);
        if (!hit || strcmp(shard_names[hit->file], e->valuestring) != 0)
            rc = tn_err("%s: weight_map puts tensor '%s' in %s, but that shard does not contain it", ipath,
                        tn_shown(e->string, nb), tn_shown(e->valuestring, ab));
    }
    free(all);
    return rc;
}

static int open_index(st_set *s, const char *dir, const char *ipath) {
    size_t len;
    char *text = tn_read_file(ipath, &len, ST_MAX_HEADER);
    if (!text) return -1;
    const char *end = NULL;
    cJSON *root = cJSON_ParseWithOpts(text, &end, 1);
    const cJSON *wm = root ? cJSON_GetObjectItemCaseSensitive(root, "weight_map") : NULL;
    const char **names = NULL;
    int rc;
    if (!root)
        rc = tn_err("%s: not valid JSON (at byte %zu)", ipath, end ? (size_t)(end - text) : 0);
    else if (!cJSON_IsObject(root))
        rc = tn_err("%s: not a JSON object", ipath);
    else if (!cJSON_IsObject(wm))
        rc = tn_err("%s: key 'weight_map' is missing or not an object", ipath);
    else if (wm->child == NULL)
        rc = tn_err("%s: key 'weight_map' is empty", ipath);
    else
        rc = open_shards(s, dir, ipath, wm, &names) == 0 ? check_weight_map(s, ipath, wm, names) : -1;
    free(names);
    cJSON_Delete(root);
    free(text);
    return rc;
}

/* model.safetensors wins when both layouts are present, as in transformers' from_pretrained. */
int st_set_open(st_set *s, const char *dir) {
    memset(s, 0, sizeof *s);
    char *single = tn_path_join(dir, ST_SINGLE), *index = tn_path_join(dir, ST_INDEX);
    int rc;
    if (tn_file_exists(single))
        rc = open_single(s, single);
    else if (tn_file_exists(index))
        rc = open_index(s, dir, index);
    else
        rc = tn_err("%s: no %s or %s in this folder", dir, ST_SINGLE, ST_INDEX);
    free(single);
    free(index);
    if (rc != 0) st_set_close(s);
    return rc;
}

void st_set_close(st_set *s) {
    if (!s) return;
    for (int i = 0; i < s->nfiles; i++) st_close(&s->files[i]);
    free(s->files);
    memset(s, 0, sizeof *s);
}

const st_tensor *st_set_find(const st_set *s, const char *name, const st_file **file) {
    for (int i = 0; i < s->nfiles; i++) {
        const st_tensor *t = st_find(&s->files[i], name);
        if (t) {
            if (file) *file = &s->files[i];
            return t;
        }
    }
    return NULL;
}

/* HF's index layout: json.dumps(indent=2, sort_keys=True); entries are already sorted by name. */
static int write_index(const char *path, const st_entry *const *v, const int *shard, int n, int nshards,
                       uint64_t total) {
    char *buf = NULL;
    size_t len;
    FILE *o = memstream(&buf, &len);
    fprintf(o, "{\n  \"metadata\": {\n    \"total_size\": %llu\n  },\n  \"weight_map\": {", (unsigned long long)total);
    for (int i = 0; i < n; i++) {
        fputs(i ? ",\n    " : "\n    ", o);
        json_string(o, v[i]->name);
        fprintf(o, ": \"model-%05d-of-%05d.safetensors\"", shard[i] + 1, nshards);
    }
    fputs("\n  }\n}\n", o);
    fclose(o);
    int rc = tn_write_file_atomic(path, buf, len);
    free(buf);
    return rc;
}

/* Greedy packing in name order, as transformers' shard_checkpoint does: a new shard starts when the next
 * tensor would overflow the current one; a tensor larger than the limit gets a shard of its own. */
static int assign_shards(const uint64_t *sizes, int n, size_t max_shard_bytes, int *shard) {
    int k = 0;
    uint64_t cur = 0;
    for (int i = 0; i < n; i++) {
        if (cur > 0 && cur + sizes[i] > max_shard_bytes) k++, cur = 0;
        shard[i] = k;
        cur += sizes[i];
    }
    return n ? k + 1 : 1;
}

static int write_sharded(const char *dir, const st_entry *const *v, const uint64_t *sizes, int n, size_t max,
                         uint64_t total) {
    int *shard = tn_xcalloc((size_t)n + 1, sizeof *shard);
    int nshards = assign_shards(sizes, n, max, shard), rc = 0;
    if (nshards > 99999) rc = tn_err("%s: %d shards needed, more than HF's 5-digit naming allows", dir, nshards);
    for (int i = 0, k = 0; i < n && rc == 0; k++) {
        int j = i;
        while (j < n && shard[j] == k) j++;
        char name[64];
        snprintf(name, sizeof name, "model-%05d-of-%05d.safetensors", k + 1, nshards);
        char *p = tn_path_join(dir, name);
        rc = write_sorted(p, v + i, sizes + i, j - i, NULL);
        free(p);
        i = j;
    }
    if (rc == 0) { /* the index goes last: until it lands, readers see the old folder */
        char *ip = tn_path_join(dir, ST_INDEX);
        rc = write_index(ip, v, shard, n, nshards, total);
        free(ip);
    }
    free(shard);
    return rc;
}

/* Removes the other layout's entry file left by an earlier save, so st_set_open cannot pick it up. */
static void remove_stale(const char *dir, const char *name) {
    char *p = tn_path_join(dir, name);
    unlink(p);
    free(p);
}

int st_set_write(const char *dir, const st_entry *entries, int n, size_t max_shard_bytes) {
    if (tn_mkdirs(dir) != 0) return -1;
    uint64_t *sizes;
    const st_entry **v = sort_entries(dir, entries, n, &sizes);
    if (!v) return -1;
    uint64_t total = 0;
    for (int i = 0; i < n; i++) total += sizes[i];
    int rc;
    if (max_shard_bytes == 0 || total <= max_shard_bytes) {
        char *p = tn_path_join(dir, ST_SINGLE);
        rc = write_sorted(p, v, sizes, n, NULL);
        free(p);
        if (rc == 0) remove_stale(dir, ST_INDEX);
    } else {
        rc = write_sharded(dir, v, sizes, n, max_shard_bytes, total);
        if (rc == 0) remove_stale(dir, ST_SINGLE);
    }
    free(v);
    free(sizes);
    return rc;
}
