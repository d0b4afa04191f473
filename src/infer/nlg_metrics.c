/* nlg_metrics.c -- see nlg_metrics.h. N-grams are compared by content (sorting), never by hash. */
#include "infer/nlg_metrics.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "core/core.h"
#include "outputs/pyfmt.h"

/* ---------------------------------------------------------------- UTF-8 */

/* Code point at s (advancing *len bytes); invalid bytes count as one U+FFFD each, as Python's decode(replace). */
static unsigned next_cp(const unsigned char *s, size_t n, size_t *len) {
    unsigned c = s[0];
    size_t k = c < 0x80 ? 1 : (c >> 5) == 6 ? 2 : (c >> 4) == 14 ? 3 : (c >> 3) == 30 ? 4 : 0;
    if (!k || k > n) return *len = 1, 0xFFFD;
    unsigned cp = k == 1 ? c : c & (0x7Fu >> k);
    for (size_t j = 1; j < k; j++) {
        if ((s[j] & 0xC0) != 0x80) return *len = 1, 0xFFFD;
        cp = cp << 6 | (s[j] & 0x3F);
    }
    *len = k;
    return cp;
}

static unsigned *code_points(const char *text, int *n_out) {
    size_t n = strlen(text), at = 0, len;
    unsigned *cp = tn_xmalloc((n + 1) * sizeof *cp);
    int k = 0;
    while (at < n) {
        cp[k++] = next_cp((const unsigned char *)text + at, n - at, &len);
        at += len;
    }
    *n_out = k;
    return cp;
}

/* ---------------------------------------------------------------- BLEU-4 over characters */

typedef struct {
    const unsigned *s;
    int at, side; /* side 0: hypothesis, 1: reference */
} gram;
static int g_n; /* n of the n-grams being sorted (qsort has no context; metrics run on one thread) */
static int gram_cmp(const void *pa, const void *pb) {
    const gram *a = pa, *b = pb;
    for (int i = 0; i < g_n; i++)
        if (a->s[a->at + i] != b->s[b->at + i]) return a->s[a->at + i] < b->s[b->at + i] ? -1 : 1;
    return a->side - b->side;
}

/* clipped matches of n-grams of h in r */
static long clipped(const unsigned *h, int nh, const unsigned *r, int nr, int n, gram *buf) {
    int k = 0;
    for (int i = 0; i + n <= nh; i++) buf[k++] = (gram){h, i, 0};
    for (int i = 0; i + n <= nr; i++) buf[k++] = (gram){r, i, 1};
    g_n = n;
    qsort(buf, (size_t)k, sizeof *buf, gram_cmp);
    long match = 0;
    for (int i = 0; i < k;) {
        int j = i, ch = 0, cr = 0;
        while (j < k && !memcmp(buf[j].s + buf[j].at, buf[i].s + buf[i].at, (size_t)n * sizeof(unsigned)))
        {
            if (buf[j].side) cr++;
            else ch++;
            j++;
        }
        match += ch < cr ? ch : cr;
        i = j;
    }
    return match;
}

double tn_bleu4_chars(const char *pred, const char *label) {
    int c, r;
    unsigned *h = code_points(pred, &c), *ref = code_points(label, &r);
    gram *buf = tn_xmalloc(((size_t)c + r + 1) * sizeof *buf);
    double logsum = 0, score = 0;
    long num[5];
    for (int n = 1; n <= 4; n++) num[n] = clipped(h, c, ref, r, n, buf);
    if (num[1] > 0) {
        int zeros = 0;
        for (int n = 1; n <= 4; n++) {
            long den = c - n + 1 > 1 ? c - n + 1 : 1;
            double p = num[n] ? (double)num[n] / (double)den : 1.0 / (ldexp(1.0, ++zeros) * (double)den);
            logsum += 0.25 * log(p);
        }
        double bp = c > r ? 1.0 : c == 0 ? 0.0 : exp(1.0 - (double)r / c);
        score = bp * exp(logsum);
    }
    free(h), free(ref), free(buf);
    return score;
}

/* ---------------------------------------------------------------- words */

static int is_space(unsigned cp) {
    return cp == ' ' || (cp >= 0x09 && cp <= 0x0D) || cp == 0x1C || cp == 0x1D || cp == 0x1E || cp == 0x1F ||
           cp == 0x85 || cp == 0xA0 || cp == 0x1680 || (cp >= 0x2000 && cp <= 0x200A) || cp == 0x2028 ||
           cp == 0x2029 || cp == 0x202F || cp == 0x205F || cp == 0x3000;
}
static int is_alnum(unsigned cp) { return (cp >= '0' && cp <= '9') || ((cp | 32) >= 'a' && (cp | 32) <= 'z'); }
static int ends_sentence(unsigned cp) { return cp == 0x3002 || cp == 0xFF01 || cp == 0xFF1F || cp == '!' || cp == '?'; }

int tn_nlg_words(const char *text, char ***words, unsigned char **sentence_end) {
    size_t n = strlen(text), at = 0, len;
    char **w = tn_xmalloc((n + 1) * sizeof *w);
    unsigned char *end = tn_xcalloc(n + 1, 1);
    int k = 0;
    const unsigned char *s = (const unsigned char *)text;
    while (at < n) {
        size_t start = at;
        unsigned cp = next_cp(s + at, n - at, &len);
        at += len;
        if (is_space(cp)) {
            if (cp == '\n' && k) end[k - 1] = 1;
            continue;
        }
        if (is_alnum(cp)) {
            while (at < n && is_alnum(s[at])) at++;
            if (at + 1 < n && s[at] == '.' && s[at + 1] >= '0' && s[at + 1] <= '9') {
                at++;
                while (at < n && s[at] >= '0' && s[at] <= '9') at++;
            }
            if (at < n && s[at] == '%') at++;
        }
        w[k] = tn_xmalloc(at - start + 1);
        memcpy(w[k], text + start, at - start);
        w[k][at - start] = '\0';
        if (ends_sentence(cp)) end[k] = 1;
        k++;
    }
    *words = w, *sentence_end = end;
    return k;
}

/* ---------------------------------------------------------------- ROUGE */

static int str_cmp(const void *a, const void *b) { return strcmp(*(char *const *)a, *(char *const *)b); }

typedef struct {
    int n, *id;                /* word ids */
    unsigned char *end;
} text_ids;

/* ids of the words of both texts: equal words, equal ids; returns the number of distinct words */
static int intern(char **a, int na, char **b, int nb, int *ida, int *idb) {
    char **all = tn_xmalloc(((size_t)na + nb + 1) * sizeof *all);
    memcpy(all, a, (size_t)na * sizeof *all), memcpy(all + na, b, (size_t)nb * sizeof *all);
    qsort(all, (size_t)(na + nb), sizeof *all, str_cmp);
    int u = 0;
    for (int i = 0; i < na + nb; i++)
        if (i == 0 || strcmp(all[i], all[u - 1])) all[u++] = all[i];
    for (int i = 0; i < na; i++) ida[i] = (int)((char **)bsearch(&a[i], all, (size_t)u, sizeof *all, str_cmp) - all);
    for (int i = 0; i < nb; i++) idb[i] = (int)((char **)bsearch(&b[i], all, (size_t)u, sizeof *all, str_cmp) - all);
    free(all);
    return u;
}

static int ngram_n;
static int ngram_cmp(const void *pa, const void *pb) {
    const int *a = *(const int *const *)pa, *b = *(const int *const *)pb;
    for (int i = 0; i < ngram_n; i++)
        if (a[i] != b[i]) return a[i] < b[i] ? -1 : 1;
    return 0;
}

/* distinct n-grams of x (pointers into x, sorted); returns their number */
static int distinct(const int *x, int len, int n, const int **out) {
    int k = 0;
    for (int i = 0; i + n <= len; i++) out[k++] = x + i;
    ngram_n = n;
    qsort(out, (size_t)k, sizeof *out, ngram_cmp);
    int u = 0;
    for (int i = 0; i < k; i++)
        if (i == 0 || ngram_cmp(&out[i], &out[u - 1])) out[u++] = out[i];
    return u;
}

static double f_score(double overlap, double n_hyp, double n_ref) {
    double p = n_hyp ? overlap / n_hyp : 0.0, r = n_ref ? overlap / n_ref : 0.0;
    return 2.0 * ((p * r) / (p + r + 1e-8));
}

static double rouge_n(const text_ids *h, const text_ids *r, int n) {
    const int **gh = tn_xmalloc(((size_t)h->n + 1) * sizeof *gh), **gr = tn_xmalloc(((size_t)r->n + 1) * sizeof *gr);
    int uh = distinct(h->id, h->n, n, gh), ur = distinct(r->id, r->n, n, gr), overlap = 0;
    ngram_n = n;
    for (int i = 0, j = 0; i < uh && j < ur;) { /* both sorted: a merge */
        int c = ngram_cmp(&gh[i], &gr[j]);
        if (c == 0) overlap++, i++, j++;
        else if (c < 0) i++;
        else j++;
    }
    free(gh), free(gr);
    return f_score(overlap, uh, ur);
}

/* Marks in seen[] the words of the LCS of ref x[0..nx) and hypothesis y[0..ny) as rouge's _recon_lcs rebuilds it. */
static void lcs_words(const int *x, int nx, const int *y, int ny, unsigned char *seen) {
    size_t w = (size_t)ny + 1;
    int *t = tn_xcalloc(((size_t)nx + 1) * w, sizeof *t);
    for (int i = 1; i <= nx; i++)
        for (int j = 1; j <= ny; j++)
            t[i * w + j] = x[i - 1] == y[j - 1] ? t[(i - 1) * w + j - 1] + 1
                                                : (t[(i - 1) * w + j] > t[i * w + j - 1] ? t[(i - 1) * w + j] : t[i * w + j - 1]);
    for (int i = nx, j = ny; i > 0 && j > 0;) {
        if (x[i - 1] == y[j - 1]) seen[x[i - 1]] = 1, i--, j--;
        else if (t[(i - 1) * w + j] > t[i * w + j - 1]) i--;
        else j--;
    }
    free(t);
}

static int count_distinct(const text_ids *t, int vocab) {
    unsigned char *m = tn_xcalloc((size_t)vocab + 1, 1);
    int k = 0;
    for (int i = 0; i < t->n; i++) k += !m[t->id[i]], m[t->id[i]] = 1;
    free(m);
    return k;
}

static double rouge_l(const text_ids *h, const text_ids *r, int vocab) {
    unsigned char *seen = tn_xcalloc((size_t)vocab + 1, 1);
    for (int r0 = 0; r0 < r->n;) {
        int r1 = r0;
        while (r1 < r->n && !r->end[r1]) r1++;
        r1 = r1 < r->n ? r1 + 1 : r1;
        for (int h0 = 0; h0 < h->n;) {
            int h1 = h0;
            while (h1 < h->n && !h->end[h1]) h1++;
            h1 = h1 < h->n ? h1 + 1 : h1;
            lcs_words(r->id + r0, r1 - r0, h->id + h0, h1 - h0, seen);
            h0 = h1;
        }
        r0 = r1;
    }
    int llcs = 0;
    for (int i = 0; i < vocab; i++) llcs += seen[i];
    free(seen);
    double m = count_distinct(r, vocab), n = count_distinct(h, vocab);
    double p = llcs / n, rr = llcs / m;
    return 2.0 * ((p * rr) / (p + rr + 1e-8));
}

void tn_rouge_words(const char *pred, const char *label, double *r1, double *r2, double *rl) {
    char **wh, **wr;
    unsigned char *eh, *er;
    int nh = tn_nlg_words(pred, &wh, &eh), nr = tn_nlg_words(label, &wr, &er);
    *r1 = *r2 = *rl = 0;
    if (nh && nr) {
        text_ids h = {nh, tn_xmalloc((size_t)nh * sizeof(int)), eh}, r = {nr, tn_xmalloc((size_t)nr * sizeof(int)), er};
        int vocab = intern(wh, nh, wr, nr, h.id, r.id);
        *r1 = rouge_n(&h, &r, 1), *r2 = rouge_n(&h, &r, 2), *rl = rouge_l(&h, &r, vocab);
        free(h.id), free(r.id);
    }
    for (int i = 0; i < nh; i++) free(wh[i]);
    for (int i = 0; i < nr; i++) free(wr[i]);
    free(wh), free(wr), free(eh), free(er);
}

void tn_nlg_score(const char *pred, const char *label, tn_nlg_scores *out) {
    double r1, r2, rl;
    tn_rouge_words(pred, label, &r1, &r2, &rl);
    out->rouge1 = tn_py_round(r1 * 100, 4);
    out->rouge2 = tn_py_round(r2 * 100, 4);
    out->rougel = tn_py_round(rl * 100, 4);
    out->bleu4 = tn_py_round(tn_bleu4_chars(pred, label) * 100, 4);
}
