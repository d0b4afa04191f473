/* sampling.c -- HF's logits processors and the draw (see sampling.h). The top-k threshold is a selection, not a
 * sort (O(V)); only the top-k survivors (or every id, with top_k 0 and top_p < 1) are sorted for top-p. */
#include "model/sampling.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

struct tn_token_sampler {
    int V;
    float *x, *sel;         /* [V] processed scores; selection scratch */
    int *keep;              /* [V] surviving ids */
    uint32_t *mark, stamp;  /* [V] repetition penalty: ids already penalised in this call */
    double *w;              /* [V] weights of the survivors */
    struct scored { float x; int id; } *pairs; /* [V] top-p's sort */
};

tn_sampling tn_sampling_defaults(void) {
    return (tn_sampling){.do_sample = 1, .temperature = 0.95, .top_p = 0.7, .top_k = 50, .repetition_penalty = 1.0,
                         .max_new = 1024};
}

tn_token_sampler *tn_token_sampler_create(int V) {
    tn_token_sampler *s = tn_xcalloc(1, sizeof *s);
    s->V = V;
    s->x = tn_xmalloc((size_t)V * sizeof *s->x), s->sel = tn_xmalloc((size_t)V * sizeof *s->sel);
    s->keep = tn_xmalloc((size_t)V * sizeof *s->keep), s->w = tn_xmalloc((size_t)V * sizeof *s->w);
    s->mark = tn_xcalloc((size_t)V, sizeof *s->mark);
    s->pairs = tn_xmalloc((size_t)V * sizeof *s->pairs);
    return s;
}

void tn_token_sampler_free(tn_token_sampler *s) {
    if (!s) return;
    free(s->x), free(s->sel), free(s->keep), free(s->w), free(s->mark), free(s->pairs);
    free(s);
}

/* k-th largest of a[0..n) (1-based k), a reordered: quickselect with the median of three as pivot */
static float kth_largest(float *a, int n, int k) {
    int lo = 0, hi = n - 1, want = k - 1;
    while (lo < hi) {
        int mid = lo + (hi - lo) / 2;
        float p0 = a[lo], p1 = a[mid], p2 = a[hi];
        float piv = p0 > p1 ? (p1 > p2 ? p1 : (p0 > p2 ? p2 : p0)) : (p0 > p2 ? p0 : (p1 > p2 ? p2 : p1));
        int i = lo, j = hi;
        while (i <= j) { /* descending: [lo, j] >= piv >= [i, hi] */
            while (a[i] > piv) i++;
            while (a[j] < piv) j--;
            if (i <= j) {
                float t = a[i];
                a[i++] = a[j], a[j--] = t;
            }
        }
        if (want <= j) hi = j;
        else if (want >= i) lo = i;
        else return a[want];
    }
    return a[want];
}

static int by_score_asc(const void *pa, const void *pb) {
    const struct scored *a = pa, *b = pb;
    if (a->x != b->x) return a->x < b->x ? -1 : 1;
    return a->id < b->id ? 1 : a->id > b->id ? -1 : 0; /* among equal scores the lower id counts as larger */
}

/* Steps 1-4: s->x holds the processed scores; returns how many ids survive, in s->keep (greedy: the argmax). */
static int process(tn_token_sampler *s, const float *logits, int V, const tn_sampling *sp, const int32_t *seen, int n_seen) {
    memcpy(s->x, logits, (size_t)V * sizeof *s->x);
    if (sp->repetition_penalty != 1.0 && sp->repetition_penalty > 0) {
        float p = (float)sp->repetition_penalty;
        if (++s->stamp == 0) memset(s->mark, 0, (size_t)s->V * sizeof *s->mark), s->stamp = 1;
        for (int i = 0; i < n_seen; i++) {
            int id = seen[i];
            if (id < 0 || id >= V || s->mark[id] == s->stamp) continue;
            s->mark[id] = s->stamp;
            s->x[id] = s->x[id] < 0 ? s->x[id] * p : s->x[id] / p;
        }
    }
    if (!sp->do_sample || sp->temperature <= 0) {
        int best = 0;
        for (int v = 1; v < V; v++) best = s->x[v] > s->x[best] ? v : best;
        s->keep[0] = best;
        return 1;
    }
    if (sp->temperature != 1.0) {
        float t = (float)sp->temperature;
        for (int v = 0; v < V; v++) s->x[v] /= t;
    }
    int n = 0;
    if (sp->top_k > 0 && sp->top_k < V) {
        memcpy(s->sel, s->x, (size_t)V * sizeof *s->sel);
        float thr = kth_largest(s->sel, V, sp->top_k);
        for (int v = 0; v < V; v++)
            if (s->x[v] >= thr) s->keep[n++] = v;
    } else {
        for (int v = 0; v < V; v++) s->keep[n++] = v;
    }
    if (sp->top_p < 1.0 && n > 1) {
        for (int i = 0; i < n; i++) s->pairs[i] = (struct scored){s->x[s->keep[i]], s->keep[i]};
        qsort(s->pairs, (size_t)n, sizeof *s->pairs, by_score_asc);
        for (int i = 0; i < n; i++) s->keep[i] = s->pairs[i].id;
        double mx = s->x[s->keep[n - 1]], sum = 0, cum = 0;
        for (int i = 0; i < n; i++) sum += s->w[i] = exp((double)s->x[s->keep[i]] - mx);
        int first = 0; /* ascending: drop while the cumulative probability is <= 1 - top_p, never the last */
        while (first < n - 1 && (cum += s->w[first] / sum) <= 1.0 - sp->top_p) first++;
        memmove(s->keep, s->keep + first, (size_t)(n - first) * sizeof *s->keep);
        n -= first;
    }
    return n;
}

/* weights of the survivors (softmax numerators); returns their sum */
static double weights(tn_token_sampler *s, int n) {
    float mx = s->x[s->keep[0]];
    for (int i = 1; i < n; i++) mx = s->x[s->keep[i]] > mx ? s->x[s->keep[i]] : mx;
    double sum = 0;
    for (int i = 0; i < n; i++) sum += s->w[i] = exp((double)s->x[s->keep[i]] - mx);
    return sum;
}

static int vocab_of(const tn_sampling *sp, int V) { return sp->n_vocab > 0 && sp->n_vocab < V ? sp->n_vocab : V; }

int32_t tn_sample(tn_token_sampler *s, const float *logits, int V, const tn_sampling *sp, const int32_t *seen, int n_seen,
                  tn_rng *rng) {
    V = vocab_of(sp, V);
    int n = process(s, logits, V, sp, seen, n_seen);
    if (n == 1) return s->keep[0];
    double sum = weights(s, n), u = tn_rng_uniform(rng) * sum, acc = 0;
    for (int i = 0; i < n; i++)
        if ((acc += s->w[i]) > u) return s->keep[i];
    return s->keep[n - 1];
}

void tn_sampling_probs(tn_token_sampler *s, const float *logits, int V, const tn_sampling *sp, const int32_t *seen,
                       int n_seen, double *probs) {
    int Vs = vocab_of(sp, V);
    memset(probs, 0, (size_t)V * sizeof *probs);
    int n = process(s, logits, Vs, sp, seen, n_seen);
    double sum = weights(s, n);
    for (int i = 0; i < n; i++) probs[s->keep[i]] = s->w[i] / sum;
}
