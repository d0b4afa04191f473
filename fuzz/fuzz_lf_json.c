/* fuzz_lf_json -- the JSON reader of the LLaMA-Factory data pipeline (src/data/lf_json.c): lj_parse on
 * the input. Refused: the error offset lies inside the text and has a message. Accepted: the byte
 * spans of the values lie inside the text, lj_dump (compact and indent=2) writes JSON that lj_parse
 * reads back, and dumping that again gives the same text (json.dumps is idempotent on its own output). */
#include "data/lf_internal.h"
#include "fuzz_util.h"

static void check_spans(const lj_val *v, size_t n) {
    FZ_ASSERT(v->off < v->end && v->end <= n);
    uint32_t k = 0;
    for (const lj_val *c = v->child; c; c = c->next, k++) {
        FZ_ASSERT(c->off > v->off && c->end < v->end);
        FZ_ASSERT((v->type == LJ_OBJ) == (c->key != NULL));
        check_spans(c, n);
    }
    if (v->type == LJ_ARR || v->type == LJ_OBJ) FZ_ASSERT(k == v->n);
    if (v->type == LJ_STR) FZ_ASSERT(v->s[v->n] == '\0');
}

static void dump_reparse(const lj_val *v, int indent) {
    lf_buf a = {0}, b = {0};
    lj_dump(v, indent, &a);
    lf_arena ar = {0};
    lj_error err;
    const lj_val *w = lj_parse(&ar, a.p, a.n, &err);
    if (!w) {
        fprintf(stderr, "fuzz: lj_dump wrote JSON lj_parse refuses (%s at %zu): %s\n", err.msg, err.off, a.p);
        abort();
    }
    lj_dump(w, indent, &b);
    if (a.n != b.n || memcmp(a.p, b.p, a.n) != 0) {
        fprintf(stderr, "fuzz: dump(parse(dump(v))) != dump(v):\n%s\n%s\n", a.p, b.p);
        abort();
    }
    lf_arena_free(&ar);
    free(a.p), free(b.p);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    lf_arena a = {0};
    lj_error err;
    const lj_val *v = lj_parse(&a, (const char *)data, size, &err);
    if (!v) {
        FZ_ASSERT(err.msg[0] != '\0' && err.off <= size);
        size_t line, col;
        char *text = fz_cstr(data, size);  /* lj_linecol reads up to the offset */
        lj_linecol(text, err.off, &line, &col);
        FZ_ASSERT(line >= 1 && col >= 1);
        free(text);
    } else {
        check_spans(v, size);
        dump_reparse(v, -1);
        dump_reparse(v, 2);
        lf_buf s = {0};
        FZ_ASSERT((lj_pystr(v, &s) == 0) == (v->type != LJ_ARR && v->type != LJ_OBJ));
        free(s.p);
    }
    lf_arena_free(&a);
    return 0;
}
