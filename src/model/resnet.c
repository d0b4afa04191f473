/* resnet -- the ResNet's parameter layout under torchvision's names, its initialisation, and safetensors in and out
 * (contract: resnet.h). The layout follows torchvision's state_dict order, so a slab range is a run of consecutive
 * state_dict entries and gradient buckets follow the network front to back. */
#include "model/resnet_internal.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/core.h"
#include "model/safetensors.h"

static size_t add_tensor(tn_resnet *m, const char *name, int ndim, const int64_t *shape, int buffer) {
    m->t = tn_xrealloc(m->t, (size_t)(m->n_tensors + 1) * sizeof *m->t);
    tn_resnet_tensor *t = &m->t[m->n_tensors++];
    memset(t, 0, sizeof *t);
    snprintf(t->name, sizeof t->name, "%s", name);
    t->ndim = ndim, t->buffer = buffer, t->numel = 1;
    for (int i = 0; i < ndim; i++) t->shape[i] = shape[i], t->numel *= (size_t)shape[i];
    size_t *n = buffer ? &m->n_buffers : &m->n_params;
    t->offset = *n;
    *n += t->numel;
    return t->offset;
}

static void add_conv(tn_resnet *m, rn_conv *c, const char *prefix, int C, int OC, int k, int stride, int pad) {
    char name[96];
    snprintf(name, sizeof name, "%s.weight", prefix);
    int64_t shape[4] = {OC, C, k, k};
    c->w = add_tensor(m, name, 4, shape, 0);
    c->s = (tn_conv_shape){.C = C, .OC = OC, .KH = k, .KW = k, .stride = stride, .pad = pad};
}

static void add_bn(tn_resnet *m, rn_bn *b, const char *prefix, int C) {
    char name[96];
    int64_t shape[1] = {C};
    b->C = C, b->idx = m->n_bn++;
    snprintf(name, sizeof name, "%s.weight", prefix), b->g = add_tensor(m, name, 1, shape, 0);
    snprintf(name, sizeof name, "%s.bias", prefix), b->b = add_tensor(m, name, 1, shape, 0);
    snprintf(name, sizeof name, "%s.running_mean", prefix), b->rm = add_tensor(m, name, 1, shape, 1);
    snprintf(name, sizeof name, "%s.running_var", prefix), b->rv = add_tensor(m, name, 1, shape, 1);
}

static void build_layout(tn_resnet *m) {
    const tn_resnet_config *c = &m->cfg;
    int w = c->base_width, in = w;
    add_conv(m, &m->stem, "conv1", c->in_channels, w, 7, 2, 3);
    add_bn(m, &m->bn1, "bn1", w);
    for (int s = 0; s < 4; s++) m->n_blocks += c->layers[s];
    m->blocks = tn_xcalloc((size_t)m->n_blocks, sizeof *m->blocks);
    rn_block *b = m->blocks;
    for (int s = 0; s < 4; s++)
        for (int i = 0; i < c->layers[s]; i++, b++) {
            int out = w << s, stride = (s > 0 && i == 0) ? 2 : 1;
            char p[32], q[64];
            snprintf(p, sizeof p, "layer%d.%d", s + 1, i);
            snprintf(q, sizeof q, "%s.conv1", p), add_conv(m, &b->c1, q, in, out, 3, stride, 1);
            snprintf(q, sizeof q, "%s.bn1", p), add_bn(m, &b->b1, q, out);
            snprintf(q, sizeof q, "%s.conv2", p), add_conv(m, &b->c2, q, out, out, 3, 1, 1);
            snprintf(q, sizeof q, "%s.bn2", p), add_bn(m, &b->b2, q, out);
            b->has_ds = stride != 1 || in != out;
            if (b->has_ds) {
                snprintf(q, sizeof q, "%s.downsample.0", p), add_conv(m, &b->ds, q, in, out, 1, stride, 0);
                snprintf(q, sizeof q, "%s.downsample.1", p), add_bn(m, &b->dsb, q, out);
            }
            in = out;
        }
    m->feat = in;
    int64_t fw[2] = {c->num_classes, in}, fb[1] = {c->num_classes};
    m->fc_w = add_tensor(m, "fc.weight", 2, fw, 0);
    m->fc_b = add_tensor(m, "fc.bias", 1, fb, 0);
}

tn_resnet *tn_resnet_create(const tn_resnet_config *cfg, const tn_backend *be) {
    if (!be->image)
        return tn_err("the %s backend has no image kernels yet: a ResNet trains on the CPU backend (device: cpu)",
                      be->name), NULL;
    tn_resnet *m = tn_xcalloc(1, sizeof *m);
    m->cfg = *cfg, m->be = be, m->ik = be->image;
    build_layout(m);
    m->params = be->alloc(m->n_params);
    m->grad = be->alloc(m->n_params);
    m->buffers = be->alloc(m->n_buffers);
    return m;
}

void tn_resnet_free(tn_resnet *m) {
    if (!m) return;
    if (m->acts) tn_resnet_free_workspace(m);
    float *p[] = {m->params, m->grad, m->buffers};
    for (size_t k = 0; k < sizeof p / sizeof *p; k++) m->be->free(p[k]);
    free(m->blocks), free(m->t), free(m);
}

const tn_resnet_config *tn_resnet_cfg(const tn_resnet *m) { return &m->cfg; }
int tn_resnet_n_tensors(const tn_resnet *m) { return m->n_tensors; }
const tn_resnet_tensor *tn_resnet_tensor_at(const tn_resnet *m, int i) { return &m->t[i]; }
size_t tn_resnet_n_params(const tn_resnet *m) { return m->n_params; }
float *tn_resnet_params(tn_resnet *m) { return m->params; }
float *tn_resnet_grad(tn_resnet *m) { return m->grad; }

const tn_resnet_tensor *tn_resnet_find(const tn_resnet *m, const char *name) {
    for (int i = 0; i < m->n_tensors; i++)
        if (strcmp(m->t[i].name, name) == 0) return &m->t[i];
    return NULL;
}

void tn_resnet_get(const tn_resnet *m, const tn_resnet_tensor *t, float *host) {
    m->be->download(host, (t->buffer ? m->buffers : m->params) + t->offset, t->numel);
}
void tn_resnet_set(tn_resnet *m, const tn_resnet_tensor *t, const float *host) {
    m->be->upload((t->buffer ? m->buffers : m->params) + t->offset, host, t->numel);
}

static int ends_with(const char *s, const char *suffix) {
    size_t n = strlen(s), k = strlen(suffix);
    return n >= k && strcmp(s + n - k, suffix) == 0;
}

void tn_resnet_init_random(tn_resnet *m, uint64_t seed) {
    tn_rng rng;
    tn_rng_seed(&rng, seed);
    for (int i = 0; i < m->n_tensors; i++) {
        const tn_resnet_tensor *t = &m->t[i];
        float *h = tn_xmalloc(t->numel * sizeof *h);
        if (t->ndim == 4) { /* kaiming_normal_(mode="fan_out", nonlinearity="relu"): std = sqrt(2 / (OC k k)) */
            double sd = sqrt(2.0 / (double)(t->shape[0] * t->shape[2] * t->shape[3]));
            for (size_t k = 0; k < t->numel; k++) h[k] = (float)(sd * tn_rng_normal(&rng));
        } else if (strncmp(t->name, "fc.", 3) == 0) { /* nn.Linear: U(-1/sqrt(in), 1/sqrt(in)) for weight and bias */
            double bound = 1.0 / sqrt((double)m->feat);
            for (size_t k = 0; k < t->numel; k++) h[k] = (float)(bound * (2.0 * tn_rng_uniform(&rng) - 1.0));
        } else { /* BN: weight 1, bias 0, running mean 0, running var 1 */
            float v = ends_with(t->name, ".weight") || ends_with(t->name, "running_var") ? 1.0f : 0.0f;
            for (size_t k = 0; k < t->numel; k++) h[k] = v;
        }
        tn_resnet_set(m, t, h);
        free(h);
    }
    m->batches_tracked = 0;
}

static int load_file(tn_resnet *m, const st_file *f) {
    for (int i = 0; i < m->n_tensors; i++) {
        const tn_resnet_tensor *t = &m->t[i];
        const st_tensor *s = st_find(f, t->name);
        if (!s) return tn_err("%s: tensor '%s' is missing (torchvision's name for this layer)", f->path, t->name);
        int same = s->ndim == t->ndim;
        for (int d = 0; same && d < t->ndim; d++) same = s->shape[d] == t->shape[d];
        if (!same)
            return tn_err("%s: tensor '%s' has shape of %d dims [%lld, ...], the config says [%lld, ...] (%d dims)",
                          f->path, t->name, s->ndim, s->ndim ? (long long)s->shape[0] : 0LL, (long long)t->shape[0],
                          t->ndim);
        float *h = tn_xmalloc(t->numel * sizeof *h);
        int rc = st_read_f32(f, s, h, (int64_t)t->numel);
        if (rc == 0) tn_resnet_set(m, t, h);
        free(h);
        if (rc) return -1;
    }
    const st_tensor *nb = st_find(f, "bn1.num_batches_tracked");
    int64_t v = 0;
    if (nb && nb->numel == 1 && st_read_i64(f, nb, &v, 1) == 0) m->batches_tracked = v;
    return 0;
}

int tn_resnet_load(tn_resnet *m, const char *dir) {
    char *path = ends_with(dir, ".safetensors") ? tn_xstrdup(dir) : tn_path_join(dir, "model.safetensors");
    st_file f;
    int rc = st_open(&f, path);
    free(path);
    if (rc) return -1;
    rc = load_file(m, &f);
    st_close(&f);
    return rc;
}

int tn_resnet_save(const tn_resnet *m, const char *dir) {
    if (tn_mkdirs(dir)) return tn_err("%s: cannot create the folder", dir);
    int n = m->n_tensors;
    st_entry *e = tn_xcalloc((size_t)(n + m->n_bn), sizeof *e);
    float **host = tn_xcalloc((size_t)n, sizeof *host);
    char (*nbt)[64] = tn_xcalloc((size_t)m->n_bn, sizeof *nbt);
    int k = 0, b = 0;
    for (int i = 0; i < n; i++) {
        const tn_resnet_tensor *t = &m->t[i];
        host[i] = tn_xmalloc(t->numel * sizeof *host[i]);
        tn_resnet_get(m, t, host[i]);
        e[k] = (st_entry){.name = t->name, .dtype = ST_F32, .src_dtype = ST_F32, .ndim = t->ndim, .data = host[i]};
        for (int d = 0; d < t->ndim; d++) e[k].shape[d] = t->shape[d];
        k++;
        if (ends_with(t->name, ".running_var")) { /* torch's scalar int64 counter of each BN */
            int len = (int)(strlen(t->name) - strlen("running_var"));
            snprintf(nbt[b], sizeof nbt[b], "%.*snum_batches_tracked", len, t->name);
            e[k++] = (st_entry){.name = nbt[b++], .dtype = ST_I64, .src_dtype = ST_I64, .ndim = 0,
                                .data = &m->batches_tracked};
        }
    }
    char *cfg = tn_path_join(dir, "config.json"), *st = tn_path_join(dir, "model.safetensors");
    int rc = tn_resnet_config_save(cfg, &m->cfg);
    if (rc == 0) rc = st_write(st, e, k, NULL);
    for (int i = 0; i < n; i++) free(host[i]);
    free(host), free(nbt), free(e), free(cfg), free(st);
    return rc;
}

int tn_resnet_shapes(tn_resnet *m, int N, int H, int W) {
    tn_conv_shape *s = &m->stem.s;
    s->N = N, s->H = H, s->W = W;
    if (tn_conv_shape_finish(s)) return tn_err("images of %dx%d are too small for the 7x7 stem", H, W);
    int h = (s->OH + 2 - 3) / 2 + 1, w = (s->OW + 2 - 3) / 2 + 1; /* max-pool 3x3/2 pad 1 */
    if (s->OH < 2 || s->OW < 2) return tn_err("images of %dx%d are too small for the stem's max-pool", H, W);
    for (int i = 0; i < m->n_blocks; i++) {
        rn_block *b = &m->blocks[i];
        b->c1.s.N = N, b->c1.s.H = h, b->c1.s.W = w;
        if (tn_conv_shape_finish(&b->c1.s)) return tn_err("images of %dx%d are too small for stage strides", H, W);
        b->c2.s.N = N, b->c2.s.H = b->c1.s.OH, b->c2.s.W = b->c1.s.OW;
        tn_conv_shape_finish(&b->c2.s);
        if (b->has_ds) {
            b->ds.s.N = N, b->ds.s.H = h, b->ds.s.W = w;
            if (tn_conv_shape_finish(&b->ds.s) || b->ds.s.OH != b->c2.s.OH || b->ds.s.OW != b->c2.s.OW)
                return tn_err("block %d: the downsample's output is not the shape of the main path's", i);
        }
        h = b->c2.s.OH, w = b->c2.s.OW;
    }
    return 0;
}
