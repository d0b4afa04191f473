/* tok_load.c -- tokenizer.json -> tables: model.vocab, model.merges, added_tokens (the pipeline
 * sections are read by tok_pipeline.c). Every rejection names the file and the JSON key. */
#include "tokenizer/tok_internal.h"

#include <cjson/cJSON.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/core.h"
#include "core/oom.h"

#define TK_MAX_FILE ((size_t)1 << 30)

static const cJSON *get(const cJSON *o, const char *key) {
    const cJSON *j = cJSON_GetObjectItemCaseSensitive(o, key);
    return cJSON_IsNull(j) ? NULL : j;
}

static int as_id(const cJSON *j, int32_t *id) {
    if (!cJSON_IsNumber(j) || !(j->valuedouble >= 0) || j->valuedouble >= TK_MAX_ID || j->valuedouble != floor(j->valuedouble))
        return -1;
    *id = (int32_t)j->valuedouble;
    return 0;
}

/* Optional boolean key: absent/null -> def. */
static int get_flag(const tn_tokenizer *t, const cJSON *o, const char *key, int def, const char *where, int *out) {
    const cJSON *j = get(o, key);
    if (!j) {
        *out = def;
        return 0;
    }
    if (!cJSON_IsBool(j)) return tn_err("%s: %s.%s must be true or false", t->path, where, key);
    *out = cJSON_IsTrue(j);
    return 0;
}

/* Token strings are stored NUL-terminated, so id_to_token can hand them out as they are. */
static int arena_add(tn_tokenizer *t, const char *s, size_t n, uint32_t *off) {
    if (t->arena_len + n + 1 > UINT32_MAX) return tn_err("%s: token strings exceed 4 GiB", t->path);
    if (t->arena_len + n + 1 > t->arena_cap) {
        size_t c = t->arena_cap ? t->arena_cap : 1 << 16;
        while (c < t->arena_len + n + 1) c *= 2;
        t->arena = tn_xrealloc(t->arena, c);
        t->arena_cap = c;
    }
    memcpy(t->arena + t->arena_len, s, n);
    t->arena[t->arena_len + n] = '\0';
    *off = (uint32_t)t->arena_len;
    t->arena_len += n + 1;
    return 0;
}

/* A token for an error message: at most 40 bytes, control characters as '?' (the message stays one line). */
static const char *show_n(const char *s, size_t n, char buf[static 48]) {
    snprintf(buf, 48, "%.*s%s", (int)(n > 40 ? 40 : n), s, n > 40 ? "..." : "");
    for (char *p = buf; *p; p++)
        if ((unsigned char)*p < 0x20) *p = '?';
    return buf;
}
static const char *show(const char *s, char buf[static 48]) { return show_n(s, strlen(s), buf); }

/* Largest id in model.vocab and added_tokens, with the ids checked. */
static int max_id(tn_tokenizer *t, const cJSON *vocab, const cJSON *added, int32_t *out) {
    int32_t m = -1, id;
    char b[48];
    for (const cJSON *e = vocab->child; e; e = e->next) {
        if (as_id(e, &id) != 0)
            return tn_err("%s: model.vocab['%s'] must be an integer id in [0, %d)", t->path, show(e->string, b), TK_MAX_ID);
        if (id > m) m = id;
    }
    int i = 0;
    for (const cJSON *e = added ? added->child : NULL; e; e = e->next, i++) {
        if (!cJSON_IsObject(e)) return tn_err("%s: added_tokens[%d] must be an object", t->path, i);
        if (as_id(get(e, "id"), &id) != 0)
            return tn_err("%s: added_tokens[%d].id must be an integer in [0, %d)", t->path, i, TK_MAX_ID);
        if (id > m) m = id;
    }
    if (m < 0) return tn_err("%s: model.vocab is empty", t->path);
    *out = m;
    return 0;
}

static int load_vocab(tn_tokenizer *t, const cJSON *vocab) {
    char b1[48], b2[48];
    for (const cJSON *e = vocab->child; e; e = e->next) {
        int32_t id = (int32_t)e->valuedouble;
        if (t->flags[id])
            return tn_err("%s: model.vocab: id %d is given to both '%s' and '%s'", t->path, id,
                          show(t->arena + t->str_off[id], b1), show(e->string, b2));
        size_t n = strlen(e->string);
        if (arena_add(t, e->string, n, &t->str_off[id]) != 0) return -1;
        t->str_len[id] = (uint32_t)n;
        t->flags[id] = TK_VOCAB;
        int32_t other = tk_strmap_put(t, id);
        if (other >= 0)
            return tn_err("%s: model.vocab: token '%s' appears twice (ids %d and %d)", t->path, show(e->string, b1), other, id);
    }
    return 0;
}

/* One merge -> its two halves; "a b" (older layout) or ["a", "b"]. */
static int merge_parts(const tn_tokenizer *t, const cJSON *e, int i, const char **a, size_t *na, const char **b, size_t *nb) {
    if (cJSON_IsString(e)) {
        const char *s = e->valuestring, *sp = strchr(s, ' ');
        if (!sp || strchr(sp + 1, ' '))
            return tn_err("%s: model.merges[%d] must be two tokens separated by one space", t->path, i);
        *a = s, *na = (size_t)(sp - s), *b = sp + 1, *nb = strlen(sp + 1);
        return 0;
    }
    if (cJSON_IsArray(e) && cJSON_GetArraySize(e) == 2 && cJSON_IsString(e->child) && cJSON_IsString(e->child->next)) {
        *a = e->child->valuestring, *na = strlen(*a);
        *b = e->child->next->valuestring, *nb = strlen(*b);
        return 0;
    }
    return tn_err("%s: model.merges[%d] must be a string \"a b\" or a pair [\"a\", \"b\"]", t->path, i);
}

static int load_merges(tn_tokenizer *t, const cJSON *merges) {
    int n = cJSON_GetArraySize(merges);
    if (tk_mergemap_init(&t->merges, (size_t)n) != 0) return -1;
    char *cat = NULL;
    size_t cap = 0;
    int i = 0, rc = 0;
    char sb[48];
    for (const cJSON *e = merges->child; e && rc == 0; e = e->next, i++) {
        const char *a = NULL, *b = NULL;
        size_t na = 0, nb = 0;
        if ((rc = merge_parts(t, e, i, &a, &na, &b, &nb)) != 0) break;
        if (na + nb + 1 > cap) {
            cap = 2 * (na + nb + 1);
            cat = tn_xrealloc(cat, cap);
        }
        memcpy(cat, a, na);
        memcpy(cat + na, b, nb);
        cat[na + nb] = '\0';
        int32_t ia = tk_strmap_get(t, a, na), ib = tk_strmap_get(t, b, nb), im = tk_strmap_get(t, cat, na + nb);
        const char *miss = NULL;
        size_t nmiss = 0;
        if (ia < 0 || !(t->flags[ia] & TK_VOCAB)) miss = a, nmiss = na;
        else if (ib < 0 || !(t->flags[ib] & TK_VOCAB)) miss = b, nmiss = nb;
        else if (im < 0 || !(t->flags[im] & TK_VOCAB)) miss = cat, nmiss = na + nb;
        if (miss) {
            rc = tn_err("%s: model.merges[%d]: token '%s' is not in model.vocab", t->path, i, show_n(miss, nmiss, sb));
            break;
        }
        tk_mergemap_put(&t->merges, ia, ib, i, im);
    }
    free(cat);
    return rc;
}

static int load_added(tn_tokenizer *t, const cJSON *added) {
    int n = cJSON_GetArraySize(added);
    t->added = tn_xcalloc((size_t)n + 1, sizeof *t->added);
    char b1[48], b2[48];
    int i = 0;
    for (const cJSON *e = added->child; e; e = e->next, i++) {
        char where[32];
        snprintf(where, sizeof where, "added_tokens[%d]", i);
        const cJSON *c = get(e, "content");
        if (!cJSON_IsString(c) || !c->valuestring[0])
            return tn_err("%s: %s.content must be a non-empty string", t->path, where);
        int32_t id = (int32_t)get(e, "id")->valuedouble;  /* checked by max_id */
        int special = 0, normalized = 0, lstrip = 0, rstrip = 0, single_word = 0;
        if (get_flag(t, e, "special", 0, where, &special) || get_flag(t, e, "normalized", !special, where, &normalized) ||
            get_flag(t, e, "lstrip", 0, where, &lstrip) || get_flag(t, e, "rstrip", 0, where, &rstrip) ||
            get_flag(t, e, "single_word", 0, where, &single_word))
            return -1;
        size_t len = strlen(c->valuestring), bad;
        /* matching an invalid sequence could cut the text inside a character; the regexes need valid UTF-8 */
        if (tk_utf8_check((const uint8_t *)c->valuestring, len, &bad) != 0)
            return tn_err("%s: %s.content is not valid UTF-8 (byte %zu)", t->path, where, bad);
        if (t->flags[id] & TK_ADDED)
            return tn_err("%s: %s: id %d is given to both '%s' and '%s'", t->path, where, id,
                          show(t->arena + t->str_off[id], b1), show(c->valuestring, b2));
        int32_t other = tk_strmap_get(t, c->valuestring, len);
        if (t->flags[id] & TK_VOCAB) {  /* already a model token: allowed only as the same token */
            if (other != id)
                return tn_err("%s: %s: id %d is '%s' in model.vocab, not '%s'", t->path, where, id,
                              show(t->arena + t->str_off[id], b1), show(c->valuestring, b2));
        } else {
            if (other >= 0)
                return tn_err("%s: %s: '%s' has id %d here but id %d elsewhere", t->path, where, show(c->valuestring, b1),
                              id, other);
            if (arena_add(t, c->valuestring, len, &t->str_off[id]) != 0) return -1;
            t->str_len[id] = (uint32_t)len;
            tk_strmap_put(t, id);
        }
        t->flags[id] |= TK_ADDED | (special ? TK_SPECIAL : 0);
        t->added[t->n_added++] = (tk_added){NULL, len, id, (uint8_t)special, (uint8_t)normalized, (uint8_t)lstrip,
                                            (uint8_t)rstrip, (uint8_t)single_word};
    }
    for (i = 0; i < t->n_added; i++) t->added[i].content = t->arena + t->str_off[t->added[i].id];
    return 0;
}

static int load_model(tn_tokenizer *t, const cJSON *model) {
    char b[48];
    const cJSON *d = get(model, "dropout");
    if (d && !(cJSON_IsNumber(d) && d->valuedouble == 0))
        return tn_err("%s: model.dropout must be null or 0 (BPE dropout is random; not supported)", t->path);
    const char *affix[] = {"continuing_subword_prefix", "end_of_word_suffix"};
    for (int i = 0; i < 2; i++) {
        const cJSON *j = get(model, affix[i]);
        if (j && !(cJSON_IsString(j) && !j->valuestring[0]))
            return tn_err("%s: model.%s must be null or \"\" (not supported)", t->path, affix[i]);
    }
    int byte_fallback = 0;
    if (get_flag(t, model, "ignore_merges", 0, "model", &t->ignore_merges) ||
        get_flag(t, model, "fuse_unk", 0, "model", &t->fuse_unk) ||
        get_flag(t, model, "byte_fallback", 0, "model", &byte_fallback))
        return -1;
    t->unk_id = -1;
    const cJSON *unk = get(model, "unk_token");
    if (unk) {
        if (!cJSON_IsString(unk)) return tn_err("%s: model.unk_token must be a string or null", t->path);
        t->unk_id = tk_strmap_get(t, unk->valuestring, strlen(unk->valuestring));
        if (t->unk_id < 0 || !(t->flags[t->unk_id] & TK_VOCAB))
            return tn_err("%s: model.unk_token '%s' is not in model.vocab", t->path, show(unk->valuestring, b));
    }
    for (int by = 0; by < 256; by++) {
        int32_t id = tk_strmap_get(t, t->bl_utf8[by], t->bl_len[by]);
        t->byte_id[by] = id >= 0 && (t->flags[id] & TK_VOCAB) ? id : -1;
        /* byte_fallback would look up <0xXX> tokens for such bytes; byte-level vocabularies never need it */
        if (t->byte_id[by] < 0 && byte_fallback)
            return tn_err("%s: model.byte_fallback with byte 0x%02X missing from model.vocab is not supported", t->path, by);
    }
    return 0;
}

static int json_error(const tn_tokenizer *t, const char *buf, size_t len) {
    const char *at = cJSON_GetErrorPtr();
    if (!at || at < buf || at > buf + len) return tn_err("%s: invalid JSON", t->path);
    size_t line = 1, col = 1;
    for (const char *p = buf; p < at; p++) {
        if (*p == '\n') line++, col = 1;
        else col++;
    }
    if (at >= buf + len) return tn_err("%s: invalid JSON: ends early (truncated?) at line %zu", t->path, line);
    return tn_err("%s: invalid JSON at line %zu, column %zu (byte %zu)", t->path, line, col, (size_t)(at - buf));
}

static int load_json(tn_tokenizer *t, const cJSON *root) {
    if (!cJSON_IsObject(root)) return tn_err("%s: top level must be a JSON object", t->path);
    const cJSON *v = get(root, "version");
    if (v && !(cJSON_IsString(v) && strcmp(v->valuestring, "1.0") == 0))
        return tn_err("%s: version must be \"1.0\"", t->path);
    const cJSON *model = get(root, "model");
    if (!cJSON_IsObject(model)) return tn_err("%s: missing object 'model'", t->path);
    const cJSON *type = get(model, "type");
    char b[48];
    if (type && !cJSON_IsString(type)) return tn_err("%s: model.type must be a string", t->path);
    if (type && strcmp(type->valuestring, "BPE") != 0)
        return tn_err("%s: model.type '%s' not supported (expected BPE)", t->path, show(type->valuestring, b));
    const cJSON *vocab = get(model, "vocab"), *merges = get(model, "merges"), *added = get(root, "added_tokens");
    if (!cJSON_IsObject(vocab)) return tn_err("%s: model.vocab must be an object {token: id}", t->path);
    if (!cJSON_IsArray(merges)) return tn_err("%s: model.merges must be an array", t->path);
    if (added && !cJSON_IsArray(added)) return tn_err("%s: added_tokens must be an array", t->path);

    int32_t m = -1;
    if (max_id(t, vocab, added, &m) != 0) return -1;
    t->vocab_size = m + 1;
    size_t nv = (size_t)t->vocab_size;
    t->flags = tn_xcalloc(nv, 1);
    t->str_off = tn_xcalloc(nv, sizeof *t->str_off);
    t->str_len = tn_xcalloc(nv, sizeof *t->str_len);
    if (tk_strmap_init(&t->map, (size_t)cJSON_GetArraySize(vocab) + (size_t)cJSON_GetArraySize(added)) != 0) return -1;
    if (load_vocab(t, vocab) != 0) return -1;
    if (added && load_added(t, added) != 0) return -1;
    if (load_model(t, model) != 0 || load_merges(t, merges) != 0) return -1;
    /* The first merges of every word join two bytes: a dense table spares those hash lookups. */
    t->byte_pair = tn_xcalloc(65536, sizeof *t->byte_pair);
    for (int a = 0; a < 256; a++)
        for (int b = 0; b < 256; b++) {
            const tk_merge *mg = t->byte_id[a] >= 0 && t->byte_id[b] >= 0 ? tk_mergemap_get(&t->merges, t->byte_id[a], t->byte_id[b]) : NULL;
            t->byte_pair[a << 8 | b] = mg ? *mg : (tk_merge){0, INT32_MAX, -1};
        }
    if (tk_load_pipeline(t, root) != 0) return -1;
    return tk_matchers_build(t);
}

tn_tokenizer *tn_tokenizer_load(const char *path) {
    size_t len;
    char *buf = tn_read_file(path, &len, TK_MAX_FILE);
    if (!buf) return NULL;
    char what[1100];
    snprintf(what, sizeof what, "the tokenizer %s", path);
    const char *outer = tn_loading(what); /* an allocation that fails from here on names the file */
    tn_tokenizer *t = tn_xcalloc(1, sizeof *t);
    t->path = tn_xstrdup(path);
    pthread_mutex_init(&t->pool_lock, NULL);
    tk_bytelevel_init(t);
    tn_json_oom_reset();
    cJSON *root = cJSON_ParseWithLength(buf, len);
    int rc = root ? load_json(t, root)
             : tn_json_oom() ? tn_err("%s: out of memory while parsing its %zu bytes of JSON", path, len)
                             : json_error(t, buf, len);
    /* the maps' own messages ("tokenizer: out of memory for ...") get the file's name */
    if (rc != 0 && strncmp(tn_errmsg(), "tokenizer: ", 11) == 0) tn_err("%s: %s", path, tn_errmsg() + 11);
    cJSON_Delete(root);
    free(buf);
    tn_loading(outer);
    if (rc != 0) {
        tn_tokenizer_free(t);
        return NULL;
    }
    return t;
}

void tn_tokenizer_free(tn_tokenizer *t) {
    if (!t) return;
    for (int i = 0; i < t->npool; i++) tk_enc_free(t->pool[i]);
    free(t->pool);
    pthread_mutex_destroy(&t->pool_lock);
    for (int i = 0; i < t->n_splits; i++) pcre2_code_free(t->split[i].re);
    pcre2_code_free(t->bl_re.re);
    tk_matchers_free(t);
    free(t->added);
    tk_mergemap_free(&t->merges);
    free(t->byte_pair);
    tk_strmap_free(&t->map);
    free(t->arena);
    free(t->flags), free(t->str_off), free(t->str_len);
    free(t->path);
    free(t);
}
