/* pyfmt -- text exactly as Python writes it, so tandem's output files match HF Trainer / LLaMA-Factory byte
 * for byte: float repr as json.dumps emits it, round(x, n), str(timedelta), and a growable string buffer.
 * Owned by src/outputs; the rest of tandem has no need to imitate Python. */
#ifndef TN_PYFMT_H
#define TN_PYFMT_H

#include <stddef.h>

#include "core/core.h"

typedef struct {
    char *s;      /* NUL-terminated; NULL until the first append */
    size_t n, cap;
} tn_strbuf;

void tn_sb_puts(tn_strbuf *b, const char *s);
void tn_sb_putn(tn_strbuf *b, const char *s, size_t n);
void tn_sb_printf(tn_strbuf *b, const char *fmt, ...) TN_PRINTF(2, 3);
void tn_sb_free(tn_strbuf *b);

/* Python's repr(float) as json.dumps writes it (shortest round-trip digits; "1.0", "0.0001", "1e-05",
 * "2.0772363998572052e+18", "NaN", "Infinity", "-Infinity"). out must hold TN_PY_FLOAT_MAX bytes. */
#define TN_PY_FLOAT_MAX 32
void tn_py_float(char *out, double v);
void tn_sb_py_float(tn_strbuf *b, double v);

/* Python's round(v, ndigits) for a float: correctly rounded to ndigits decimals (ties to even on the exact
 * binary value), returned as the nearest double. */
double tn_py_round(double v, int ndigits);

/* str(datetime.timedelta(seconds=int(seconds))): "0:00:32", "6:01:13", "1 day, 2:03:04". Negative or
 * non-finite inputs are clamped to 0 (elapsed/remaining times are never negative). out: 48 bytes. */
void tn_py_timedelta(char *out, double seconds);

#endif
