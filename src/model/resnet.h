/* resnet -- torchvision's ResNet with BasicBlocks (ResNet-18: layers [2,2,2,2], ResNet-34: [3,4,6,3]) for image
 * classification, config.json `model_type: resnet`.
 *
 * Owns: the config (resnet_config.c), the parameter layout under torchvision's state_dict names, loading and
 * saving safetensors (resnet.c), and the layer-by-layer forward and backward passes (resnet_forward.c). Topology as
 * torchvision.models.resnet: 7x7/2 pad 3 stem conv (no bias), BN, ReLU, 3x3/2 pad 1 max-pool, four stages of
 * BasicBlocks (3x3 convs; the first block of stages 2-4 strides 2 and has a 1x1/2 conv + BN downsample), global
 * average pool, fc. Stage widths base_width x (1, 2, 4, 8) (64: torchvision's exactly).
 * Slabs: params (every weight, trainable, torchvision's order), grad (same offsets), buffers (BN running_mean and
 * running_var). Everything numeric goes through the backend's image kernels (backend/image_kernels.h). */
#ifndef TN_RESNET_H
#define TN_RESNET_H

#include <stddef.h>
#include <stdint.h>

#include "backend/backend.h"

typedef struct {
    int layers[4];          /* BasicBlocks per stage */
    int base_width;         /* channels of stage 1 (torchvision: 64) */
    int num_classes;
    int in_channels;
    int image_size;         /* square input side the data is made to (informational for the model) */
    double bn_eps;          /* default 1e-5 (torch) */
    double bn_momentum;     /* default 0.1 (torch's convention: run = (1 - m) run + m batch) */
} tn_resnet_config;

/* config.json with model_type "resnet" (block "basic"); absent optional keys take torchvision's values.
 * 0 ok, -1 with tn_err naming the file and key. */
int tn_resnet_config_load(const char *path, tn_resnet_config *c);
int tn_resnet_config_parse(const char *json_text, const char *path_for_errors, tn_resnet_config *c);
int tn_resnet_config_save(const char *path, const tn_resnet_config *c);
/* 1 when the config.json at path names model_type "resnet" (a quick look, for choosing the model family). */
int tn_is_resnet_config(const char *path);

typedef struct {
    char name[96];          /* torchvision state_dict name */
    int ndim;
    int64_t shape[4];
    size_t offset, numel;   /* into params (or buffers when buffer) */
    int buffer;             /* running_mean / running_var */
} tn_resnet_tensor;

typedef struct tn_resnet tn_resnet;

/* Layout and zeroed slabs; NULL with tn_err when the backend has no image kernels or the config is unusable. */
tn_resnet *tn_resnet_create(const tn_resnet_config *cfg, const tn_backend *be);
void tn_resnet_free(tn_resnet *m);
const tn_resnet_config *tn_resnet_cfg(const tn_resnet *m);
int tn_resnet_n_tensors(const tn_resnet *m);
const tn_resnet_tensor *tn_resnet_tensor_at(const tn_resnet *m, int i);
const tn_resnet_tensor *tn_resnet_find(const tn_resnet *m, const char *name);
size_t tn_resnet_n_params(const tn_resnet *m);   /* floats in params and grad */
float *tn_resnet_params(tn_resnet *m);           /* backend memory */
float *tn_resnet_grad(tn_resnet *m);
/* Host copies of one tensor, from whichever slab holds it. */
void tn_resnet_get(const tn_resnet *m, const tn_resnet_tensor *t, float *host);
void tn_resnet_set(tn_resnet *m, const tn_resnet_tensor *t, const float *host);

/* torchvision's initialisation: conv kaiming-normal (fan_out, ReLU gain), BN weight 1 bias 0, running 0/1, fc
 * torch.nn.Linear's uniform(+-1/sqrt(in)). Deterministic in seed. */
void tn_resnet_init_random(tn_resnet *m, uint64_t seed);
/* model.safetensors of a folder (or a file path): every parameter and running statistic by torchvision's name,
 * shapes as the config says (num_batches_tracked, when present, is read into the step count). */
int tn_resnet_load(tn_resnet *m, const char *dir);
/* dir/config.json + dir/model.safetensors (with num_batches_tracked, so torchvision's load_state_dict takes it
 * strictly), each atomic. */
int tn_resnet_save(const tn_resnet *m, const char *dir);

/* Synchronised batch statistics across data-parallel ranks in train mode (torch.nn.SyncBatchNorm); NULL: each
 * rank's own batch (DDP's default). sync is borrowed. */
void tn_resnet_set_sync_bn(tn_resnet *m, const void *sync /* const tn_bn_sync * (backend/image_kernels.h) */);

/* Backward calls ready(ctx, from) each time the gradients [from, n_params) are final: after fc, after each
 * BasicBlock (torchvision's order puts later layers at higher offsets), after the stem (from 0). Data parallelism
 * starts exchanging them while backward goes on (trainer/image_sync.h). NULL: no calls. */
void tn_resnet_set_grad_ready(tn_resnet *m, void (*ready)(void *ctx, size_t from), void *ctx);

/* ---- passes (resnet_forward.c). Images are host memory [N, C, H, W] (torch's layout), labels host [N]. */
/* Workspace for batches of up to B images of side H x W (allocated on first use or when a larger batch comes). */
int tn_resnet_reserve(tn_resnet *m, int B, int H, int W);
/* Train-mode forward (batch statistics; running estimates updated), label-smoothed cross-entropy and backward:
 * gradients ACCUMULATED into grad, scaled by grad_scale (1 / images of the global batch). Returns the summed loss;
 * logits_host (may be NULL) receives the logits [N, classes]. -1-free: shapes are checked by reserve. */
double tn_resnet_forward_backward(tn_resnet *m, const float *images, const int32_t *labels, int N, float grad_scale,
                                  float label_smoothing, float *logits_host);
/* Eval-mode forward (running statistics): logits [N, classes] into host memory. */
void tn_resnet_logits(tn_resnet *m, const float *images, int N, float *logits_host);

#endif
