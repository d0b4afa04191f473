/* cpu_conv_dnnl -- the CPU backend's 2-D convolution (contract: image_kernels.h) on oneDNN, the library PyTorch's
 * CPU convolutions run on: forward, backward-data and backward-weights primitives, each in the blocked layouts
 * oneDNN picks for this CPU at run time (AVX-512, AVX2, SSE4.1 or its reference code: any x86-64), with reorders
 * from and to tandem's [C, N, H, W] activations and torch's [OC, C, KH, KW] weights around them. Why: handed the
 * plain layouts oneDNN falls back to reference loops; on its own layouts it is 2.8-5.5x faster per convolution than
 * im2col + GEMM (cpu_conv.c; docs/image_classification.md).
 *
 * Shapes where some kernel tap only ever reads padding (3x3 pad 1 on a 1x1 or 2x2/2 map: ResNet's last stage on
 * CIFAR input) run on im2col + GEMM instead, which leaves those taps out where oneDNN computes them (bench_conv: 2x
 * faster there).
 *
 * Primitives and reorders are made once per shape and kept (a small cache keyed by tn_conv_shape); the blocked
 * copies live in one arena that grows to the largest call's need (calls run one at a time on the backend).
 * Algorithm: direct only (no Winograd), fp32 throughout (oneDNN's default fpmath mode: no bf16/tf32 down-
 * conversion), so each output is an fp32 sum of the same products as the textbook definition, in oneDNN's order. */
#include "backend/cpu_kernels.h"
#include "backend/image_kernels.h"

#include <dnnl.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "core/core.h"

#define DN(call, s) dn_check((call), #call, (s))

static void dn_check(dnnl_status_t st, const char *what, const tn_conv_shape *s) {
    if (st == dnnl_success) return;
    tn_die("cpu_conv: oneDNN %s failed (status %d) for a %dx%d/%d pad %d convolution of [%d, %d, %d, %d] to %d "
           "channels", what, (int)st, s->KH, s->KW, s->stride, s->pad, s->C, s->N, s->H, s->W, s->OC);
}

/* One tensor a primitive reads or writes: the caller's memory (user, its pointer set per call) and the
 * primitive's layout (inner, placed in the arena at off) with the reorders between them. inner == user when the
 * layouts agree and nothing needs accumulating. */
typedef struct {
    dnnl_memory_t user, inner;
    dnnl_primitive_t to_inner, to_user, add_to_user; /* add_to_user: user += inner (a reorder with a sum post-op) */
    size_t off;
} port;

typedef struct {
    tn_conv_shape s;
    dnnl_primitive_t fwd, bwd_data, bwd_w;
    port f_src, f_w, f_dst;      /* forward */
    port d_dst, d_w, d_src;      /* backward data: d_dst shared with backward weights when the layouts agree */
    port w_src, w_dst, w_dw;     /* backward weights */
    int share_dst;
    size_t arena_bytes;
} conv_entry;

#define CACHE_MAX 64 /* shapes kept; a full cache drops its oldest entry */

static struct {
    pthread_mutex_t lock;
    dnnl_engine_t eng;
    dnnl_stream_t stream;
    conv_entry *e[CACHE_MAX];
    int n, next;
    char *arena;
    size_t arena_bytes;
} C = {.lock = PTHREAD_MUTEX_INITIALIZER};

static void md_act(dnnl_memory_desc_t *md, int N, int Ch, int H, int W, const tn_conv_shape *s) {
    dnnl_dims_t d = {N, Ch, H, W}, st = {(dnnl_dim_t)H * W, (dnnl_dim_t)N * H * W, W, 1}; /* [C, N, H, W] */
    DN(dnnl_memory_desc_init_by_strides(md, 4, d, dnnl_f32, st), s);
}

static size_t round64(size_t n) { return (n + 63) & ~(size_t)63; }

static dnnl_primitive_t reorder(const dnnl_memory_desc_t *from, const dnnl_memory_desc_t *to, int add,
                                const tn_conv_shape *s) {
    dnnl_primitive_attr_t attr = NULL;
    dnnl_post_ops_t po = NULL;
    if (add) {
        DN(dnnl_primitive_attr_create(&attr), s);
        DN(dnnl_post_ops_create(&po), s);
        DN(dnnl_post_ops_append_sum(po, 1.0f), s);
        DN(dnnl_primitive_attr_set_post_ops(attr, po), s);
    }
    dnnl_primitive_desc_t pd;
    dnnl_primitive_t p;
    DN(dnnl_reorder_primitive_desc_create(&pd, from, C.eng, to, C.eng, attr), s);
    DN(dnnl_primitive_create(&p, pd), s);
    dnnl_primitive_desc_destroy(pd);
    if (po) dnnl_post_ops_destroy(po);
    if (attr) dnnl_primitive_attr_destroy(attr);
    return p;
}

/* the port between the caller's layout `user` and the primitive's `inner`; output: the reorders back (and the
 * accumulating one), input: the one in; *off advances past the arena space inner takes */
static void port_init(port *p, const dnnl_memory_desc_t *user, const dnnl_memory_desc_t *inner, int output,
                      size_t *off, const tn_conv_shape *s) {
    memset(p, 0, sizeof *p);
    DN(dnnl_memory_create(&p->user, user, C.eng, DNNL_MEMORY_NONE), s);
    if (!output && dnnl_memory_desc_equal(user, inner)) {
        p->inner = p->user;
        return;
    }
    DN(dnnl_memory_create(&p->inner, inner, C.eng, DNNL_MEMORY_NONE), s);
    p->off = *off;
    *off += round64(dnnl_memory_desc_get_size(inner));
    if (output) {
        p->to_user = reorder(inner, user, 0, s);
        p->add_to_user = reorder(inner, user, 1, s);
    } else {
        p->to_inner = reorder(user, inner, 0, s);
    }
}

static void port_free(port *p) {
    dnnl_primitive_t q[] = {p->to_inner, p->to_user, p->add_to_user};
    for (int i = 0; i < 3; i++)
        if (q[i]) dnnl_primitive_destroy(q[i]);
    if (p->inner && p->inner != p->user) dnnl_memory_destroy(p->inner);
    if (p->user) dnnl_memory_destroy(p->user);
}

static const dnnl_memory_desc_t *q_md(const_dnnl_primitive_desc_t pd, dnnl_query_t what) {
    return dnnl_primitive_desc_query_md(pd, what, 0);
}

/* the three convolution primitives of shape s, the layouts of their choice, and the ports to them */
static conv_entry *entry_create(const tn_conv_shape *s) {
    conv_entry *e = tn_xcalloc(1, sizeof *e);
    e->s = *s;
    dnnl_memory_desc_t ux, uy, uw, any_x, any_y, any_w;
    md_act(&ux, s->N, s->C, s->H, s->W, s), md_act(&uy, s->N, s->OC, s->OH, s->OW, s);
    dnnl_dims_t xd = {s->N, s->C, s->H, s->W}, yd = {s->N, s->OC, s->OH, s->OW}, wd = {s->OC, s->C, s->KH, s->KW};
    DN(dnnl_memory_desc_init_by_tag(&uw, 4, wd, dnnl_f32, dnnl_oihw), s);
    DN(dnnl_memory_desc_init_by_tag(&any_x, 4, xd, dnnl_f32, dnnl_format_tag_any), s);
    DN(dnnl_memory_desc_init_by_tag(&any_y, 4, yd, dnnl_f32, dnnl_format_tag_any), s);
    DN(dnnl_memory_desc_init_by_tag(&any_w, 4, wd, dnnl_f32, dnnl_format_tag_any), s);
    dnnl_dims_t strides = {s->stride, s->stride}, pad_l = {s->pad, s->pad}, pad_r = {s->pad, s->pad};
    dnnl_convolution_desc_t fd, bd, wd_;
    DN(dnnl_convolution_forward_desc_init(&fd, dnnl_forward_training, dnnl_convolution_direct, &any_x, &any_w, NULL,
                                          &any_y, strides, pad_l, pad_r), s);
    DN(dnnl_convolution_backward_data_desc_init(&bd, dnnl_convolution_direct, &any_x, &any_w, &any_y, strides, pad_l,
                                                pad_r), s);
    DN(dnnl_convolution_backward_weights_desc_init(&wd_, dnnl_convolution_direct, &any_x, &any_w, NULL, &any_y,
                                                   strides, pad_l, pad_r), s);
    dnnl_primitive_desc_t fpd, bpd, wpd;
    DN(dnnl_primitive_desc_create(&fpd, &fd, NULL, C.eng, NULL), s);
    DN(dnnl_primitive_desc_create(&bpd, &bd, NULL, C.eng, fpd), s);
    DN(dnnl_primitive_desc_create(&wpd, &wd_, NULL, C.eng, fpd), s);
    DN(dnnl_primitive_create(&e->fwd, fpd), s);
    DN(dnnl_primitive_create(&e->bwd_data, bpd), s);
    DN(dnnl_primitive_create(&e->bwd_w, wpd), s);
    size_t fo = 0, bo = 0;
    port_init(&e->f_src, &ux, q_md(fpd, dnnl_query_src_md), 0, &fo, s);
    port_init(&e->f_w, &uw, q_md(fpd, dnnl_query_weights_md), 0, &fo, s);
    port_init(&e->f_dst, &uy, q_md(fpd, dnnl_query_dst_md), 1, &fo, s);
    port_init(&e->d_dst, &uy, q_md(bpd, dnnl_query_diff_dst_md), 0, &bo, s);
    port_init(&e->d_w, &uw, q_md(bpd, dnnl_query_weights_md), 0, &bo, s);
    port_init(&e->d_src, &ux, q_md(bpd, dnnl_query_diff_src_md), 1, &bo, s);
    e->share_dst = dnnl_memory_desc_equal(q_md(bpd, dnnl_query_diff_dst_md), q_md(wpd, dnnl_query_diff_dst_md));
    port_init(&e->w_src, &ux, q_md(wpd, dnnl_query_src_md), 0, &bo, s);
    if (!e->share_dst) port_init(&e->w_dst, &uy, q_md(wpd, dnnl_query_diff_dst_md), 0, &bo, s);
    port_init(&e->w_dw, &uw, q_md(wpd, dnnl_query_diff_weights_md), 1, &bo, s);
    e->arena_bytes = fo > bo ? fo : bo;
    dnnl_primitive_desc_destroy(fpd), dnnl_primitive_desc_destroy(bpd), dnnl_primitive_desc_destroy(wpd);
    return e;
}

static void entry_free(conv_entry *e) {
    dnnl_primitive_destroy(e->fwd), dnnl_primitive_destroy(e->bwd_data), dnnl_primitive_destroy(e->bwd_w);
    port *p[] = {&e->f_src, &e->f_w, &e->f_dst, &e->d_dst, &e->d_w, &e->d_src, &e->w_src, &e->w_dw};
    for (size_t i = 0; i < sizeof p / sizeof *p; i++) port_free(p[i]);
    if (!e->share_dst) port_free(&e->w_dst);
    free(e);
}

static int same_shape(const tn_conv_shape *a, const tn_conv_shape *b) {
    return a->N == b->N && a->C == b->C && a->H == b->H && a->W == b->W && a->OC == b->OC && a->KH == b->KH &&
           a->KW == b->KW && a->stride == b->stride && a->pad == b->pad;
}

/* the cached entry of shape s (made on first use), with the arena large enough for it; called under C.lock */
static conv_entry *entry_get(const tn_conv_shape *s) {
    if (!C.eng) {
        DN(dnnl_engine_create(&C.eng, dnnl_cpu, 0), s);
        DN(dnnl_stream_create(&C.stream, C.eng, dnnl_stream_default_flags), s);
    }
    for (int i = 0; i < C.n; i++)
        if (same_shape(&C.e[i]->s, s)) return C.e[i];
    conv_entry *e = entry_create(s);
    if (C.n < CACHE_MAX) {
        C.e[C.n++] = e;
    } else {
        entry_free(C.e[C.next]);
        C.e[C.next] = e, C.next = (C.next + 1) % CACHE_MAX;
    }
    if (e->arena_bytes > C.arena_bytes) {
        free(C.arena);
        C.arena = aligned_alloc(64, e->arena_bytes);
        if (!C.arena) tn_die("cpu_conv: out of memory for %zu bytes of convolution layouts", e->arena_bytes);
        C.arena_bytes = e->arena_bytes;
    }
    return e;
}

static void set(dnnl_memory_t m, const void *p, const tn_conv_shape *s) {
    DN(dnnl_memory_set_data_handle(m, (void *)p), s);
}

/* caller's data at user_ptr into the primitive's layout */
static void port_in(const port *p, const void *user_ptr, const tn_conv_shape *s) {
    set(p->user, user_ptr, s);
    if (p->inner == p->user) return;
    set(p->inner, C.arena + p->off, s);
    dnnl_exec_arg_t a[] = {{DNNL_ARG_FROM, p->user}, {DNNL_ARG_TO, p->inner}};
    DN(dnnl_primitive_execute(p->to_inner, C.stream, 2, a), s);
}

static void port_out_prepare(const port *p, void *user_ptr, const tn_conv_shape *s) {
    set(p->user, user_ptr, s);
    set(p->inner, C.arena + p->off, s);
}

/* the primitive's result back into the caller's layout, written or added */
static void port_out(const port *p, int add, const tn_conv_shape *s) {
    dnnl_exec_arg_t a[] = {{DNNL_ARG_FROM, p->inner}, {DNNL_ARG_TO, p->user}};
    DN(dnnl_primitive_execute(add ? p->add_to_user : p->to_user, C.stream, 2, a), s);
}

static void run(dnnl_primitive_t prim, int n, dnnl_exec_arg_t *a, const tn_conv_shape *s) {
    DN(dnnl_primitive_execute(prim, C.stream, n, a), s);
}

void tn_cpu_conv2d_forward(float *y, const float *x, const float *w, const tn_conv_shape *s, float *scratch) {
    if (tn_cpu_conv_has_dead_taps(s)) {
        tn_cpu_conv2d_gemm_forward(y, x, w, s, scratch);
        return;
    }
    pthread_mutex_lock(&C.lock);
    conv_entry *e = entry_get(s);
    port_in(&e->f_src, x, s), port_in(&e->f_w, w, s), port_out_prepare(&e->f_dst, y, s);
    dnnl_exec_arg_t a[] = {{DNNL_ARG_SRC, e->f_src.inner}, {DNNL_ARG_WEIGHTS, e->f_w.inner},
                           {DNNL_ARG_DST, e->f_dst.inner}};
    run(e->fwd, 3, a, s);
    port_out(&e->f_dst, 0, s);
    DN(dnnl_stream_wait(C.stream), s);
    pthread_mutex_unlock(&C.lock);
}

void tn_cpu_conv2d_backward(float *dx, int accumulate_dx, float *dw, const float *dy, const float *x, const float *w,
                            const tn_conv_shape *s, float *scratch) {
    if (tn_cpu_conv_has_dead_taps(s)) {
        tn_cpu_conv2d_gemm_backward(dx, accumulate_dx, dw, dy, x, w, s, scratch);
        return;
    }
    pthread_mutex_lock(&C.lock);
    conv_entry *e = entry_get(s);
    port_in(&e->d_dst, dy, s);
    if (dx) {
        port_in(&e->d_w, w, s), port_out_prepare(&e->d_src, dx, s);
        dnnl_exec_arg_t a[] = {{DNNL_ARG_DIFF_DST, e->d_dst.inner}, {DNNL_ARG_WEIGHTS, e->d_w.inner},
                               {DNNL_ARG_DIFF_SRC, e->d_src.inner}};
        run(e->bwd_data, 3, a, s);
        port_out(&e->d_src, accumulate_dx, s);
    }
    if (dw) {
        const port *pd = e->share_dst ? &e->d_dst : &e->w_dst;
        if (!e->share_dst) port_in(&e->w_dst, dy, s);
        port_in(&e->w_src, x, s), port_out_prepare(&e->w_dw, dw, s);
        dnnl_exec_arg_t a[] = {{DNNL_ARG_SRC, e->w_src.inner}, {DNNL_ARG_DIFF_DST, pd->inner},
                               {DNNL_ARG_DIFF_WEIGHTS, e->w_dw.inner}};
        run(e->bwd_w, 3, a, s);
        port_out(&e->w_dw, 1, s); /* parameter gradients accumulate */
    }
    DN(dnnl_stream_wait(C.stream), s);
    pthread_mutex_unlock(&C.lock);
}

/* oneDNN keeps its own layouts (the arena above): the model's scratch is only for the shapes im2col runs */
size_t tn_conv_scratch_floats(const tn_conv_shape *s) {
    return tn_cpu_conv_has_dead_taps(s) ? tn_cpu_conv_gemm_scratch_floats(s) : 0;
}
