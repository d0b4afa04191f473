/* shell_quote.c -- see shell_quote.h. */
#include "core/shell_quote.h"

#include <stdlib.h>
#include <string.h>

#include "core/core.h"

static int plain(const char *s) {
    if (!*s) return 0;
    for (const unsigned char *p = (const unsigned char *)s; *p; p++)
        if (!((*p >= 'a' && *p <= 'z') || (*p >= 'A' && *p <= 'Z') || (*p >= '0' && *p <= '9') || strchr("_@%+=:,./-", *p)))
            return 0;
    return 1;
}

char *tn_sh_quote(const char *s) {
    if (plain(s)) return tn_xstrdup(s);
    size_t quotes = 0;
    for (const char *p = s; *p; p++) quotes += *p == '\'';
    char *out = tn_xmalloc(strlen(s) + 3 * quotes + 3), *o = out;
    *o++ = '\'';
    for (const char *p = s; *p; p++) {
        if (*p == '\'') { /* close, an escaped quote, reopen */
            memcpy(o, "'\\''", 4);
            o += 4;
        } else {
            *o++ = *p;
        }
    }
    *o++ = '\'';
    *o = 0;
    return out;
}

void tn_sh_print_argv(FILE *f, char *const *argv, int n) {
    for (int i = 0; i < n; i++) {
        char *q = tn_sh_quote(argv[i]);
        fprintf(f, "%s%s", i ? " " : "", q);
        free(q);
    }
}
