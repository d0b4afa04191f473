/* lf_dataset_info.c -- dataset_info.json: the entries named in `dataset` become lf_dsattr, with
 * LLaMA-Factory's defaults (parser.py): no "columns" key keeps instruction/input/output (alpaca) or
 * conversations (sharegpt); a "columns" object sets every column it does not name to none, and
 * likewise "tags" for the sharegpt tags. What tandem cannot load (hub datasets, preference and KTO
 * data, video and audio columns, random num_samples) is refused naming the entry and the key. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/core.h"
#include "data/lf_internal.h"

#define LF_MAX_INFO ((size_t)64 << 20)

static char *dup_or_null(const char *s) { return s ? tn_xstrdup(s) : NULL; }

/* An optional string key of obj: absent -> def; null -> NULL; a non-string is an error. */
static int opt_str(const char *path, const char *name, const char *where, const lj_val *obj, const char *key,
                   const char *def, char **out) {
    const lj_val *v = lj_get(obj, key);
    if (!v) {
        *out = dup_or_null(def);
        return 0;
    }
    if (v->type == LJ_NULL) {
        *out = NULL;
        return 0;
    }
    if (v->type != LJ_STR || memchr(v->s, '\0', v->n))
        return tn_err("%s: dataset '%s': %s%s must be a string (got %s)", path, name, where, key, lj_type_name(v->type));
    *out = tn_xstrdup(v->s);
    return 0;
}

static int truthy(const lj_val *v) {
    if (!v) return 0;
    switch (v->type) {
    case LJ_NULL:
    case LJ_FALSE: return 0;
    case LJ_NUM: return !(v->n == 1 && v->s[0] == '0');
    case LJ_STR:
    case LJ_ARR:
    case LJ_OBJ: return v->n != 0;
    default: return 1;
    }
}

static int parse_entry(const char *path, const char *text, const char *name, const lj_val *e, lf_dsattr *d) {
    if (e->type != LJ_OBJ) return tn_err("%s: dataset '%s' must be an object", path, name);
    d->name = tn_xstrdup(name);
    d->entry = text + e->off;
    d->entry_len = e->end - e->off;
    /* LF checks the sources in this order; the first present one wins */
    static const char *const remote[] = {"hf_hub_url", "ms_hub_url", "om_hub_url", "script_url", "cloud_file_name"};
    for (size_t k = 0; k < sizeof remote / sizeof *remote; k++)
        if (lj_get(e, remote[k]))
            return tn_err("%s: dataset '%s' loads from '%s' (remote); tandem reads local files only (file_name)", path,
                          name, remote[k]);
    const lj_val *fn = lj_get(e, "file_name");
    if (!fn) return tn_err("%s: dataset '%s' has no 'file_name'", path, name);
    if (fn->type != LJ_STR || fn->n == 0 || memchr(fn->s, '\0', fn->n))
        return tn_err("%s: dataset '%s': file_name must be a non-empty string", path, name);
    d->file_name = tn_xstrdup(fn->s);

    char *fmt = NULL;
    if (opt_str(path, name, "", e, "formatting", "alpaca", &fmt) != 0) return -1;
    if (!fmt || strcmp(fmt, "alpaca") == 0) d->formatting = LF_ALPACA;
    else if (strcmp(fmt, "sharegpt") == 0) d->formatting = LF_SHAREGPT;
    else {
        tn_err("%s: dataset '%s': formatting '%.40s' not supported (expected alpaca or sharegpt)", path, name, fmt);
        free(fmt);
        return -1;
    }
    free(fmt);
    if (truthy(lj_get(e, "ranking")))
        return tn_err("%s: dataset '%s' is preference data (ranking: true): LLaMA-Factory uses it only in stage rm/dpo, "
                      "which tandem does not have", path, name);
    if (lj_get(e, "num_samples") && lj_get(e, "num_samples")->type != LJ_NULL)
        return tn_err("%s: dataset '%s': num_samples (random resampling with numpy's global RNG) is not supported; "
                      "use max_samples", path, name);
    const lj_val *split = lj_get(e, "split");
    if (split && split->type != LJ_NULL && !lj_streq(split, "train"))
        return tn_err("%s: dataset '%s': split must be \"train\" for a local file", path, name);

    int alpaca = d->formatting == LF_ALPACA;
    const lj_val *cols = lj_get(e, "columns");
    if (cols && cols->type != LJ_OBJ && cols->type != LJ_NULL)
        return tn_err("%s: dataset '%s': columns must be an object", path, name);
    int has_cols = cols && cols->type == LJ_OBJ;
    /* with a columns object, a column it leaves out is none (LF's set_attr default) */
    const char *w = "columns.";
    if (alpaca) {
        if (opt_str(path, name, w, cols, "prompt", has_cols ? NULL : "instruction", &d->prompt) ||
            opt_str(path, name, w, cols, "query", has_cols ? NULL : "input", &d->query) ||
            opt_str(path, name, w, cols, "response", has_cols ? NULL : "output", &d->response) ||
            opt_str(path, name, w, cols, "history", NULL, &d->history))
            return -1;
    } else if (opt_str(path, name, w, cols, "messages", has_cols ? NULL : "conversations", &d->messages)) {
        return -1;
    }
    if (opt_str(path, name, w, cols, "system", NULL, &d->system) || opt_str(path, name, w, cols, "tools", NULL, &d->tools) ||
        opt_str(path, name, w, cols, "images", NULL, &d->images))
        return -1;
    static const char *const media[] = {"videos", "audios"};
    for (size_t k = 0; k < sizeof media / sizeof *media; k++) {
        const lj_val *c = lj_get(cols, media[k]);
        if (c && c->type != LJ_NULL)
            return tn_err("%s: dataset '%s': columns.%s: %s are not supported yet (tandem trains on text and images)",
                          path, name, media[k], k == 0 ? "videos" : "audio inputs");
    }
    static const char *const refused[] = {"chosen", "rejected", "kto_tag"};
    for (size_t k = 0; k < sizeof refused / sizeof *refused; k++) {
        const lj_val *c = lj_get(cols, refused[k]);
        if (c && c->type != LJ_NULL)
            return tn_err("%s: dataset '%s': columns.%s is not supported (SFT and pre-training only: no preference "
                          "or KTO data)", path, name, refused[k]);
    }
    if (!alpaca && !d->messages)
        return tn_err("%s: dataset '%s': sharegpt data needs columns.messages", path, name);

    if (!alpaca) {
        const lj_val *tags = lj_get(e, "tags");
        if (tags && tags->type != LJ_OBJ && tags->type != LJ_NULL)
            return tn_err("%s: dataset '%s': tags must be an object", path, name);
        int has_tags = tags && tags->type == LJ_OBJ;
        const char *t = "tags.";
#define TAG(field, def) opt_str(path, name, t, tags, #field, has_tags ? NULL : def, &d->field)
        if (TAG(role_tag, "from") || TAG(content_tag, "value") || TAG(user_tag, "human") || TAG(assistant_tag, "gpt") ||
            TAG(observation_tag, "observation") || TAG(function_tag, "function_call") || TAG(system_tag, "system"))
            return -1;
#undef TAG
        if (!d->role_tag || !d->content_tag)
            return tn_err("%s: dataset '%s': tags.role_tag and tags.content_tag are required for sharegpt", path, name);
    }
    return 0;
}

static void trim(const char **s, size_t *n) {
    while (*n && (**s == ' ' || **s == '\t' || **s == '\n' || **s == '\r' || **s == '\v' || **s == '\f')) (*s)++, (*n)--;
    while (*n && ((*s)[*n - 1] == ' ' || (*s)[*n - 1] == '\t' || (*s)[*n - 1] == '\n' || (*s)[*n - 1] == '\r' ||
                  (*s)[*n - 1] == '\v' || (*s)[*n - 1] == '\f'))
        (*n)--;
}

int lf_dsinfo_load(const char *dataset_dir, const char *names, lf_dsinfo *out) {
    memset(out, 0, sizeof *out);
    if (!names || !*names) return tn_err("dataset: no dataset given (a comma list of names in dataset_info.json)");
    out->path = tn_path_join(dataset_dir, "dataset_info.json");
    size_t len;
    out->text = tn_read_file(out->path, &len, LF_MAX_INFO);
    if (!out->text) {
        lf_dsinfo_free(out);
        return -1;
    }
    lf_arena a = {0};
    lj_error err;
    const lj_val *root = lj_parse(&a, out->text, len, &err);
    int rc = 0;
    if (!root) {
        size_t line, col;
        lj_linecol(out->text, err.off, &line, &col);
        rc = tn_err("%s: invalid JSON at line %zu, column %zu (byte %zu): %s", out->path, line, col, err.off, err.msg);
    } else if (root->type != LJ_OBJ) {
        rc = tn_err("%s: top level must be an object {name: entry}", out->path);
    }
    const char *p = names;
    while (rc == 0) {
        const char *comma = strchr(p, ',');
        size_t n = comma ? (size_t)(comma - p) : strlen(p);
        const char *s = p;
        trim(&s, &n);
        char name[256];
        if (n == 0 || n >= sizeof name) {
            rc = tn_err("dataset: '%s' has an empty or over-long name in its comma list", names);
            break;
        }
        memcpy(name, s, n);
        name[n] = '\0';
        const lj_val *e = lj_get(root, name);
        if (!e) {
            rc = tn_err("%s: dataset '%s' is not defined there", out->path, name);
            break;
        }
        out->ds = tn_xrealloc(out->ds, (size_t)(out->n + 1) * sizeof *out->ds);
        lf_dsattr *d = &out->ds[out->n++];
        memset(d, 0, sizeof *d);
        rc = parse_entry(out->path, out->text, name, e, d);
        if (!comma) break;
        p = comma + 1;
    }
    lf_arena_free(&a);
    if (rc != 0) lf_dsinfo_free(out);
    return rc;
}

void lf_dsinfo_free(lf_dsinfo *d) {
    for (int i = 0; i < d->n; i++) {
        lf_dsattr *s = &d->ds[i];
        char **f[] = {&s->name, &s->file_name, &s->prompt, &s->query, &s->response, &s->history, &s->messages,
                      &s->system, &s->tools, &s->images, &s->role_tag, &s->content_tag, &s->user_tag, &s->assistant_tag,
                      &s->observation_tag, &s->function_tag, &s->system_tag};
        for (size_t k = 0; k < sizeof f / sizeof *f; k++) free(*f[k]);
    }
    free(d->ds);
    free(d->path);
    free(d->text);
    memset(d, 0, sizeof *d);
}
