/* safetensors -- Hugging Face's tensor file format, read and written (single file and sharded folders).
 *
 * File = u64 LE header length N | N bytes JSON header | raw little-endian row-major data. Header maps
 * tensor name -> {"dtype", "shape", "data_offsets": [begin, end)} relative to the data start, plus an
 * optional "__metadata__" object of string values. Every length, offset and shape is validated against
 * the file size before use: a malformed file is an error naming the file and the offending tensor/key.
 * As the reference's validate(), the tensors must tile the data section exactly (back to back from byte 0,
 * in offset order): overlapping or shifted data_offsets are refused, naming the tensors.
 *
 * A model folder holds either model.safetensors or model.safetensors.index.json ("weight_map":
 * name -> shard file) plus its shards; st_set opens either transparently. */
#ifndef TN_SAFETENSORS_H
#define TN_SAFETENSORS_H

#include <stddef.h>
#include <stdint.h>

typedef enum { ST_F32, ST_F16, ST_BF16, ST_F64, ST_I64, ST_I32, ST_I16, ST_I8, ST_U8, ST_BOOL } st_dtype;
#define ST_MAX_DIMS 8

const char *st_dtype_name(st_dtype t);
size_t st_dtype_size(st_dtype t);

typedef struct {
    char *name;
    st_dtype dtype;
    int ndim;
    int64_t shape[ST_MAX_DIMS];
    int64_t numel;
    uint64_t begin, end; /* byte range relative to the data section */
} st_tensor;

typedef struct {
    char *path;
    uint8_t *map;       /* whole file (mmap'ed read-only) */
    size_t size;
    size_t data_start;  /* 8 + header length */
    int n;              /* number of tensors */
    st_tensor *tensors; /* in header order */
} st_file;

int st_open(st_file *f, const char *path);   /* 0 ok, -1 with tn_err */
void st_close(st_file *f);
const st_tensor *st_find(const st_file *f, const char *name);
/* Copy a tensor converting to fp32 / fp64 / int64. Float dtypes (F32, F16, BF16, F64) convert to the float
 * targets, integer dtypes to int64. n must equal the tensor's numel (else error). */
int st_read_f32(const st_file *f, const st_tensor *t, float *dst, int64_t n);
int st_read_f64(const st_file *f, const st_tensor *t, double *dst, int64_t n);
int st_read_i64(const st_file *f, const st_tensor *t, int64_t *dst, int64_t n);

/* One tensor to write. data points to numel elements of src_dtype (ST_F32 or ST_F64 or ST_I64);
 * the file stores dtype (conversion F32->BF16/F16 rounds to nearest even). */
typedef struct {
    const char *name;
    st_dtype dtype;      /* stored dtype */
    st_dtype src_dtype;  /* dtype of data in memory */
    int ndim;
    int64_t shape[ST_MAX_DIMS];
    const void *data;
} st_entry;

/* Write atomically (temp + fsync + rename). Tensors are stored sorted by name, as safetensors does.
 * metadata: NULL or pairs {key, value, key, value, ..., NULL}. */
int st_write(const char *path, const st_entry *entries, int n, const char *const *metadata);

/* A model folder: model.safetensors or model.safetensors.index.json + shards. */
typedef struct {
    int nfiles;
    st_file *files;
} st_set;

int st_set_open(st_set *s, const char *dir);
void st_set_close(st_set *s);
/* Finds name in any shard; returns NULL if absent. *file receives the owning shard. */
const st_tensor *st_set_find(const st_set *s, const char *name, const st_file **file);
/* Write a model folder: one model.safetensors when the total is <= max_shard_bytes (0 = unlimited),
 * else model-0000K-of-0000N.safetensors + model.safetensors.index.json (metadata.total_size, weight_map). */
int st_set_write(const char *dir, const st_entry *entries, int n, size_t max_shard_bytes);

/* fp16 / bf16 conversions (exposed for tests). */
float st_bf16_to_f32(uint16_t h);
float st_f16_to_f32(uint16_t h);
uint16_t st_f32_to_bf16(float f);
uint16_t st_f32_to_f16(float f);

#endif
