/* lf_cache.c -- the tokenized cache: one binary file per input key, written atomically, mapped back.
 *
 * Layout (host byte order, checked by a marker): a 1024-byte header (magic, version, SHA-256 key, per split
 * n / tokens / has_pos / n_dropped / drop reason / has_img / images / pixel bytes, the image processor's
 * settings), then for train and eval in turn: len int32[n], off int64[n+1], ids int32[T], labels int32[T],
 * pos int32[T] if any, and with images img_off int64[n+1], img_hw int32[2*I], pix_off int64[I+1], the
 * prepared RGB bytes, each section padded to 8 bytes. A mapping is MAP_PRIVATE (writes stay private), so a
 * rank reads only the pages of the samples (and images) it touches. A file that does not match (other key,
 * short, inconsistent offsets or image sizes) is a miss and gets rewritten.
 * Also SHA-256 (FIPS 180-4), used for the key. */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "core/core.h"
#include "data/lf_internal.h"

_Static_assert(sizeof(int) == 4, "lf_samples.len is stored as int32");

/* ---- SHA-256 ---- */
static const uint32_t K256[64] = {
    0x428a2f98, 0x71374491, 0xb5c0fbcf, 0xe9b5dba5, 0x3956c25b, 0x59f111f1, 0x923f82a4, 0xab1c5ed5, 0xd807aa98, 0x12835b01,
    0x243185be, 0x550c7dc3, 0x72be5d74, 0x80deb1fe, 0x9bdc06a7, 0xc19bf174, 0xe49b69c1, 0xefbe4786, 0x0fc19dc6, 0x240ca1cc,
    0x2de92c6f, 0x4a7484aa, 0x5cb0a9dc, 0x76f988da, 0x983e5152, 0xa831c66d, 0xb00327c8, 0xbf597fc7, 0xc6e00bf3, 0xd5a79147,
    0x06ca6351, 0x14292967, 0x27b70a85, 0x2e1b2138, 0x4d2c6dfc, 0x53380d13, 0x650a7354, 0x766a0abb, 0x81c2c92e, 0x92722c85,
    0xa2bfe8a1, 0xa81a664b, 0xc24b8b70, 0xc76c51a3, 0xd192e819, 0xd6990624, 0xf40e3585, 0x106aa070, 0x19a4c116, 0x1e376c08,
    0x2748774c, 0x34b0bcb5, 0x391c0cb3, 0x4ed8aa4a, 0x5b9cca4f, 0x682e6ff3, 0x748f82ee, 0x78a5636f, 0x84c87814, 0x8cc70208,
    0x90befffa, 0xa4506ceb, 0xbef9a3f7, 0xc67178f2};

static uint32_t ror(uint32_t x, int r) { return (x >> r) | (x << (32 - r)); }

static void sha_block(lf_sha256 *s, const uint8_t *p) {
    uint32_t w[64];
    for (int i = 0; i < 16; i++) w[i] = (uint32_t)p[4 * i] << 24 | (uint32_t)p[4 * i + 1] << 16 | (uint32_t)p[4 * i + 2] << 8 | p[4 * i + 3];
    for (int i = 16; i < 64; i++) {
        uint32_t s0 = ror(w[i - 15], 7) ^ ror(w[i - 15], 18) ^ (w[i - 15] >> 3);
        uint32_t s1 = ror(w[i - 2], 17) ^ ror(w[i - 2], 19) ^ (w[i - 2] >> 10);
        w[i] = w[i - 16] + s0 + w[i - 7] + s1;
    }
    uint32_t a = s->h[0], b = s->h[1], c = s->h[2], d = s->h[3], e = s->h[4], f = s->h[5], g = s->h[6], h = s->h[7];
    for (int i = 0; i < 64; i++) {
        uint32_t t1 = h + (ror(e, 6) ^ ror(e, 11) ^ ror(e, 25)) + ((e & f) ^ (~e & g)) + K256[i] + w[i];
        uint32_t t2 = (ror(a, 2) ^ ror(a, 13) ^ ror(a, 22)) + ((a & b) ^ (a & c) ^ (b & c));
        h = g, g = f, f = e, e = d + t1, d = c, c = b, b = a, a = t1 + t2;
    }
    s->h[0] += a, s->h[1] += b, s->h[2] += c, s->h[3] += d, s->h[4] += e, s->h[5] += f, s->h[6] += g, s->h[7] += h;
}

void lf_sha256_init(lf_sha256 *s) {
    static const uint32_t h0[8] = {0x6a09e667, 0xbb67ae85, 0x3c6ef372, 0xa54ff53a, 0x510e527f, 0x9b05688c, 0x1f83d9ab, 0x5be0cd19};
    memcpy(s->h, h0, sizeof h0);
    s->len = 0, s->fill = 0;
}

void lf_sha256_update(lf_sha256 *s, const void *data, size_t n) {
    const uint8_t *p = data;
    s->len += n;
    if (s->fill) {
        size_t k = 64 - s->fill < n ? 64 - s->fill : n;
        memcpy(s->buf + s->fill, p, k);
        s->fill += k, p += k, n -= k;
        if (s->fill < 64) return;
        sha_block(s, s->buf);
        s->fill = 0;
    }
    for (; n >= 64; p += 64, n -= 64) sha_block(s, p);
    memcpy(s->buf, p, n);
    s->fill = n;
}

void lf_sha256_final(lf_sha256 *s, uint8_t out[32]) {
    uint64_t bits = s->len * 8;
    uint8_t pad = 0x80, zero = 0, lenb[8];
    lf_sha256_update(s, &pad, 1);
    while (s->fill != 56) lf_sha256_update(s, &zero, 1);
    for (int i = 0; i < 8; i++) lenb[i] = (uint8_t)(bits >> (56 - 8 * i));
    lf_sha256_update(s, lenb, 8);
    for (int i = 0; i < 8; i++)
        out[4 * i] = (uint8_t)(s->h[i] >> 24), out[4 * i + 1] = (uint8_t)(s->h[i] >> 16), out[4 * i + 2] = (uint8_t)(s->h[i] >> 8),
                  out[4 * i + 3] = (uint8_t)s->h[i];
}

/* ---- file ---- */
#define LF_CACHE_MAGIC "TNLFC\0\0\1"
#define LF_CACHE_VERSION 2u
#define LF_CACHE_ENDIAN 0x01020304u

typedef struct {
    char magic[8];
    uint32_t version, endian;
    uint8_t key[32];
    uint64_t n[2], tok[2];
    uint32_t has_pos[2];
    int32_t n_dropped[2];
    char drop_reason[2][200];
    uint32_t has_img[2];
    uint64_t n_img[2], pix[2];
    tn_vl_proc vl;
} cache_hdr;
#define HDR_BYTES 1024
_Static_assert(sizeof(cache_hdr) <= HDR_BYTES, "cache header fits 1024 bytes");

static size_t pad8(size_t n) { return (n + 7) & ~(size_t)7; }

static size_t split_bytes(const cache_hdr *h, int s) {
    uint64_t n = h->n[s], tok = h->tok[s];
    size_t b = pad8(4 * n) + 8 * (n + 1) + (size_t)(2 + (h->has_pos[s] ? 1 : 0)) * pad8(4 * tok);
    if (h->has_img[s]) b += 8 * (n + 1) + pad8(8 * h->n_img[s]) + 8 * (h->n_img[s] + 1) + pad8(h->pix[s]);
    return b;
}

static int put_padded(tn_atomic_file *f, const void *p, size_t n) {
    static const char zeros[8] = {0};
    if (tn_atomic_write(f, p, n) != 0) return -1;
    return tn_atomic_write(f, zeros, pad8(n) - n);
}

int lf_cache_write(const char *path, const uint8_t key[32], const lf_samples *train, const lf_samples *eval) {
    cache_hdr h;
    memset(&h, 0, sizeof h);
    memcpy(h.magic, LF_CACHE_MAGIC, 8);
    h.version = LF_CACHE_VERSION, h.endian = LF_CACHE_ENDIAN;
    memcpy(h.key, key, 32);
    const lf_samples *sp[2] = {train, eval};
    for (int s = 0; s < 2; s++) {
        if (!sp[s]) continue;
        h.n[s] = (uint64_t)sp[s]->n, h.tok[s] = (uint64_t)sp[s]->off[sp[s]->n];
        h.has_pos[s] = sp[s]->pos != NULL, h.n_dropped[s] = sp[s]->n_dropped;
        memcpy(h.drop_reason[s], sp[s]->drop_reason, sizeof h.drop_reason[s]);
        if (sp[s]->img_off) {
            h.has_img[s] = 1, h.vl = sp[s]->vl;
            h.n_img[s] = (uint64_t)sp[s]->img_off[sp[s]->n], h.pix[s] = (uint64_t)sp[s]->pix_off[h.n_img[s]];
        }
    }
    char hb[HDR_BYTES] = {0};
    memcpy(hb, &h, sizeof h);
    tn_atomic_file *f = tn_atomic_open(path);
    if (!f) return -1;
    int rc = tn_atomic_write(f, hb, sizeof hb);
    for (int s = 0; s < 2 && rc == 0; s++) {
        const lf_samples *x = sp[s];
        if (!x) {  /* an empty split: off[0] = 0 */
            static const int64_t zero = 0;
            rc = tn_atomic_write(f, &zero, sizeof zero);
            continue;
        }
        size_t T = (size_t)h.tok[s];
        rc = put_padded(f, x->len, 4 * (size_t)x->n);
        if (rc == 0) rc = tn_atomic_write(f, x->off, 8 * ((size_t)x->n + 1));
        if (rc == 0) rc = put_padded(f, x->ids, 4 * T);
        if (rc == 0) rc = put_padded(f, x->labels, 4 * T);
        if (rc == 0 && x->pos) rc = put_padded(f, x->pos, 4 * T);
        if (rc == 0 && x->img_off) {
            size_t I = (size_t)h.n_img[s];
            rc = tn_atomic_write(f, x->img_off, 8 * ((size_t)x->n + 1));
            if (rc == 0) rc = put_padded(f, x->img_hw, 8 * I);
            if (rc == 0) rc = tn_atomic_write(f, x->pix_off, 8 * (I + 1));
            if (rc == 0) rc = put_padded(f, x->pix, (size_t)h.pix[s]);
        }
    }
    if (rc != 0) {
        tn_atomic_abort(f);
        return -1;
    }
    return tn_atomic_commit(f);
}

/* The image sections agree: offsets from 0 to the totals, each image's bytes its h x w x 3, sides that are
 * whole merge windows of the processor the header records. */
static int images_valid(const cache_hdr *h, const lf_samples *s, uint64_t n_img, uint64_t pix) {
    const tn_vl_proc *v = &h->vl;
    if (v->patch_size < 1 || v->patch_size > 1024 || v->merge_size < 1 || v->merge_size > 16 || v->temporal_patch_size < 1 ||
        v->temporal_patch_size > 16)
        return -1;
    int64_t f = (int64_t)v->patch_size * v->merge_size;
    if (s->img_off[0] != 0 || (uint64_t)s->img_off[s->n] != n_img || s->pix_off[0] != 0 || (uint64_t)s->pix_off[n_img] != pix) return -1;
    for (int i = 0; i < s->n; i++)
        if (s->img_off[i + 1] < s->img_off[i]) return -1;
    for (uint64_t k = 0; k < n_img; k++) { /* no subtraction of offsets a damaged file may hold */
        int64_t ih = s->img_hw[2 * k], iw = s->img_hw[2 * k + 1];
        if (ih <= 0 || iw <= 0 || ih > (1 << 20) || iw > (1 << 20) || ih % f || iw % f) return -1;
        if (s->pix_off[k] < 0 || (uint64_t)s->pix_off[k] > pix || s->pix_off[k + 1] != s->pix_off[k] + ih * iw * 3) return -1;
    }
    return 0;
}

/* Points s into a private mapping of the file at the split's section. */
static int map_split(int fd, size_t size, const cache_hdr *h, int which, lf_samples *s) {
    void *m = mmap(NULL, size, PROT_READ | PROT_WRITE, MAP_PRIVATE, fd, 0);
    if (m == MAP_FAILED) return tn_err("mmap of the cache failed: %s", strerror(errno));
    size_t at = HDR_BYTES;
    for (int k = 0; k < which; k++) at += split_bytes(h, k);
    char *p = (char *)m + at;
    uint64_t n = h->n[which], T = h->tok[which];
    memset(s, 0, sizeof *s);
    s->n = (int)n;
    s->len = (int *)p, p += pad8(4 * n);
    s->off = (int64_t *)p, p += 8 * (n + 1);
    s->ids = (int32_t *)p, p += pad8(4 * T);
    s->labels = (int32_t *)p, p += pad8(4 * T);
    s->pos = h->has_pos[which] ? (int32_t *)p : NULL;
    if (s->pos) p += pad8(4 * T);
    uint64_t I = h->n_img[which];
    if (h->has_img[which]) {
        s->img_off = (int64_t *)p, p += 8 * (n + 1);
        s->img_hw = (int32_t *)p, p += pad8(8 * I);
        s->pix_off = (int64_t *)p, p += 8 * (I + 1);
        s->pix = (uint8_t *)p;
        s->vl = h->vl;
    }
    s->n_dropped = h->n_dropped[which];
    memcpy(s->drop_reason, h->drop_reason[which], sizeof s->drop_reason);
    s->drop_reason[sizeof s->drop_reason - 1] = '\0';
    s->map_ = m, s->map_len_ = size;
    /* the offsets must agree with the lengths (small arrays: cheap to check) */
    if (s->off[0] != 0 || (uint64_t)s->off[n] != T) return -1;
    for (uint64_t i = 0; i < n; i++)
        if (s->len[i] < 0 || s->off[i + 1] != s->off[i] + s->len[i]) return -1; /* no subtraction: a damaged file may hold any offsets */
    if (h->has_img[which] && images_valid(h, s, I, h->pix[which]) != 0) return -1;
    return 0;
}

/* key NULL: any key. 1 = mapped, 0 = absent or not a valid cache (for key: stale), -1 = I/O error. */
static int open_cache(const char *path, const uint8_t *key, lf_samples *train, lf_samples *eval) {
    if (train) memset(train, 0, sizeof *train);
    if (eval) memset(eval, 0, sizeof *eval);
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) return errno == ENOENT ? 0 : tn_err("%s: cannot open: %s", path, strerror(errno));
    struct stat st;
    cache_hdr h;
    int ok = fstat(fd, &st) == 0 && st.st_size >= HDR_BYTES && pread(fd, &h, sizeof h, 0) == (ssize_t)sizeof h;
    ok = ok && memcmp(h.magic, LF_CACHE_MAGIC, 8) == 0 && h.version == LF_CACHE_VERSION && h.endian == LF_CACHE_ENDIAN;
    ok = ok && (!key || memcmp(h.key, key, 32) == 0);
    if (ok) {
        uint64_t size = HDR_BYTES;
        for (int s = 0; s < 2 && ok; s++) {
            ok = h.n[s] <= INT32_MAX && h.tok[s] <= ((uint64_t)1 << 40) && h.n_img[s] <= ((uint64_t)1 << 40) &&
                 h.pix[s] <= ((uint64_t)1 << 50) && h.has_img[s] <= 1 && h.has_pos[s] <= 1;
            if (ok) size += split_bytes(&h, s);
        }
        ok = ok && size == (uint64_t)st.st_size;
    }
    lf_samples *out[2] = {train, eval};
    for (int s = 0; s < 2 && ok; s++)
        if (out[s]) ok = map_split(fd, (size_t)st.st_size, &h, s, out[s]) == 0;
    close(fd);
    if (ok) return 1;
    if (train) lf_samples_free(train);
    if (eval) lf_samples_free(eval);
    return 0;
}

int lf_cache_try(const char *path, const uint8_t key[32], lf_samples *train, lf_samples *eval) {
    return open_cache(path, key, train, eval);
}

int lf_cache_map(const char *path, lf_samples *train, lf_samples *eval) {
    int rc = open_cache(path, NULL, train, eval);
    if (rc == 0) return tn_err("%s: missing, or not a valid tandem data cache", path);
    return rc == 1 ? 0 : -1;
}

void lf_samples_free(lf_samples *s) {
    if (!s) return;
    if (s->map_) {
        munmap(s->map_, s->map_len_);
    } else {
        free(s->len), free(s->ids), free(s->labels), free(s->off), free(s->pos);
        free(s->img_off), free(s->img_hw), free(s->pix_off), free(s->pix);
    }
    memset(s, 0, sizeof *s);
}

int64_t lf_samples_images(const lf_samples *s) { return s->img_off ? s->img_off[s->n] : 0; }
