/* cmd_tokenize.c -- `tandem tokenize TOKENIZER_JSON ...`: encode text to ids or decode ids to text with a
 * Hugging Face tokenizer.json (src/tokenizer), for checking a tokenizer by hand and timing it.
 *
 *   tandem tokenize tok.json [--no-special] [--time] [--text STR | --file PATH]   ids, one line (stdin if no text)
 *   tandem tokenize tok.json --decode [--skip-special] ID...                        the text */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli/commands.h"
#include "core/core.h"
#include "tokenizer/tokenizer.h"

#define TOK_MAX_INPUT ((size_t)1 << 31)

static void usage(FILE *f) {
    fprintf(f, "usage: tandem tokenize TOKENIZER_JSON [--no-special] [--time] [--text STR | --file PATH]\n"
               "       tandem tokenize TOKENIZER_JSON --decode [--skip-special] ID...\n");
}

static char *read_stdin(size_t *len) {
    size_t cap = 1 << 16, n = 0;
    char *buf = tn_xmalloc(cap);
    for (;;) {
        if (n == cap) {
            if (cap >= TOK_MAX_INPUT) {
                free(buf);
                tn_err("tokenize: standard input is larger than %zu bytes", TOK_MAX_INPUT);
                return NULL;
            }
            cap *= 2;
            buf = tn_xrealloc(buf, cap);
        }
        size_t got = fread(buf + n, 1, cap - n, stdin);
        n += got;
        if (got == 0) break;
    }
    if (ferror(stdin)) {
        free(buf);
        tn_err("tokenize: reading standard input failed");
        return NULL;
    }
    *len = n;
    return buf;
}

static int decode(const tn_tokenizer *t, int argc, char **argv, int skip_special) {
    int32_t *ids = tn_xcalloc((size_t)argc + 1, sizeof *ids);
    for (int i = 0; i < argc; i++) {
        char *end;
        long v = strtol(argv[i], &end, 10);
        if (!argv[i][0] || *end || v < 0 || v > INT32_MAX) {
            free(ids);
            return tn_err("tokenize: '%s' is not a token id (expected a non-negative integer)", argv[i]);
        }
        ids[i] = (int32_t)v;
    }
    char *s = tn_tokenizer_decode(t, ids, (size_t)argc, skip_special);
    free(ids);
    if (!s) return -1;
    printf("%s\n", s);
    free(s);
    return 0;
}

static int run(int argc, char **argv) {
    if (argc < 1) {
        usage(stderr);
        return tn_err("tokenize: missing TOKENIZER_JSON");
    }
    int no_special = 0, skip_special = 0, do_decode = 0, timed = 0, first_id = -1;
    const char *text = NULL, *file = NULL;
    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--no-special") == 0) no_special = 1;
        else if (strcmp(argv[i], "--skip-special") == 0) skip_special = 1;
        else if (strcmp(argv[i], "--decode") == 0) do_decode = 1;
        else if (strcmp(argv[i], "--time") == 0) timed = 1;
        else if (strcmp(argv[i], "--text") == 0 && i + 1 < argc) text = argv[++i];
        else if (strcmp(argv[i], "--file") == 0 && i + 1 < argc) file = argv[++i];
        else if (do_decode && argv[i][0] != '-') {
            first_id = i;
            break;
        } else {
            usage(stderr);
            return tn_err("tokenize: unknown or incomplete option '%s'", argv[i]);
        }
    }
    double t0 = tn_now();
    tn_tokenizer *t = tn_tokenizer_load(argv[0]);
    if (!t) return -1;
    double t_load = tn_now() - t0;
    int rc;
    if (do_decode) {
        rc = first_id < 0 ? tn_err("tokenize: --decode needs token ids") : decode(t, argc - first_id, argv + first_id, skip_special);
    } else {
        size_t len = 0;
        char *owned = NULL;
        if (text) len = strlen(text);
        else {
            owned = file ? tn_read_file(file, &len, TOK_MAX_INPUT) : read_stdin(&len);
            text = owned;
        }
        tn_ids ids = {0};
        double t1 = tn_now();
        rc = text ? tn_tokenizer_encode(t, text, len, !no_special, &ids) : -1;
        double t_enc = tn_now() - t1;
        if (rc == 0) {
            for (size_t i = 0; i < ids.n; i++) printf(i ? " %d" : "%d", ids.ids[i]);
            printf("\n");
            if (timed)
                fprintf(stderr, "tokenize: load %.3f s; %zu bytes -> %zu tokens in %.3f s (%.1f MB/s)\n", t_load, len, ids.n,
                        t_enc, t_enc > 0 ? len / t_enc / 1e6 : 0.0);
        }
        tn_ids_free(&ids);
        free(owned);
    }
    tn_tokenizer_free(t);
    return rc;
}

int tn_cmd_tokenize(int argc, char **argv) {
    if (argc >= 1 && (strcmp(argv[0], "--help") == 0 || strcmp(argv[0], "-h") == 0)) {
        usage(stdout);
        return 0;
    }
    if (run(argc, argv) != 0) {
        fprintf(stderr, "tandem: error: %s\n", tn_errmsg());
        return 1;
    }
    return 0;
}
