/* vision_internal -- what vision.c and vision_merge.c share: the activation layout of one vision pass and the
 * helpers each side calls. Not part of the model's interface (that is vision.h). */
#ifndef TN_VISION_INTERNAL_H
#define TN_VISION_INTERNAL_H

#include "model/vision.h"

#define TN_VATT_BLOCK 64 /* query rows of one attention block (vision.c) */

typedef struct {
    float *xn1, *mu1, *rs1; /* [N, E], [N], [N]  norm1 output, mean (LayerNorm), 1/std */
    float *qkv;             /* [N, 3E]           after bias and rotary */
    float *att;             /* [N, E]            attention output */
    float *h;               /* [N, E]            residual after attention */
    float *xn2, *mu2, *rs2; /* norm2 */
    float *pre;             /* [N, I | 2I]       MLP pre-activation (Qwen2.5-VL: gate | up) */
    float *act;             /* [N, I] */
    float *xout;            /* [N, E]            block output */
} vblock_acts;

typedef struct {
    float *xn, *mu, *rs;    /* norm output [N, E] = [M, 4E] (deepstack: [M, 4E]), stats per normed row */
    float *pre, *act;       /* [M, 4E] */
    float *out;             /* [M, D] */
    float *t1, *t2;         /* [M, 4E] scratch shared with the blocks */
} merger_acts;

struct tn_vision_acts {
    int N, M, E, D, depth, n_deep, has_pos, act_kind;
    int checkpointing;       /* one set of block activations (xout stays per block): backward recomputes */
    size_t cap;              /* floats in slab */
    float *slab;
    float *pe, *pos_e, *x0;  /* [N, E] patch embeddings, Qwen3-VL position embeddings, block-0 input */
    float *cos, *sin;        /* [N, hv/2] vision rotary tables, in block row order (window order for Qwen2.5-VL) */
    vblock_acts *blk;        /* [depth] */
    merger_acts merger, *deep; /* [n_deep] */
    float **deep_out;        /* [n_deep] */
    float *img, *dimg;       /* [M, D] merged features in image order, and their gradient (block order) */
    float *dx, *t1, *t2;     /* [N, E], [N, max(3E, 2I)] x2 */
    float *P, *dP;           /* per OpenMP thread a slice of pslice floats: [TN_VATT_BLOCK, segment] probabilities */
    size_t pslice;
    int threads;             /* the attention's parallel tasks run on this many threads (slices allocated) */
    int *cu, ncu, *cuw, ncuw; /* segment bounds: frames; Qwen2.5-VL windows */
    int *perm;               /* [M] Qwen2.5-VL: window-order merged token j is image-order token perm[j] */
    int32_t *pidx;           /* [N, 4] Qwen3-VL: position-grid rows of each patch */
    float *pwt;              /* [N, 4] and their bilinear weights */
    const tn_mm_batch *mm;   /* borrowed for the pass */
    double fwd_s, bwd_s;     /* seconds spent in forward / backward since creation (bench vl's share) */
};

/* vision.c */
void tn_vnorm_forward(int rms, float *y, float *mu, float *rs, const float *x, const float *w, const float *b, int rows,
                      int cols);
void tn_vnorm_backward(int rms, float *dx, float *dw, float *db, const float *dy, const float *x, const float *w,
                       const float *mu, const float *rs, int rows, int cols);
int tn_vact_kind(const char *name);
void tn_vact_forward(int kind, float *y, const float *x, size_t n);
void tn_vact_backward(int kind, float *dx, const float *dy, const float *x, size_t n);
void tn_vlinear(const struct tn_model *m, float *y, const float *x, const float *W, const float *b, int rows, int in,
                int out, float beta);
void tn_vlinear_backward(const struct tn_model *m, float *dx, float *dW, float *db, const float *dy, const float *x,
                         const float *W, int rows, int in, int out, float beta);

/* Attention inside segments [cu[i], cu[i+1]) of qkv [N, 3E] (rotary applied), per head: att [N, E] =
 * softmax(q k^T / sqrt(hv)) v; backward writes dqkv [N, 3E] from datt. va: prepared for the pass (P slices). */
void tn_vision_attention_forward(const struct tn_model *m, tn_vision_acts *va, float *att, const float *qkv,
                                 const int *cu, int ncu);
void tn_vision_attention_backward(const struct tn_model *m, tn_vision_acts *va, float *dqkv, const float *datt,
                                  const float *qkv, const int *cu, int ncu);

/* vision_merge.c */
int tn_vision_block_full(const tn_vision_config *v, int b); /* attends within whole frames (else windows) */
void tn_vision_prepare(struct tn_model *m, tn_vision_acts *va, const tn_mm_batch *mm);
void tn_vision_pos_embed(const struct tn_model *m, const tn_vision_acts *va, float *out);
void tn_vision_pos_embed_backward(struct tn_model *m, const tn_vision_acts *va, const float *dx);
void tn_vision_to_windows(const struct tn_model *m, tn_vision_acts *va, float *x);
void tn_vision_from_windows(const struct tn_model *m, tn_vision_acts *va, float *x);
void tn_vision_from_windows_merged(const struct tn_model *m, const tn_vision_acts *va, float *dst, const float *src);
void tn_vision_to_windows_merged(const struct tn_model *m, const tn_vision_acts *va, float *dst, const float *src);
void tn_merger_forward(const struct tn_model *m, const tn_merger_tensors *w, merger_acts *s, const float *x, int M,
                       int postshuffle);
void tn_merger_backward(const struct tn_model *m, const tn_merger_tensors *w, const tn_merger_tensors *dw,
                        merger_acts *s, float *dx, const float *dout, const float *x, int M, int postshuffle);

#endif
