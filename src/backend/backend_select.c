/* backend_select.c -- which backend a run computes on: the CPU, or (in a build with CUDA) one GPU per rank. */
#include "backend/backend.h"
#include "backend/backend_profile.h"

#include <stdio.h>
#include <string.h>

#include "comm/comm.h"
#include "core/core.h"
#ifdef TANDEM_HAVE_CUDA
#include "backend/cuda_backend.h"
#endif

int tn_backend_have_cuda(void) {
#ifdef TANDEM_HAVE_CUDA
    return 1;
#else
    return 0;
#endif
}

int tn_backend_gpu_count(void) {
#ifdef TANDEM_HAVE_CUDA
    return tn_cuda_device_count();
#else
    return 0;
#endif
}

int tn_backend_gpu_bus_id(int ordinal, char *buf, int len) {
#ifdef TANDEM_HAVE_CUDA
    return tn_cuda_pci_bus_id(ordinal, buf, len);
#else
    (void)ordinal, (void)buf, (void)len;
    return -1;
#endif
}

double tn_backend_gpu_memory(int ordinal) {
#ifdef TANDEM_HAVE_CUDA
    return tn_cuda_memory_bytes(ordinal);
#else
    (void)ordinal;
    return 0;
#endif
}

static const tn_backend *choose(const char *device, int bf16, int local_rank);

/* TANDEM_PROFILE=1: the chosen backend with every call timed (backend_profile.h) */
const tn_backend *tn_backend_select(const char *device, int bf16, int local_rank) {
    const tn_backend *be = choose(device, bf16, local_rank);
    return be && tn_backend_profile_wanted() ? tn_backend_profiled(be) : be;
}

static const tn_backend *choose(const char *device, int bf16, int local_rank) {
    int want_cuda = strcmp(device, "cuda") == 0, want_cpu = strcmp(device, "cpu") == 0;
    if (!want_cuda && !want_cpu && strcmp(device, "auto") != 0) {
        tn_err("device '%s' is not known (expected auto, cpu or cuda)", device);
        return NULL;
    }
    if (want_cpu) return tn_backend_cpu();
#ifdef TANDEM_HAVE_CUDA
    int n = tn_cuda_device_count();
    if (n == 0) {
        if (!want_cuda) return tn_backend_cpu();
        tn_err("device 'cuda': no GPU is visible (no NVIDIA driver, no device, or CUDA_VISIBLE_DEVICES is empty)");
        return NULL;
    }
    /* one GPU per rank: the ranks of a machine take the visible devices in turn */
    return tn_backend_cuda(local_rank % n, bf16);
#else
    (void)bf16, (void)local_rank;
    if (!want_cuda) return tn_backend_cpu();
    tn_err("device 'cuda': this tandem was built without CUDA (nvcc was not found when it was configured)");
    return NULL;
#endif
}

int tn_backend_attach_comm(const tn_backend *be, tn_comm *c, char *note, size_t note_size) {
#ifdef TANDEM_HAVE_CUDA
    if (strcmp(be->name, "cuda") == 0) {
        tn_comm_device d = {.name = "cuda", .owns = tn_cuda_owns, .to_host = tn_cuda_to_host,
                            .to_device = tn_cuda_to_device, .queue = tn_cuda_stream(), .device = tn_cuda_device(),
                            .written = tn_cuda_device_written, .to_host_async = tn_cuda_to_host_async,
                            .copied = tn_cuda_copied, .host_alloc = tn_cuda_host_alloc, .host_free = tn_cuda_host_free};
        if (tn_cuda_pci_bus_id(d.device, d.bus_id, (int)sizeof d.bus_id) != 0) d.bus_id[0] = 0; /* ordinal only */
        return tn_comm_attach_device(c, &d, note, note_size);
    }
#endif
    (void)be;
    return tn_comm_attach_device(c, NULL, note, note_size);
}

void tn_backend_precision(const char *device, int bf16, char *out, size_t n) {
    int cpu = strcmp(device, "cpu") == 0, gpus = cpu ? 0 : tn_backend_gpu_count();
    if (gpus > 0)
        snprintf(out, n, bf16 ? "the CUDA backend runs it: matrix products and attention in bf16 (fp32 accumulation, fp32 "
                                "master weights and AdamW state)"
                              : "the CUDA backend runs it in fp32 (bf16: true for bf16 matrix products)");
    else
        snprintf(out, n, "the CPU backend runs it, in fp32 (%s)%s",
                 cpu ? "device: cpu" : tn_backend_have_cuda() ? "no GPU is visible" : "this build has no CUDA backend",
                 bf16 ? "; bf16 applies on a GPU" : "");
}
