/* lf_json.c -- the JSON LLaMA-Factory's data goes through, as Python's json module reads and writes it:
 * number lexemes are kept (json.dumps prints 1.0 and 1 differently, and floats by repr), objects keep
 * member order and dict semantics for duplicate keys, errors carry the byte offset. Hostile input
 * (deep nesting, invalid UTF-8, lone surrogates, truncation) is refused, never crashes. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/core.h"
#include "data/lf_internal.h"

/* ---- arena ---- */
struct lf_arena_block {
    lf_arena_block *next;
    size_t used, cap;
    max_align_t data[];
};

void *lf_alloc(lf_arena *a, size_t n) {
    n = (n + 7) & ~(size_t)7;
    lf_arena_block *b = a->head;
    if (!b || b->cap - b->used < n) {
        size_t cap = n > (1u << 16) ? n : (1u << 16);
        b = tn_xmalloc(sizeof *b + cap);
        b->next = a->head, b->used = 0, b->cap = cap;
        a->head = b;
    }
    void *p = (char *)b->data + b->used;
    b->used += n;
    memset(p, 0, n);
    return p;
}

char *lf_strndup(lf_arena *a, const char *s, size_t n) {
    char *p = lf_alloc(a, n + 1);
    if (n) memcpy(p, s, n);
    p[n] = '\0';
    return p;
}

void lf_arena_free(lf_arena *a) {
    for (lf_arena_block *b = a->head, *nx; b; b = nx) {
        nx = b->next;
        free(b);
    }
    a->head = NULL;
}

/* ---- buffers ---- */
void lf_buf_put(lf_buf *b, const char *s, size_t n) {
    if (b->n + n + 1 > b->cap) {
        size_t c = b->cap ? b->cap : 256;
        while (c < b->n + n + 1) c *= 2;
        b->p = tn_xrealloc(b->p, c);
        b->cap = c;
    }
    if (n) memcpy(b->p + b->n, s, n);
    b->n += n;
    b->p[b->n] = '\0';
}
void lf_buf_puts(lf_buf *b, const char *s) { lf_buf_put(b, s, strlen(s)); }
void lf_buf_putc(lf_buf *b, char c) { lf_buf_put(b, &c, 1); }

/* ---- parser ---- */
#define LJ_MAX_DEPTH 500

typedef struct {
    lf_arena *a;
    const char *t;
    size_t n, i;
    lj_error *err;
    lf_buf sb;             /* string decode scratch */
} lj_parser;

static lj_val *fail(lj_parser *p, size_t off, const char *msg) {
    if (p->err->msg[0] == '\0') {
        p->err->off = off;
        snprintf(p->err->msg, sizeof p->err->msg, "%s", msg);
    }
    return NULL;
}

static void skip_ws(lj_parser *p) {
    while (p->i < p->n) {
        char c = p->t[p->i];
        if (c != ' ' && c != '\t' && c != '\n' && c != '\r') break;
        p->i++;
    }
}

/* Length of the well-formed UTF-8 sequence at s (strict: no overlongs, surrogates or > U+10FFFF); 0 if bad. */
static size_t utf8_len(const unsigned char *s, size_t n) {
    unsigned c = s[0];
    if (c < 0x80) return 1;
    if (c >= 0xC2 && c <= 0xDF) return n >= 2 && (s[1] & 0xC0) == 0x80 ? 2 : 0;
    if (c >= 0xE0 && c <= 0xEF) {
        if (n < 3 || (s[1] & 0xC0) != 0x80 || (s[2] & 0xC0) != 0x80) return 0;
        if (c == 0xE0 && s[1] < 0xA0) return 0;
        if (c == 0xED && s[1] >= 0xA0) return 0;
        return 3;
    }
    if (c >= 0xF0 && c <= 0xF4) {
        if (n < 4 || (s[1] & 0xC0) != 0x80 || (s[2] & 0xC0) != 0x80 || (s[3] & 0xC0) != 0x80) return 0;
        if (c == 0xF0 && s[1] < 0x90) return 0;
        if (c == 0xF4 && s[1] >= 0x90) return 0;
        return 4;
    }
    return 0;
}

int lj_utf8_check(const char *s, size_t n, size_t *bad) {
    const unsigned char *u = (const unsigned char *)s;
    for (size_t i = 0; i < n;) {
        if (u[i] < 0x80) {
            i++;
            continue;
        }
        size_t k = utf8_len(u + i, n - i);
        if (!k) {
            *bad = i;
            return -1;
        }
        i += k;
    }
    return 0;
}

static void put_utf8(lf_buf *b, uint32_t cp) {
    char u[4];
    size_t k;
    if (cp < 0x80) u[0] = (char)cp, k = 1;
    else if (cp < 0x800) u[0] = (char)(0xC0 | cp >> 6), u[1] = (char)(0x80 | (cp & 0x3F)), k = 2;
    else if (cp < 0x10000)
        u[0] = (char)(0xE0 | cp >> 12), u[1] = (char)(0x80 | ((cp >> 6) & 0x3F)), u[2] = (char)(0x80 | (cp & 0x3F)), k = 3;
    else
        u[0] = (char)(0xF0 | cp >> 18), u[1] = (char)(0x80 | ((cp >> 12) & 0x3F)), u[2] = (char)(0x80 | ((cp >> 6) & 0x3F)),
        u[3] = (char)(0x80 | (cp & 0x3F)), k = 4;
    lf_buf_put(b, u, k);
}

static int hex4(const char *s, size_t avail, uint32_t *out) {
    if (avail < 4) return -1;
    uint32_t v = 0;
    for (int k = 0; k < 4; k++) {
        char c = s[k];
        v <<= 4;
        if (c >= '0' && c <= '9') v |= (uint32_t)(c - '0');
        else if (c >= 'a' && c <= 'f') v |= (uint32_t)(c - 'a' + 10);
        else if (c >= 'A' && c <= 'F') v |= (uint32_t)(c - 'A' + 10);
        else return -1;
    }
    *out = v;
    return 0;
}

/* p->i at the opening quote; returns the decoded string in the arena. */
static const char *parse_string(lj_parser *p, uint32_t *len) {
    size_t start = p->i++;
    p->sb.n = 0;
    size_t run = p->i;  /* start of the pending unescaped run */
    for (;;) {
        if (p->i >= p->n) return (const char *)fail(p, start, "unterminated string");
        unsigned char c = (unsigned char)p->t[p->i];
        if (c == '"') break;
        if (c < 0x20) return (const char *)fail(p, p->i, "control character inside a string (escape it)");
        if (c >= 0x80) {
            size_t k = utf8_len((const unsigned char *)p->t + p->i, p->n - p->i);
            if (!k) return (const char *)fail(p, p->i, "invalid UTF-8 byte sequence");
            p->i += k;
            continue;
        }
        if (c != '\\') {
            p->i++;
            continue;
        }
        lf_buf_put(&p->sb, p->t + run, p->i - run);
        size_t esc = p->i++;
        if (p->i >= p->n) return (const char *)fail(p, esc, "unterminated string");
        char e = p->t[p->i++];
        switch (e) {
        case '"': lf_buf_putc(&p->sb, '"'); break;
        case '\\': lf_buf_putc(&p->sb, '\\'); break;
        case '/': lf_buf_putc(&p->sb, '/'); break;
        case 'b': lf_buf_putc(&p->sb, '\b'); break;
        case 'f': lf_buf_putc(&p->sb, '\f'); break;
        case 'n': lf_buf_putc(&p->sb, '\n'); break;
        case 'r': lf_buf_putc(&p->sb, '\r'); break;
        case 't': lf_buf_putc(&p->sb, '\t'); break;
        case 'u': {
            uint32_t cp, lo;
            if (hex4(p->t + p->i, p->n - p->i, &cp) != 0) return (const char *)fail(p, esc, "invalid \\u escape");
            p->i += 4;
            if (cp >= 0xD800 && cp <= 0xDBFF) {
                if (p->i + 6 <= p->n && p->t[p->i] == '\\' && p->t[p->i + 1] == 'u' &&
                    hex4(p->t + p->i + 2, p->n - p->i - 2, &lo) == 0 && lo >= 0xDC00 && lo <= 0xDFFF) {
                    cp = 0x10000 + ((cp - 0xD800) << 10) + (lo - 0xDC00);
                    p->i += 6;
                } else {
                    return (const char *)fail(p, esc, "lone UTF-16 surrogate in \\u escape (not valid text)");
                }
            } else if (cp >= 0xDC00 && cp <= 0xDFFF) {
                return (const char *)fail(p, esc, "lone UTF-16 surrogate in \\u escape (not valid text)");
            }
            put_utf8(&p->sb, cp);
            break;
        }
        default: return (const char *)fail(p, esc, "invalid escape in string");
        }
        run = p->i;
    }
    const char *out;
    if (p->sb.n == 0) {  /* no escapes: copy the run straight from the source */
        *len = (uint32_t)(p->i - run);
        out = lf_strndup(p->a, p->t + run, p->i - run);
    } else {
        lf_buf_put(&p->sb, p->t + run, p->i - run);
        *len = (uint32_t)p->sb.n;
        out = lf_strndup(p->a, p->sb.p, p->sb.n);
    }
    if ((size_t)*len != (p->sb.n ? p->sb.n : p->i - run)) return (const char *)fail(p, start, "string longer than 4 GiB");
    p->i++;  /* closing quote */
    return out;
}

static int lit(lj_parser *p, const char *w) {
    size_t k = strlen(w);
    if (p->n - p->i >= k && memcmp(p->t + p->i, w, k) == 0) {
        p->i += k;
        return 1;
    }
    return 0;
}

static int is_digit(char c) { return c >= '0' && c <= '9'; }

static lj_val *parse_value(lj_parser *p, int depth);

static lj_val *parse_container(lj_parser *p, int depth, int obj) {
    lj_val *v = lf_alloc(p->a, sizeof *v);
    v->type = obj ? LJ_OBJ : LJ_ARR;
    v->off = p->i++;
    if (depth >= LJ_MAX_DEPTH) return fail(p, v->off, "nesting deeper than 500 levels");
    lj_val **tail = &v->child;
    skip_ws(p);
    if (p->i < p->n && p->t[p->i] == (obj ? '}' : ']')) {
        p->i++;
        v->end = p->i;
        return v;
    }
    for (;;) {
        const char *key = NULL;
        uint32_t klen = 0;
        if (obj) {
            skip_ws(p);
            if (p->i >= p->n || p->t[p->i] != '"')
                return fail(p, p->i, p->i >= p->n ? "unexpected end of text inside an object" : "expected a \"key\" in object");
            if (!(key = parse_string(p, &klen))) return NULL;
            skip_ws(p);
            if (p->i >= p->n || p->t[p->i] != ':') return fail(p, p->i, "expected ':' after an object key");
            p->i++;
        }
        lj_val *item = parse_value(p, depth + 1);
        if (!item) return NULL;
        item->key = key, item->klen = klen;
        *tail = item, tail = &item->next;
        if (v->n == UINT32_MAX) return fail(p, item->off, "too many items");
        v->n++;
        skip_ws(p);
        if (p->i >= p->n) return fail(p, p->i, obj ? "unexpected end of text inside an object" : "unexpected end of text inside an array");
        char c = p->t[p->i];
        if (c == ',') {
            p->i++;
            continue;
        }
        if (c == (obj ? '}' : ']')) {
            p->i++;
            v->end = p->i;
            return v;
        }
        return fail(p, p->i, obj ? "expected ',' or '}' after an object member" : "expected ',' or ']' after an array item");
    }
}

static lj_val *parse_value(lj_parser *p, int depth) {
    skip_ws(p);
    if (p->i >= p->n) return fail(p, p->i, "expected a value, got the end of the text");
    char c = p->t[p->i];
    if (c == '{' || c == '[') return parse_container(p, depth, c == '{');
    lj_val *v = lf_alloc(p->a, sizeof *v);
    v->off = p->i;
    if (c == '"') {
        v->type = LJ_STR;
        if (!(v->s = parse_string(p, &v->n))) return NULL;
    } else if (lit(p, "null")) {
        v->type = LJ_NULL;
    } else if (lit(p, "true")) {
        v->type = LJ_TRUE;
    } else if (lit(p, "false")) {
        v->type = LJ_FALSE;
    } else if (lit(p, "NaN") || lit(p, "Infinity") || lit(p, "-Infinity")) {  /* Python's json accepts these */
        v->type = LJ_NUM;
    } else if (c == '-' || is_digit(c)) {
        size_t i = p->i;
        if (p->t[i] == '-') i++;
        if (i >= p->n || !is_digit(p->t[i])) return fail(p, p->i, "invalid number");
        if (p->t[i] == '0') i++;
        else
            while (i < p->n && is_digit(p->t[i])) i++;
        if (i + 1 < p->n && p->t[i] == '.' && is_digit(p->t[i + 1])) {
            i++;
            while (i < p->n && is_digit(p->t[i])) i++;
        }
        if (i < p->n && (p->t[i] == 'e' || p->t[i] == 'E')) {
            size_t j = i + 1;
            if (j < p->n && (p->t[j] == '+' || p->t[j] == '-')) j++;
            if (j < p->n && is_digit(p->t[j])) {
                while (j < p->n && is_digit(p->t[j])) j++;
                i = j;
            }
        }
        v->type = LJ_NUM;
        p->i = i;
    } else {
        return fail(p, p->i, "expected a value (string, number, object, array, true, false or null)");
    }
    if (v->type == LJ_NUM) {
        v->s = p->t + v->off;
        v->n = (uint32_t)(p->i - v->off);
    }
    v->end = p->i;
    return v;
}

lj_val *lj_parse(lf_arena *a, const char *text, size_t n, lj_error *err) {
    lj_parser p = {a, text, n, 0, err, {0}};
    err->off = 0, err->msg[0] = '\0';
    lj_val *v = parse_value(&p, 0);
    if (v) {
        skip_ws(&p);
        if (p.i < n) v = fail(&p, p.i, "extra data after the JSON value");
    }
    free(p.sb.p);
    return v;
}

const lj_val *lj_get(const lj_val *obj, const char *key) {
    if (!obj || obj->type != LJ_OBJ || !key) return NULL;
    size_t k = strlen(key);
    const lj_val *hit = NULL;
    for (const lj_val *m = obj->child; m; m = m->next)
        if (m->klen == k && memcmp(m->key, key, k) == 0) hit = m;
    return hit;
}

int lj_streq(const lj_val *v, const char *s) {
    return v && v->type == LJ_STR && v->n == strlen(s) && memcmp(v->s, s, v->n) == 0;
}

const char *lj_type_name(int type) {
    static const char *const names[] = {"null", "false", "true", "number", "string", "array", "object"};
    return type >= 0 && type <= LJ_OBJ ? names[type] : "?";
}

void lj_linecol(const char *text, size_t off, size_t *line, size_t *col) {
    size_t l = 1, c = 1;
    for (size_t i = 0; i < off; i++) {
        if (text[i] == '\n') l++, c = 1;
        else if (((unsigned char)text[i] & 0xC0) != 0x80) c++;  /* columns count characters */
    }
    *line = l, *col = c;
}

/* ---- Python's json.dumps / str() ---- */
static int is_float_lexeme(const lj_val *v) {
    for (uint32_t i = 0; i < v->n; i++)
        if (v->s[i] == '.' || v->s[i] == 'e' || v->s[i] == 'E') return 1;
    return 0;
}

/* repr(float) for finite x: shortest round-trip digits, fixed notation for 1e-4 <= |x| < 1e16. */
static void py_float_repr(double x, lf_buf *out) {
    if (x == 0) {
        lf_buf_puts(out, signbit(x) ? "-0.0" : "0.0");
        return;
    }
    char e[40];
    for (int prec = 1; prec <= 17; prec++) {
        snprintf(e, sizeof e, "%.*e", prec - 1, x);
        if (strtod(e, NULL) == x) break;
    }
    const char *s = e;
    if (*s == '-') lf_buf_putc(out, '-'), s++;
    char dig[24];
    int nd = 0;
    for (; *s && *s != 'e'; s++)
        if (*s != '.') dig[nd++] = *s;
    while (nd > 1 && dig[nd - 1] == '0') nd--;
    int decpt = atoi(s + 1) + 1;  /* value = 0.DIGITS x 10^decpt */
    if (decpt <= -4 || decpt > 16) {
        lf_buf_putc(out, dig[0]);
        if (nd > 1) lf_buf_putc(out, '.'), lf_buf_put(out, dig + 1, (size_t)nd - 1);
        char ex[16];
        int x10 = decpt - 1;
        snprintf(ex, sizeof ex, "e%c%02d", x10 < 0 ? '-' : '+', x10 < 0 ? -x10 : x10);
        lf_buf_puts(out, ex);
    } else if (decpt <= 0) {
        lf_buf_puts(out, "0.");
        for (int k = 0; k < -decpt; k++) lf_buf_putc(out, '0');
        lf_buf_put(out, dig, (size_t)nd);
    } else if (decpt >= nd) {
        lf_buf_put(out, dig, (size_t)nd);
        for (int k = nd; k < decpt; k++) lf_buf_putc(out, '0');
        lf_buf_puts(out, ".0");
    } else {
        lf_buf_put(out, dig, (size_t)decpt);
        lf_buf_putc(out, '.');
        lf_buf_put(out, dig + decpt, (size_t)(nd - decpt));
    }
}

/* json: NaN/Infinity spelled as JSON does; str(): nan/inf as Python does. */
static void put_number(const lj_val *v, int as_json, lf_buf *out) {
    if (v->n == 3 && memcmp(v->s, "NaN", 3) == 0) {
        lf_buf_puts(out, as_json ? "NaN" : "nan");
        return;
    }
    int neg = v->s[0] == '-';
    if (v->s[neg] == 'I' || !is_float_lexeme(v)) {
        if (v->s[neg] == 'I') {
            lf_buf_puts(out, as_json ? (neg ? "-Infinity" : "Infinity") : (neg ? "-inf" : "inf"));
        } else if (v->n == 2 && memcmp(v->s, "-0", 2) == 0) {
            lf_buf_putc(out, '0');  /* int("-0") == 0 */
        } else {
            lf_buf_put(out, v->s, v->n);
        }
        return;
    }
    char tmp[64];
    const char *lex = v->s;
    char *heap = NULL;
    if (v->n < sizeof tmp) {
        memcpy(tmp, v->s, v->n);
        tmp[v->n] = '\0';
        lex = tmp;
    } else {
        heap = tn_xmalloc(v->n + 1);
        memcpy(heap, v->s, v->n);
        heap[v->n] = '\0';
        lex = heap;
    }
    double x = strtod(lex, NULL);
    free(heap);
    if (isinf(x)) lf_buf_puts(out, as_json ? (x < 0 ? "-Infinity" : "Infinity") : (x < 0 ? "-inf" : "inf"));
    else py_float_repr(x, out);
}

static void put_json_string(const char *s, size_t n, lf_buf *out) {
    static const char hex[] = "0123456789abcdef";
    lf_buf_putc(out, '"');
    size_t run = 0;
    for (size_t i = 0; i < n; i++) {
        unsigned char c = (unsigned char)s[i];
        if (c >= 0x20 && c != '"' && c != '\\') continue;
        lf_buf_put(out, s + run, i - run);
        run = i + 1;
        switch (c) {
        case '"': lf_buf_puts(out, "\\\""); break;
        case '\\': lf_buf_puts(out, "\\\\"); break;
        case '\b': lf_buf_puts(out, "\\b"); break;
        case '\f': lf_buf_puts(out, "\\f"); break;
        case '\n': lf_buf_puts(out, "\\n"); break;
        case '\r': lf_buf_puts(out, "\\r"); break;
        case '\t': lf_buf_puts(out, "\\t"); break;
        default: {
            char u[7] = {'\\', 'u', '0', '0', hex[c >> 4], hex[c & 15], 0};
            lf_buf_puts(out, u);
        }
        }
    }
    lf_buf_put(out, s + run, n - run);
    lf_buf_putc(out, '"');
}

static void newline_indent(int indent, int level, lf_buf *out) {
    lf_buf_putc(out, '\n');
    for (int k = 0; k < indent * level; k++) lf_buf_putc(out, ' ');
}

/* dict(pairs): a key keeps the position of its first occurrence and the value of its last. */
static int first_of_key(const lj_val *obj, const lj_val *m) {
    for (const lj_val *o = obj->child; o != m; o = o->next)
        if (o->klen == m->klen && memcmp(o->key, m->key, m->klen) == 0) return 0;
    return 1;
}
static const lj_val *last_of_key(const lj_val *m) {
    const lj_val *hit = m;
    for (const lj_val *o = m->next; o; o = o->next)
        if (o->klen == m->klen && memcmp(o->key, m->key, m->klen) == 0) hit = o;
    return hit;
}

static void dump(const lj_val *v, int indent, int level, lf_buf *out) {
    switch (v->type) {
    case LJ_NULL: lf_buf_puts(out, "null"); return;
    case LJ_TRUE: lf_buf_puts(out, "true"); return;
    case LJ_FALSE: lf_buf_puts(out, "false"); return;
    case LJ_NUM: put_number(v, 1, out); return;
    case LJ_STR: put_json_string(v->s, v->n, out); return;
    default: break;
    }
    int obj = v->type == LJ_OBJ;
    if (!v->child) {
        lf_buf_puts(out, obj ? "{}" : "[]");
        return;
    }
    lf_buf_putc(out, obj ? '{' : '[');
    int first = 1;
    for (const lj_val *m = v->child; m; m = m->next) {
        if (obj && !first_of_key(v, m)) continue;
        if (!first) lf_buf_puts(out, indent >= 0 ? "," : ", ");
        first = 0;
        if (indent >= 0) newline_indent(indent, level + 1, out);
        const lj_val *val = m;
        if (obj) {
            put_json_string(m->key, m->klen, out);
            lf_buf_puts(out, ": ");
            val = last_of_key(m);
        }
        dump(val, indent, level + 1, out);
    }
    if (indent >= 0) newline_indent(indent, level, out);
    lf_buf_putc(out, obj ? '}' : ']');
}

void lj_dump(const lj_val *v, int indent, lf_buf *out) { dump(v, indent, 0, out); }

int lj_pystr(const lj_val *v, lf_buf *out) {
    switch (v->type) {
    case LJ_NULL: lf_buf_puts(out, "None"); return 0;
    case LJ_TRUE: lf_buf_puts(out, "True"); return 0;
    case LJ_FALSE: lf_buf_puts(out, "False"); return 0;
    case LJ_NUM: put_number(v, 0, out); return 0;
    case LJ_STR: lf_buf_put(out, v->s, v->n); return 0;
    default: return -1;
    }
}
