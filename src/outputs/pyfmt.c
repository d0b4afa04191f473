/* pyfmt.c -- see pyfmt.h. */
#include "outputs/pyfmt.h"

#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static void sb_reserve(tn_strbuf *b, size_t extra) {
    if (b->n + extra + 1 <= b->cap) return;
    size_t cap = b->cap ? b->cap : 256;
    while (cap < b->n + extra + 1) cap *= 2;
    b->s = tn_xrealloc(b->s, cap);
    b->cap = cap;
}

void tn_sb_puts(tn_strbuf *b, const char *s) {
    size_t k = strlen(s);
    sb_reserve(b, k);
    memcpy(b->s + b->n, s, k + 1);
    b->n += k;
}

void tn_sb_putn(tn_strbuf *b, const char *s, size_t n) {
    sb_reserve(b, n);
    memcpy(b->s + b->n, s, n);
    b->n += n;
    b->s[b->n] = 0;
}

void tn_sb_printf(tn_strbuf *b, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    int k = vsnprintf(NULL, 0, fmt, ap);
    va_end(ap);
    if (k < 0) tn_die("tn_sb_printf: bad format '%s'", fmt);
    sb_reserve(b, (size_t)k);
    va_start(ap, fmt);
    vsnprintf(b->s + b->n, (size_t)k + 1, fmt, ap);
    va_end(ap);
    b->n += (size_t)k;
}

void tn_sb_free(tn_strbuf *b) {
    free(b->s);
    b->s = NULL;
    b->n = b->cap = 0;
}

/* Does M * 10^q read back as v? */
static int round_trips(unsigned long long m, int q, double v) {
    char buf[48];
    snprintf(buf, sizeof buf, "%llue%d", m, q);
    return strtod(buf, NULL) == v;
}

/* Shortest decimal digits that read back as v (> 0, finite), choosing the one closest to v among equally
 * short ones, as Python's repr (David Gay's mode 0) does: v = 0.DIG * 10^decpt, DIG without trailing zeros.
 * For each precision p the correctly rounded p-digit value is tried first; its neighbours are tried too
 * because next to a power of two the round-trip interval is lopsided and only a neighbour may fit. */
static void shortest_digits(double v, char *dig, int *decpt) {
    for (int p = 1; p <= 17; p++) {
        char buf[48];
        snprintf(buf, sizeof buf, "%.*e", p - 1, v);
        unsigned long long m = 0;
        const char *c = buf;
        for (; *c && *c != 'e'; c++)
            if (*c >= '0' && *c <= '9') m = m * 10 + (unsigned long long)(*c - '0');
        int q = atoi(c + 1) - (p - 1);
        unsigned long long cand[3] = {m, m - 1, m + 1};
        for (int i = 0; i < 3; i++) {
            if (cand[i] == 0 || !round_trips(cand[i], q, v)) continue;
            int len = snprintf(dig, 24, "%llu", cand[i]);
            *decpt = len + q;
            while (len > 1 && dig[len - 1] == '0') dig[--len] = 0;
            return;
        }
    }
    tn_die("tn_py_float: no 17-digit representation of %a", v); /* impossible for a finite double */
}

void tn_py_float(char *out, double v) {
    if (isnan(v)) {
        strcpy(out, "NaN");
        return;
    }
    if (isinf(v)) {
        strcpy(out, v > 0 ? "Infinity" : "-Infinity");
        return;
    }
    char *o = out;
    if (signbit(v)) *o++ = '-';
    v = fabs(v);
    if (v == 0) {
        strcpy(o, "0.0");
        return;
    }
    char dig[24];
    int decpt;
    shortest_digits(v, dig, &decpt);
    int len = (int)strlen(dig);
    if (decpt <= -4 || decpt > 16) { /* Python's switch to exponent notation for repr */
        *o++ = dig[0];
        if (len > 1) {
            *o++ = '.';
            memcpy(o, dig + 1, (size_t)len - 1);
            o += len - 1;
        }
        int e = decpt - 1;
        sprintf(o, "e%c%02d", e < 0 ? '-' : '+', abs(e));
    } else if (decpt <= 0) {
        *o++ = '0';
        *o++ = '.';
        for (int i = 0; i < -decpt; i++) *o++ = '0';
        strcpy(o, dig);
    } else if (decpt >= len) {
        memcpy(o, dig, (size_t)len);
        o += len;
        for (int i = len; i < decpt; i++) *o++ = '0';
        strcpy(o, ".0");
    } else {
        memcpy(o, dig, (size_t)decpt);
        o += decpt;
        *o++ = '.';
        strcpy(o, dig + decpt);
    }
}

void tn_sb_py_float(tn_strbuf *b, double v) {
    char buf[TN_PY_FLOAT_MAX];
    tn_py_float(buf, v);
    tn_sb_puts(b, buf);
}

double tn_py_round(double v, int ndigits) {
    if (!isfinite(v) || fabs(v) >= 1e17) return v; /* no fractional digits left to round */
    if (ndigits < 0) ndigits = 0;
    if (ndigits > 20) ndigits = 20;
    char buf[64]; /* glibc's %f is exact and rounds ties to even, like Python's dtoa mode 3 */
    snprintf(buf, sizeof buf, "%.*f", ndigits, v);
    return strtod(buf, NULL);
}

void tn_py_timedelta(char *out, double seconds) {
    long long s = 0;
    if (isfinite(seconds) && seconds > 0) s = seconds > 8.6e13 ? 86400000000000LL : (long long)seconds;
    long long days = s / 86400, r = s % 86400;
    int h = (int)(r / 3600), m = (int)(r % 3600 / 60), sec = (int)(r % 60);
    if (days)
        snprintf(out, 48, "%lld day%s, %d:%02d:%02d", days, days == 1 ? "" : "s", h, m, sec);
    else
        snprintf(out, 48, "%d:%02d:%02d", h, m, sec);
}
