/* cuda_backend.cu -- the CUDA backend's state and memory: opening the device, allocations (the parameter slab with
 * its bf16-only frozen part), transfers, scratch buffers, the comm hooks and the tn_backend table. The kernels are
 * in cuda_kernels.cu, matrix products in cuda_gemm.cu, attention in cuda_attention.cu. See cuda_backend.h. */
#include <cublasLt.h>
#include <cuda.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backend/cuda_internal.cuh"
#include "backend/frozen_ranges.h"

cu_state g_cu;

void tn_cuda_fail(const char *what, cudaError_t e, const char *file, int line) {
    tn_die("cuda: %s failed on device %d: %s (%s:%d)", what, g_cu.device, cudaGetErrorString(e), file, line);
}

void cu_launched(const char *kernel) {
    cudaError_t e = cudaGetLastError();
    if (e == cudaSuccess && g_cu.sync_each) e = cudaStreamSynchronize(g_cu.stream);
    if (e != cudaSuccess) tn_die("cuda: kernel %s failed on device %d: %s", kernel, g_cu.device, cudaGetErrorString(e));
}

/* ------------------------------------------------------------------ memory accounting */

/* Every block this backend handed out, for tn_cuda_owns and free(). A parameter slab with a frozen part is a
 * reserved address range whose trainable prefix is mapped (VMM) and whose frozen part lives in `frozen` (bf16). */
typedef struct {
    uintptr_t lo, hi;     /* [lo, hi): the float addresses the caller sees */
    size_t bytes;         /* device bytes held (mapped prefix + bf16 part, or the cudaMalloc size) */
    int vmm;              /* 1: reserved range + mapped prefix */
    CUmemGenericAllocationHandle handle;
    size_t mapped, reserved;
    uintptr_t frozen_lo;  /* first frozen float address (hi when none) */
    bf16 *frozen;
} cu_block;

static pthread_mutex_t g_mu = PTHREAD_MUTEX_INITIALIZER;
static cu_block *g_blocks;
static int g_n_blocks, g_cap_blocks;
static size_t g_bytes, g_peak;
/* The frozen parts, copied out of g_blocks for the lock-free lookup on every kernel call (main thread only). */
#define MAX_FROZEN 16
static tn_frozen_range g_frozen[MAX_FROZEN];
static bf16 *g_frozen_store[MAX_FROZEN];
static int g_n_frozen;

static void account(ptrdiff_t delta) {
    g_bytes = (size_t)((ptrdiff_t)g_bytes + delta);
    if (g_bytes > g_peak) g_peak = g_bytes;
}

static void remember(const cu_block *b) {
    pthread_mutex_lock(&g_mu);
    if (g_n_blocks == g_cap_blocks) {
        g_cap_blocks = g_cap_blocks ? 2 * g_cap_blocks : 64;
        g_blocks = (cu_block *)realloc(g_blocks, (size_t)g_cap_blocks * sizeof *g_blocks);
        if (!g_blocks) tn_die("out of memory (CUDA allocation table)");
    }
    g_blocks[g_n_blocks++] = *b;
    account((ptrdiff_t)b->bytes);
    pthread_mutex_unlock(&g_mu);
}

const bf16 *cu_frozen(const float *p) {
    uintptr_t a = (uintptr_t)p;
    for (int i = 0; i < g_n_frozen; i++)
        if (a >= g_frozen[i].lo && a < g_frozen[i].hi) return g_frozen_store[i] + (a - g_frozen[i].lo) / sizeof(float);
    return NULL;
}

/* ------------------------------------------------------------------ driver entry points (no libcuda link) */

/* The binary must start where no driver is installed, so the driver API is reached through the runtime. */
static struct {
    decltype(&cuMemGetAllocationGranularity) granularity;
    decltype(&cuMemAddressReserve) reserve;
    decltype(&cuMemAddressFree) address_free;
    decltype(&cuMemCreate) create;
    decltype(&cuMemRelease) release;
    decltype(&cuMemMap) map;
    decltype(&cuMemUnmap) unmap;
    decltype(&cuMemSetAccess) set_access;
    decltype(&cuDeviceGet) device_get;
    decltype(&cuDeviceGetAttribute) attribute;
    int ok;
} g_drv;

static void load_driver_entry_points(void) {
#define ENTRY(field, name)                                                                                        \
    do {                                                                                                          \
        cudaDriverEntryPointQueryResult q;                                                                        \
        void *fn = NULL;                                                                                          \
        if (cudaGetDriverEntryPointByVersion(name, &fn, 12000, cudaEnableDefault, &q) != cudaSuccess ||           \
            q != cudaDriverEntryPointSuccess || !fn) {                                                            \
            (void)cudaGetLastError();                                                                             \
            return;                                                                                               \
        }                                                                                                         \
        memcpy(&g_drv.field, &fn, sizeof fn);                                                                     \
    } while (0)
    ENTRY(granularity, "cuMemGetAllocationGranularity");
    ENTRY(reserve, "cuMemAddressReserve");
    ENTRY(address_free, "cuMemAddressFree");
    ENTRY(create, "cuMemCreate");
    ENTRY(release, "cuMemRelease");
    ENTRY(map, "cuMemMap");
    ENTRY(unmap, "cuMemUnmap");
    ENTRY(set_access, "cuMemSetAccess");
    ENTRY(device_get, "cuDeviceGet");
    ENTRY(attribute, "cuDeviceGetAttribute");
#undef ENTRY
    CUdevice dev;
    int vmm = 0;
    if (g_drv.device_get(&dev, g_cu.device) != CUDA_SUCCESS ||
        g_drv.attribute(&vmm, CU_DEVICE_ATTRIBUTE_VIRTUAL_MEMORY_MANAGEMENT_SUPPORTED, dev) != CUDA_SUCCESS)
        vmm = 0;
    g_drv.ok = vmm;
}

/* ------------------------------------------------------------------ bf16 copies of the trainable weights */

/* The parameter slab's fp32 part [g_params_lo, g_params_hi) (the latest alloc_params), and the kept copies of the
 * operands read from it. g_params_version counts writes to it; a copy made at another version is rounded again. */
static uintptr_t g_params_lo, g_params_hi;
static unsigned long long g_params_version = 1;
#define MAX_WEIGHTS 2048
static struct {
    const float *p;
    int rows, cols, ld;
    unsigned long long version;
    bf16 *copy;
} g_weights[MAX_WEIGHTS];
static int g_n_weights;

void cu_params_written(const void *p, size_t bytes) {
    uintptr_t a = (uintptr_t)p;
    if (a < g_params_hi && a + bytes > g_params_lo) g_params_version++;
}

static void drop_weight_copies(void) {
    if (g_n_weights) CU_CHECK(cudaDeviceSynchronize()); /* queued products may still read them */
    for (int i = 0; i < g_n_weights; i++) {
        CU_CHECK(cudaFree(g_weights[i].copy));
        pthread_mutex_lock(&g_mu);
        account(-(ptrdiff_t)((size_t)g_weights[i].rows * g_weights[i].cols * sizeof(bf16)));
        pthread_mutex_unlock(&g_mu);
    }
    g_n_weights = 0;
}

/* ------------------------------------------------------------------ allocation */

static void *device_alloc(size_t bytes, const char *what) {
    void *p = NULL;
    bytes = bytes < 256 ? 256 : (bytes + 255) & ~(size_t)255;
    cudaError_t e = cudaMalloc(&p, bytes);
    if (e != cudaSuccess) {
        (void)cudaGetLastError();
        size_t free_b = 0, total_b = 0;
        cudaMemGetInfo(&free_b, &total_b);
        tn_die("out of GPU memory on device %d allocating %.1f MiB for %s (%.1f of %.1f MiB free; this process holds "
               "%.1f MiB): lower per_device_train_batch_size or cutoff_len, or turn on gradient_checkpointing",
               g_cu.device, bytes / 1048576.0, what, free_b / 1048576.0, total_b / 1048576.0, g_bytes / 1048576.0);
    }
    CU_CHECK(cudaMemsetAsync(p, 0, bytes, g_cu.stream));
    return p;
}

static float *cuda_alloc(size_t n) {
    if (n > SIZE_MAX / sizeof(float) - 4096) tn_die("slab of %zu floats is too large", n);
    float *p = (float *)device_alloc(n * sizeof(float), "a tensor");
    cu_block b;
    memset(&b, 0, sizeof b);
    b.lo = (uintptr_t)p, b.hi = b.lo + n * sizeof(float), b.bytes = n < 64 ? 256 : (n * sizeof(float) + 255) & ~(size_t)255;
    b.frozen_lo = b.hi;
    remember(&b);
    return p;
}

static int32_t *cuda_alloc_i32(size_t n) { return (int32_t *)cuda_alloc(n ? n : 1); }

/* The parameter slab: in bf16 mode with a frozen part, a reserved range of n floats whose trainable prefix alone is
 * backed (VMM), the frozen part held as bf16 beside it. Where VMM is missing, the whole range is plain memory
 * (the frozen weights are still read from the bf16 copy; only the saving is lost). */
static void params_slab(float *p, size_t trainable) {
    drop_weight_copies();
    g_params_lo = (uintptr_t)p, g_params_hi = g_params_lo + trainable * sizeof(float);
    g_params_version++;
}

static float *cuda_alloc_params(size_t n, size_t trainable) {
    if (!g_cu.bf16 || trainable >= n) {
        float *p = cuda_alloc(n);
        params_slab(p, trainable < n ? trainable : n);
        return p;
    }
    if (n > SIZE_MAX / sizeof(float) - (64u << 20)) tn_die("parameter slab of %zu floats is too large", n);
    cu_block b;
    memset(&b, 0, sizeof b);
    size_t frozen_n = n - trainable;
    b.frozen = (bf16 *)device_alloc(frozen_n * sizeof(bf16), "the frozen base weights (bf16)");
    CUmemAllocationProp prop;
    memset(&prop, 0, sizeof prop);
    prop.type = CU_MEM_ALLOCATION_TYPE_PINNED;
    prop.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
    prop.location.id = g_cu.device;
    size_t gran = 0;
    CUdeviceptr va = 0;
    int vmm = g_drv.ok && g_drv.granularity(&gran, &prop, CU_MEM_ALLOC_GRANULARITY_MINIMUM) == CUDA_SUCCESS && gran;
    if (vmm) {
        b.reserved = (n * sizeof(float) + gran - 1) / gran * gran;
        b.mapped = (trainable * sizeof(float) + gran - 1) / gran * gran;
        vmm = g_drv.reserve(&va, b.reserved, gran, 0, 0) == CUDA_SUCCESS;
        if (vmm && b.mapped) {
            CUmemAccessDesc acc;
            memset(&acc, 0, sizeof acc);
            acc.location = prop.location;
            acc.flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE;
            if (g_drv.create(&b.handle, b.mapped, &prop, 0) != CUDA_SUCCESS) {
                g_drv.address_free(va, b.reserved);
                vmm = 0;
            } else if (g_drv.map(va, b.mapped, 0, b.handle, 0) != CUDA_SUCCESS ||
                       g_drv.set_access(va, b.mapped, &acc, 1) != CUDA_SUCCESS) {
                g_drv.unmap(va, b.mapped);
                g_drv.release(b.handle);
                g_drv.address_free(va, b.reserved);
                vmm = 0;
            }
        }
    }
    if (vmm) {
        if (b.mapped) CU_CHECK(cudaMemsetAsync((void *)va, 0, b.mapped, g_cu.stream));
        b.vmm = 1;
        b.lo = (uintptr_t)va;
        b.bytes = b.mapped + frozen_n * sizeof(bf16);
    } else {
        b.lo = (uintptr_t)device_alloc(n * sizeof(float), "the parameters");
        b.bytes = n * sizeof(float) + frozen_n * sizeof(bf16);
    }
    b.hi = b.lo + n * sizeof(float);
    b.frozen_lo = b.lo + trainable * sizeof(float);
    if (g_n_frozen == MAX_FROZEN) tn_die("cuda: more than %d parameter slabs with frozen weights", MAX_FROZEN);
    g_frozen[g_n_frozen].lo = b.frozen_lo, g_frozen[g_n_frozen].hi = b.hi, g_frozen_store[g_n_frozen] = b.frozen;
    g_n_frozen++;
    remember(&b);
    params_slab((float *)b.lo, trainable);
    return (float *)b.lo;
}

static void cuda_free(void *p) {
    if (!p) return;
    pthread_mutex_lock(&g_mu);
    int k = 0;
    while (k < g_n_blocks && g_blocks[k].lo != (uintptr_t)p) k++;
    if (k == g_n_blocks) {
        pthread_mutex_unlock(&g_mu);
        tn_die("cuda: free of %p, which this backend did not allocate", p);
    }
    cu_block b = g_blocks[k];
    g_blocks[k] = g_blocks[--g_n_blocks];
    if (b.lo == g_params_lo) { /* the parameters go: their copies with them */
        pthread_mutex_unlock(&g_mu);
        drop_weight_copies();
        g_params_lo = g_params_hi = 0;
        pthread_mutex_lock(&g_mu);
    }
    account(-(ptrdiff_t)b.bytes);
    pthread_mutex_unlock(&g_mu);
    /* nothing queued may still use it: the kernels' stream, and NCCL's (a collective on the parameters or gradients
     * may still run there at teardown), and any other stream of this device */
    CU_CHECK(cudaDeviceSynchronize());
    if (b.frozen) {
        for (int i = 0; i < g_n_frozen; i++)
            if (g_frozen_store[i] == b.frozen) {
                --g_n_frozen;
                g_frozen[i] = g_frozen[g_n_frozen], g_frozen_store[i] = g_frozen_store[g_n_frozen];
            }
        CU_CHECK(cudaFree(b.frozen));
    }
    if (b.vmm) {
        if (b.mapped) {
            g_drv.unmap((CUdeviceptr)b.lo, b.mapped);
            g_drv.release(b.handle);
        }
        g_drv.address_free((CUdeviceptr)b.lo, b.reserved);
    } else {
        CU_CHECK(cudaFree(p));
    }
}

const bf16 *cu_weight_bf16(const float *X, int rows, int cols, int ld) {
    uintptr_t a = (uintptr_t)X, end = a + ((size_t)(rows - 1) * ld + cols) * sizeof(float);
    if (!g_cu.bf16 || rows <= 0 || cols <= 0 || a < g_params_lo || end > g_params_hi) return NULL;
    int i = 0;
    while (i < g_n_weights && !(g_weights[i].p == X && g_weights[i].rows == rows && g_weights[i].cols == cols &&
                                g_weights[i].ld == ld))
        i++;
    if (i == g_n_weights) {
        if (g_n_weights == MAX_WEIGHTS) return NULL; /* more distinct operands than weights: round per product */
        size_t bytes = (size_t)rows * cols * sizeof(bf16);
        g_weights[i].copy = (bf16 *)device_alloc(bytes, "the bf16 copies of the weights");
        pthread_mutex_lock(&g_mu);
        account((ptrdiff_t)bytes);
        pthread_mutex_unlock(&g_mu);
        g_weights[i].p = X, g_weights[i].rows = rows, g_weights[i].cols = cols, g_weights[i].ld = ld;
        g_weights[i].version = 0;
        g_n_weights++;
    }
    if (g_weights[i].version != g_params_version) { /* stream order: earlier products have read the old copy */
        cu_f32_to_bf16(g_weights[i].copy, cols, X, ld, rows, cols);
        g_weights[i].version = g_params_version;
    }
    return g_weights[i].copy;
}

/* ------------------------------------------------------------------ kernel attributes */

#define MAX_SMEM_KERNELS 64
static struct {
    const void *kernel;
    size_t bytes; /* the limit set so far */
} g_smem[MAX_SMEM_KERNELS];
static int g_n_smem;

void cu_allow_smem(const void *kernel, size_t bytes) {
    if (bytes <= 48 * 1024) return;
    int i = 0;
    while (i < g_n_smem && g_smem[i].kernel != kernel) i++;
    if (i < g_n_smem && g_smem[i].bytes >= bytes) return;
    CU_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)bytes));
    if (i == g_n_smem && g_n_smem == MAX_SMEM_KERNELS) return; /* not remembered: set again next time */
    if (i == g_n_smem) g_n_smem++;
    g_smem[i].kernel = kernel, g_smem[i].bytes = bytes;
}

/* ------------------------------------------------------------------ scratch */

static struct {
    void *p;
    size_t bytes;
} g_scratch[SCR_COUNT];

void *cu_scratch(int slot, size_t bytes) {
    if (g_scratch[slot].bytes >= bytes) return g_scratch[slot].p;
    size_t grow = bytes + bytes / 4;
    if (g_scratch[slot].p) {
        CU_CHECK(cudaStreamSynchronize(g_cu.stream)); /* queued kernels may still read the old buffer */
        CU_CHECK(cudaFree(g_scratch[slot].p));
        pthread_mutex_lock(&g_mu);
        account(-(ptrdiff_t)g_scratch[slot].bytes);
        pthread_mutex_unlock(&g_mu);
    }
    g_scratch[slot].p = device_alloc(grow, "scratch");
    g_scratch[slot].bytes = grow;
    pthread_mutex_lock(&g_mu);
    account((ptrdiff_t)grow);
    pthread_mutex_unlock(&g_mu);
    return g_scratch[slot].p;
}

static void *g_host_scratch;
void *cu_host_scratch(void) { return g_host_scratch; }

/* ------------------------------------------------------------------ conversions */

__global__ void k_f32_to_bf16(bf16 *dst, int ldd, const float *src, int lds, int rows, int cols) {
    size_t n = (size_t)rows * cols;
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x) {
        size_t r = i / (size_t)cols, c = i % (size_t)cols;
        dst[r * ldd + c] = __float2bfloat16_rn(src[r * lds + c]);
    }
}

__global__ void k_bf16_to_f32(float *dst, int ldd, const bf16 *src, int lds, int rows, int cols) {
    size_t n = (size_t)rows * cols;
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x) {
        size_t r = i / (size_t)cols, c = i % (size_t)cols;
        dst[r * ldd + c] = __bfloat162float(src[r * lds + c]);
    }
}

/* Contiguous conversions get their own kernels: 16-byte loads, no division per element. */
__global__ void k_f32_to_bf16_flat(bf16 *dst, const float *src, size_t n) {
    size_t i = (blockIdx.x * (size_t)blockDim.x + threadIdx.x) * 4;
    if (i + 4 <= n && ((uintptr_t)(src + i) & 15) == 0 && ((uintptr_t)(dst + i) & 7) == 0) {
        float4 v = *(const float4 *)(src + i);
        __nv_bfloat162 a = __floats2bfloat162_rn(v.x, v.y), b = __floats2bfloat162_rn(v.z, v.w);
        *(__nv_bfloat162 *)(dst + i) = a;
        *(__nv_bfloat162 *)(dst + i + 2) = b;
    } else {
        for (size_t j = i; j < i + 4 && j < n; j++) dst[j] = __float2bfloat16_rn(src[j]);
    }
}

void cu_f32_to_bf16(bf16 *dst, int ldd, const float *src, int lds, int rows, int cols) {
    if (rows <= 0 || cols <= 0) return;
    size_t n = (size_t)rows * cols;
    if (ldd == cols && lds == cols) {
        k_f32_to_bf16_flat<<<cu_blocks((n + 3) / 4, 256), 256, 0, g_cu.stream>>>(dst, src, n);
    } else {
        unsigned b = cu_blocks(n, 256);
        k_f32_to_bf16<<<b < 65536 ? b : 65536, 256, 0, g_cu.stream>>>(dst, ldd, src, lds, rows, cols);
    }
    cu_launched("f32_to_bf16");
}

void cu_bf16_to_f32(float *dst, int ldd, const bf16 *src, int lds, int rows, int cols) {
    if (rows <= 0 || cols <= 0) return;
    unsigned b = cu_blocks((size_t)rows * cols, 256);
    k_bf16_to_f32<<<b < 65536 ? b : 65536, 256, 0, g_cu.stream>>>(dst, ldd, src, lds, rows, cols);
    cu_launched("bf16_to_f32");
}

const float *cu_weight_f32(const float *p, size_t n) {
    const bf16 *f = cu_frozen(p);
    if (!f) return p;
    /* stream order makes one buffer enough: the kernel that reads this copy runs before the next conversion */
    float *dst = (float *)cu_scratch(SCR_WEIGHT, n * sizeof(float));
    cu_bf16_to_f32(dst, (int)n, f, (int)n, 1, (int)n);
    return dst;
}

/* ------------------------------------------------------------------ transfers */

#define STAGE_FLOATS ((size_t)1 << 22) /* 16 MB staging chunks for frozen (bf16) transfers */

/* The first piece of [p, p + n) (frozen_ranges.h): its length; *f the bf16 store of a frozen piece, else NULL. */
static size_t piece(const float *p, size_t n, const bf16 **f) {
    int which;
    size_t k = tn_frozen_piece(g_frozen, g_n_frozen, (uintptr_t)p, n, &which);
    *f = which < 0 ? NULL : g_frozen_store[which] + ((uintptr_t)p - g_frozen[which].lo) / sizeof(float);
    return k;
}

static void cuda_upload(float *dst, const float *host, size_t n) {
    cu_params_written(dst, n * sizeof(float));
    while (n) {
        const bf16 *f;
        size_t k = piece(dst, n, &f);
        if (!f) {
            CU_CHECK(cudaMemcpyAsync(dst, host, k * sizeof(float), cudaMemcpyHostToDevice, g_cu.stream));
        } else {
            float *stage = (float *)cu_scratch(SCR_PARTIAL, STAGE_FLOATS * sizeof(float));
            for (size_t off = 0; off < k; off += STAGE_FLOATS) {
                size_t c = k - off < STAGE_FLOATS ? k - off : STAGE_FLOATS;
                CU_CHECK(cudaMemcpyAsync(stage, host + off, c * sizeof(float), cudaMemcpyHostToDevice, g_cu.stream));
                cu_f32_to_bf16((bf16 *)f + off, (int)c, stage, (int)c, 1, (int)c);
            }
        }
        CU_CHECK(cudaStreamSynchronize(g_cu.stream)); /* the caller may reuse host at once */
        dst += k, host += k, n -= k;
    }
}

static void cuda_download(float *host, const float *src, size_t n) {
    while (n) {
        const bf16 *f;
        size_t k = piece(src, n, &f);
        if (!f) {
            CU_CHECK(cudaMemcpyAsync(host, src, k * sizeof(float), cudaMemcpyDeviceToHost, g_cu.stream));
            CU_CHECK(cudaStreamSynchronize(g_cu.stream));
        } else {
            float *stage = (float *)cu_scratch(SCR_PARTIAL, STAGE_FLOATS * sizeof(float));
            for (size_t off = 0; off < k; off += STAGE_FLOATS) {
                size_t c = k - off < STAGE_FLOATS ? k - off : STAGE_FLOATS;
                cu_bf16_to_f32(stage, (int)c, f + off, (int)c, 1, (int)c);
                CU_CHECK(cudaMemcpyAsync(host + off, stage, c * sizeof(float), cudaMemcpyDeviceToHost, g_cu.stream));
                CU_CHECK(cudaStreamSynchronize(g_cu.stream));
            }
        }
        src += k, host += k, n -= k;
    }
}

/* upload_i32 without waiting for the device: the ids and targets of each lm_head chunk and micro-batch go through
 * pinned staging slots, each reused only once the copy that read it has finished (its event), so the host goes on
 * queueing kernels instead of draining the stream every chunk. Larger arrays wait as before. */
#define I32_SLOTS 8
#define I32_SLOT_BYTES ((size_t)4 << 20)
static struct {
    void *host;
    cudaEvent_t done;
    int used;
} g_i32[I32_SLOTS];
static int g_i32_next;

static void cuda_upload_i32(int32_t *dst, const int32_t *host, size_t n) {
    if (!n) return;
    size_t bytes = n * sizeof *dst;
    if (bytes > I32_SLOT_BYTES) {
        CU_CHECK(cudaMemcpyAsync(dst, host, bytes, cudaMemcpyHostToDevice, g_cu.stream));
        CU_CHECK(cudaStreamSynchronize(g_cu.stream)); /* the caller may reuse host at once */
        return;
    }
    int k = g_i32_next;
    g_i32_next = (k + 1) % I32_SLOTS;
    if (!g_i32[k].host) {
        CU_CHECK(cudaMallocHost(&g_i32[k].host, I32_SLOT_BYTES));
        CU_CHECK(cudaEventCreateWithFlags(&g_i32[k].done, cudaEventDisableTiming));
    } else if (g_i32[k].used) {
        CU_CHECK(cudaEventSynchronize(g_i32[k].done)); /* its copy of 8 uploads ago: long finished */
    }
    memcpy(g_i32[k].host, host, bytes);
    CU_CHECK(cudaMemcpyAsync(dst, g_i32[k].host, bytes, cudaMemcpyHostToDevice, g_cu.stream));
    CU_CHECK(cudaEventRecord(g_i32[k].done, g_cu.stream));
    g_i32[k].used = 1;
}

/* Writers of whole ranges: a frozen range may only be zeroed (a fresh model) or uploaded. */
static void cuda_zero(float *p, size_t n) {
    cu_params_written(p, n * sizeof(float));
    while (n) {
        const bf16 *f;
        size_t k = piece(p, n, &f);
        if (f) CU_CHECK(cudaMemsetAsync((void *)f, 0, k * sizeof(bf16), g_cu.stream));
        else CU_CHECK(cudaMemsetAsync(p, 0, k * sizeof(float), g_cu.stream));
        p += k, n -= k;
    }
}

static void no_frozen(const float *p, size_t n, const char *what) {
    if (tn_frozen_touches(g_frozen, g_n_frozen, (uintptr_t)p, n))
        tn_die("cuda: %s writes frozen (bf16-only) weights, which only upload may change", what);
}

/* GPU memory is not handed back page by page (a sharded slab keeps its full size here): release zeroes. */
static void cuda_release(float *p, size_t n) { cuda_zero(p, n); }

static size_t cuda_resident(const float *p, size_t n) {
    size_t bytes = 0;
    while (n) {
        const bf16 *f;
        size_t k = piece(p, n, &f);
        bytes += k * (f ? sizeof(bf16) : sizeof(float));
        p += k, n -= k;
    }
    return bytes;
}

/* Piece by piece: a source that starts trainable and runs into the frozen tail reads the bf16 store there. */
static void cuda_copy(float *dst, const float *src, size_t n) {
    if (!n || dst == src) return;
    no_frozen(dst, n, "copy");
    cu_params_written(dst, n * sizeof(float));
    while (n) {
        const bf16 *f;
        size_t k = piece(src, n, &f);
        if (f) cu_bf16_to_f32(dst, (int)k, f, (int)k, 1, (int)k);
        else CU_CHECK(cudaMemcpyAsync(dst, src, k * sizeof(float), cudaMemcpyDeviceToDevice, g_cu.stream));
        dst += k, src += k, n -= k;
    }
}

static void cuda_copy_rows(float *dst, int ldd, const float *src, int lds, int rows, int cols) {
    if (rows <= 0 || cols <= 0) return;
    no_frozen(dst, (size_t)(rows - 1) * ldd + cols, "copy_rows");
    cu_params_written(dst, ((size_t)(rows - 1) * ldd + cols) * sizeof(float));
    if (tn_frozen_touches(g_frozen, g_n_frozen, (uintptr_t)src, (size_t)(rows - 1) * lds + cols))
        tn_die("cuda: copy_rows reads frozen (bf16-only) weights, which only copy and download widen");
    cu_copy_rows(dst, ldd, src, lds, rows, cols);
}

static void cuda_scale(float *x, size_t n, float s) {
    no_frozen(x, n, "scale");
    cu_params_written(x, n * sizeof(float));
    cu_scale(x, n, s);
}

static void cuda_adamw(float *p, const float *g, float *m, float *v, size_t n, double lr, double beta1, double beta2,
                       double eps, double weight_decay, double bias_corr1, double bias_corr2) {
    no_frozen(p, n, "adamw");
    cu_params_written(p, n * sizeof(float)); /* the step: every kept bf16 copy is rounded again at its next use */
    cu_adamw(p, g, m, v, n, lr, beta1, beta2, eps, weight_decay, bias_corr1, bias_corr2);
}

static void cuda_add(float *y, const float *x, size_t n) {
    cu_params_written(y, n * sizeof(float));
    cu_add(y, x, n);
}

static void cuda_matmul(int ta, int tb, int M, int N, int K, float alpha, const float *A, int lda, const float *B,
                        int ldb, float beta, float *C, int ldc) {
    if (M > 0 && N > 0) no_frozen(C, (size_t)(M - 1) * ldc + N, "a matrix product (LoRA merges run on the CPU)");
    if (M > 0 && N > 0) cu_params_written(C, ((size_t)(M - 1) * ldc + N) * sizeof(float));
    cu_matmul(ta, tb, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc);
}

/* ------------------------------------------------------------------ the rest of the table */

static int cuda_num_threads(void) { return g_cu.sms; }

static const char *cuda_kernel_name(void) {
    static char name[64];
    if (!name[0]) {
        size_t v = cublasLtGetVersion();
        snprintf(name, sizeof name, "cuBLASLt %zu.%zu.%zu", v / 10000, v / 100 % 100, v % 100);
    }
    return name;
}

static const char *cuda_describe(void) { return g_cu.describe; }

static size_t cuda_peak_bytes(void) {
    pthread_mutex_lock(&g_mu);
    size_t p = g_peak;
    pthread_mutex_unlock(&g_mu);
    return p;
}

static void cuda_sync(void) { CU_CHECK(cudaStreamSynchronize(g_cu.stream)); }

static tn_backend g_backend;

static void fill_table(tn_backend *b) {
    b->name = "cuda";
    b->num_threads = cuda_num_threads;
    b->kernel_name = cuda_kernel_name;
    b->alloc = cuda_alloc;
    b->alloc_i32 = cuda_alloc_i32;
    b->free = cuda_free;
    b->upload = cuda_upload;
    b->download = cuda_download;
    b->upload_i32 = cuda_upload_i32;
    b->zero = cuda_zero;
    b->release = cuda_release;
    b->resident = cuda_resident;
    b->copy = cuda_copy;
    b->copy_rows = cuda_copy_rows;
    b->matmul = cuda_matmul;
    b->add_bias = cu_add_bias;
    b->bias_backward = cu_bias_backward;
    b->embedding_forward = cu_embedding_forward;
    b->embedding_backward = cu_embedding_backward;
    b->rmsnorm_forward = cu_rmsnorm_forward;
    b->rmsnorm_backward = cu_rmsnorm_backward;
    b->head_rmsnorm_forward = cu_head_rmsnorm_forward;
    b->head_rmsnorm_backward = cu_head_rmsnorm_backward;
    b->rope = cu_rope;
    b->attention_forward = cu_attention_forward;
    b->attention_backward = cu_attention_backward;
    b->swiglu_forward = cu_swiglu_forward;
    b->swiglu_backward = cu_swiglu_backward;
    b->cross_entropy = cu_cross_entropy;
    b->cross_entropy_add = cu_cross_entropy_add;
    b->cross_entropy_total = cu_cross_entropy_total;
    b->dropout = cu_dropout;
    b->sumsq = cu_sumsq;
    b->scale = cuda_scale;
    b->adamw = cuda_adamw;
    b->all_finite = cu_all_finite;
    b->alloc_params = cuda_alloc_params;
    b->add = cuda_add;
    /* 256M floats (1 GiB) of logits per chunk: lm_head products of >= 1700 rows for a 151936 vocabulary */
    b->logits_floats = (size_t)1 << 28;
    b->describe = cuda_describe;
    b->peak_bytes = cuda_peak_bytes;
    b->sync = cuda_sync;
    /* linear_rows, rope_at, attention_cached stay NULL: generation's kernels have not been checked on a GPU yet,
     * so generation refuses this backend in one line (model/kv_forward.c) and runs on the CPU backend */
}

/* ------------------------------------------------------------------ opening */

int tn_cuda_device_count(void) {
    int n = 0;
    if (cudaGetDeviceCount(&n) != cudaSuccess) {
        (void)cudaGetLastError();
        return 0;
    }
    return n;
}

int tn_cuda_pci_bus_id(int ordinal, char *buf, int len) {
    if (cudaDeviceGetPCIBusId(buf, len, ordinal) != cudaSuccess) {
        (void)cudaGetLastError();
        return -1;
    }
    return 0;
}

double tn_cuda_memory_bytes(int ordinal) {
    cudaDeviceProp p;
    if (cudaGetDeviceProperties(&p, ordinal) != cudaSuccess) {
        (void)cudaGetLastError();
        return 0;
    }
    return (double)p.totalGlobalMem;
}

const tn_backend *tn_backend_cuda(int device, int bf16) {
    if (g_cu.open) {
        if (device != g_cu.device || !!bf16 != g_cu.bf16) {
            tn_err("cuda: the backend is open on device %d (%s); one device and precision per process", g_cu.device,
                   g_cu.bf16 ? "bf16" : "fp32");
            return NULL;
        }
        return &g_backend;
    }
    int n = tn_cuda_device_count();
    if (device < 0 || device >= n) {
        tn_err("cuda: device %d is not among the %d visible GPU(s) (CUDA_VISIBLE_DEVICES='%s')", device, n,
               getenv("CUDA_VISIBLE_DEVICES") ? getenv("CUDA_VISIBLE_DEVICES") : "");
        return NULL;
    }
    cudaError_t e = cudaSetDevice(device);
    if (e == cudaSuccess) e = cudaGetDeviceProperties(&g_cu.prop, device);
    if (e == cudaSuccess && g_cu.prop.major < 8) {
        tn_err("cuda: device %d (%s) has compute capability %d.%d; tandem's CUDA backend needs 8.0 or newer (bf16 "
               "tensor cores)", device, g_cu.prop.name, g_cu.prop.major, g_cu.prop.minor);
        return NULL;
    }
    if (e == cudaSuccess) e = cudaStreamCreateWithFlags(&g_cu.stream, cudaStreamNonBlocking);
    if (e == cudaSuccess) e = cudaMallocHost(&g_host_scratch, 16384);
    if (e != cudaSuccess) {
        (void)cudaGetLastError();
        tn_err("cuda: cannot open device %d: %s", device, cudaGetErrorString(e));
        return NULL;
    }
    g_cu.device = device;
    g_cu.bf16 = !!bf16;
    g_cu.sms = g_cu.prop.multiProcessorCount;
    const char *s = getenv("TANDEM_CUDA_SYNC");
    g_cu.sync_each = s && strcmp(s, "1") == 0;
    load_driver_entry_points();
    snprintf(g_cu.describe, sizeof g_cu.describe,
             "cuda:%d (%.80s, sm_%d%d, %d SMs, %.1f GiB), %s", device, g_cu.prop.name, g_cu.prop.major,
             g_cu.prop.minor, g_cu.sms, g_cu.prop.totalGlobalMem / 1073741824.0,
             bf16 ? "bf16 matrix products with fp32 accumulation, fp32 master weights and AdamW state"
                  : "fp32 throughout");
    fill_table(&g_backend);
    g_cu.open = 1;
    return &g_backend;
}

/* ------------------------------------------------------------------ comm hooks */

int tn_cuda_owns(const void *p) {
    uintptr_t a = (uintptr_t)p;
    pthread_mutex_lock(&g_mu);
    int found = 0;
    for (int i = 0; i < g_n_blocks && !found; i++) found = a >= g_blocks[i].lo && a < g_blocks[i].hi;
    pthread_mutex_unlock(&g_mu);
    return found;
}

void tn_cuda_to_host(void *host, const void *dev, size_t bytes) {
    CU_CHECK(cudaSetDevice(g_cu.device));
    size_t n = (bytes + sizeof(float) - 1) / sizeof(float);
    if (tn_frozen_touches(g_frozen, g_n_frozen, (uintptr_t)dev, n)) { /* any float of it, not only the first */
        if (bytes % sizeof(float))
            tn_die("cuda: a collective reads %zu bytes of frozen weights (not whole floats)", bytes);
        cuda_download((float *)host, (const float *)dev, n);
        return;
    }
    CU_CHECK(cudaMemcpyAsync(host, dev, bytes, cudaMemcpyDeviceToHost, g_cu.stream));
    CU_CHECK(cudaStreamSynchronize(g_cu.stream));
}

/* The staged all-reduce's copy out, overlapping the kernels queued after it: on a stream of its own that first waits
 * for everything queued on the kernels' stream so far (an event), into pinned memory (a copy into pageable memory
 * would block the host); the token is the event recorded after the copy. Frozen weights take the blocking path. */
static cudaStream_t g_copy_stream;

void *tn_cuda_to_host_async(void *host, const void *dev, size_t bytes) {
    CU_CHECK(cudaSetDevice(g_cu.device));
    if (tn_frozen_touches(g_frozen, g_n_frozen, (uintptr_t)dev, (bytes + sizeof(float) - 1) / sizeof(float))) {
        tn_cuda_to_host(host, dev, bytes);
        return NULL;
    }
    if (!g_copy_stream) CU_CHECK(cudaStreamCreateWithFlags(&g_copy_stream, cudaStreamNonBlocking));
    cudaEvent_t ready, landed;
    CU_CHECK(cudaEventCreateWithFlags(&ready, cudaEventDisableTiming));
    CU_CHECK(cudaEventCreateWithFlags(&landed, cudaEventDisableTiming));
    CU_CHECK(cudaEventRecord(ready, g_cu.stream));
    CU_CHECK(cudaStreamWaitEvent(g_copy_stream, ready, 0));
    CU_CHECK(cudaMemcpyAsync(host, dev, bytes, cudaMemcpyDeviceToHost, g_copy_stream));
    CU_CHECK(cudaEventRecord(landed, g_copy_stream));
    CU_CHECK(cudaEventDestroy(ready)); /* released once the copy stream has passed it */
    return (void *)landed;
}

int tn_cuda_copied(void *token, int wait) {
    cudaEvent_t landed = (cudaEvent_t)token;
    CU_CHECK(cudaSetDevice(g_cu.device));
    if (wait) {
        CU_CHECK(cudaEventSynchronize(landed));
    } else {
        cudaError_t e = cudaEventQuery(landed);
        if (e == cudaErrorNotReady) return 0;
        CU_CHECK(e);
    }
    CU_CHECK(cudaEventDestroy(landed));
    return 1;
}

void *tn_cuda_host_alloc(size_t bytes) {
    void *p = NULL;
    CU_CHECK(cudaSetDevice(g_cu.device));
    if (cudaMallocHost(&p, bytes) != cudaSuccess) {
        (void)cudaGetLastError();
        return NULL;
    }
    return p;
}

void tn_cuda_host_free(void *p) { CU_CHECK(cudaFreeHost(p)); }

void tn_cuda_to_device(void *dev, const void *host, size_t bytes) {
    CU_CHECK(cudaSetDevice(g_cu.device));
    no_frozen((const float *)dev, bytes / sizeof(float), "a collective");
    cu_params_written(dev, bytes);
    CU_CHECK(cudaMemcpyAsync(dev, host, bytes, cudaMemcpyHostToDevice, g_cu.stream));
    CU_CHECK(cudaStreamSynchronize(g_cu.stream));
}

void *tn_cuda_stream(void) { return (void *)g_cu.stream; }
void tn_cuda_device_written(void) { g_params_version++; }
int tn_cuda_device(void) { return g_cu.device; }
