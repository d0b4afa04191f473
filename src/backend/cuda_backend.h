/* cuda_backend -- the CUDA implementation of backend.h (built when CMake finds nvcc: TANDEM_HAVE_CUDA).
 *
 * Precision. The interface stays float*: every tensor the model and trainer hold (weights, gradients,
 * activations, AdamW state) is fp32 in device memory, so their code and the checkpoint formats do not change.
 * In bf16 mode what runs in bf16 is the arithmetic that dominates: each matrix product rounds its two operands
 * to bf16 (weights and activations alike, as PyTorch's autocast does) and multiplies them on the tensor cores
 * with fp32 accumulation into an fp32 result (cuBLASLt); attention reads q, k, v and the probabilities as bf16
 * for its two products, likewise accumulating in fp32. Norms, softmax, the loss, RoPE, SwiGLU and AdamW stay in
 * fp32. The one exception to "fp32 behind every pointer" is the frozen base of a LoRA run: the parameter slab's
 * frozen part (backend.h alloc_params) is held in bf16 alone (half the bytes; the fp32 addresses are reserved
 * but not backed), which every kernel that reads weights resolves. fp32 mode keeps everything fp32 (products in
 * true fp32, no TF32): the parity mode.
 *
 * Devices. One GPU per process: the device ordinal is chosen by the caller (backend_select.c: the local rank
 * modulo the visible devices, so CUDA_VISIBLE_DEVICES is honoured). All work runs on one stream, in order;
 * functions that return host values (download, cross_entropy, sumsq, all_finite) wait for it. Every kernel
 * is deterministic (no floating-point atomics): the same inputs give the same bits on every run. */
#ifndef TN_CUDA_BACKEND_H
#define TN_CUDA_BACKEND_H

#include <stddef.h>

#include "backend/backend.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Visible CUDA devices; 0 when there is no driver or no GPU (never fails, never prints). */
int tn_cuda_device_count(void);
/* The PCI bus id ("0000:19:00.0") of CUDA device `ordinal` as this process sees it (CUDA_VISIBLE_DEVICES applied);
 * opens nothing. 0, or -1 when there is no such device. */
int tn_cuda_pci_bus_id(int ordinal, char *buf, int len);
/* Total memory of device `ordinal` in bytes; 0 when it cannot be read. */
double tn_cuda_memory_bytes(int ordinal);
/* Device memory was written outside the backend's calls (an NCCL collective): kept bf16 weight copies are stale. */
void tn_cuda_device_written(void);
/* Opens the backend on `device` (once per process: a second call must name the same device and precision).
 * NULL + tn_err when the device cannot be used. */
const tn_backend *tn_backend_cuda(int device, int bf16);
/* For the comm layer (comm.h tn_comm_device), valid after tn_backend_cuda: */
int tn_cuda_owns(const void *p);                                  /* p lies in memory this backend allocated */
void tn_cuda_to_host(void *host, const void *dev, size_t bytes);  /* after every queued kernel */
void tn_cuda_to_device(void *dev, const void *host, size_t bytes);
/* comm.h tn_comm_device's asynchronous copy out (the staged all-reduce overlapping backward): a copy stream, events */
void *tn_cuda_to_host_async(void *host, const void *dev, size_t bytes);
int tn_cuda_copied(void *token, int wait);
void *tn_cuda_host_alloc(size_t bytes);
void tn_cuda_host_free(void *p);
void *tn_cuda_stream(void);                                       /* the cudaStream_t the kernels run on */
int tn_cuda_device(void);                                         /* the ordinal in use */

#ifdef __cplusplus
}
#endif

#endif
