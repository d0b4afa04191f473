/* tok_pipeline.c -- the normalizer, pre_tokenizer and decoder sections of tokenizer.json: what is
 * supported is recorded in the tokenizer, everything else is refused naming the key.
 *
 * Supported: normalizer null | NFC | Sequence of NFC; pre_tokenizer ByteLevel | Sequence of
 * Split{Regex or String, Isolated, invert false}... followed by one ByteLevel; decoder ByteLevel |
 * Sequence[ByteLevel]. post_processor, truncation and padding are not read (see tokenizer.h). */
#include "tokenizer/tok_internal.h"

#include <cjson/cJSON.h>
#include <stdio.h>
#include <string.h>

#include "core/core.h"

/* GPT-2's pre-tokenizer pattern, what ByteLevel{use_regex: true} splits with. */
static const char k_gpt2_pattern[] =
    "'s|'t|'re|'ve|'m|'ll|'d| ?\\p{L}+| ?\\p{N}+| ?[^\\s\\p{L}\\p{N}]+|\\s+(?!\\S)|\\s+";

static const cJSON *get(const cJSON *o, const char *key) {
    const cJSON *j = cJSON_GetObjectItemCaseSensitive(o, key);
    return cJSON_IsNull(j) ? NULL : j;
}

static const char *type_of(const tn_tokenizer *t, const cJSON *o, const char *where) {
    const cJSON *ty = cJSON_IsObject(o) ? get(o, "type") : NULL;
    if (!cJSON_IsString(ty)) {
        tn_err("%s: %s must be an object with a string 'type'", t->path, where);
        return NULL;
    }
    return ty->valuestring;
}

/* A type name for an error message: at most 40 bytes, control characters as '?'. */
static const char *shown(const char *s, char buf[static 48]) {
    snprintf(buf, 48, "%.40s", s);
    for (char *p = buf; *p; p++)
        if ((unsigned char)*p < 0x20) *p = '?';
    return buf;
}

static int flag(const tn_tokenizer *t, const cJSON *o, const char *key, int def, const char *where, int *out) {
    const cJSON *j = get(o, key);
    if (!j) {
        *out = def;
        return 0;
    }
    if (!cJSON_IsBool(j)) return tn_err("%s: %s.%s must be true or false", t->path, where, key);
    *out = cJSON_IsTrue(j);
    return 0;
}

static int compile(tn_tokenizer *t, tk_regex *r, const char *pat, size_t len, uint32_t extra, const char *where) {
    int code;
    PCRE2_SIZE off;
    /* LITERAL refuses UCP (and NEVER_BACKSLASH_C). \C (one code unit) is locked out: a match that splits a
     * UTF-8 character would hand the next regex invalid UTF-8, which PCRE2 then reads past the piece's end
     * (matching runs with PCRE2_NO_UTF_CHECK / JIT, relying on valid text). */
    uint32_t opts = PCRE2_UTF | (extra & PCRE2_LITERAL ? 0 : PCRE2_UCP | PCRE2_NEVER_BACKSLASH_C) | extra;
    r->re = pcre2_compile((PCRE2_SPTR)pat, len, opts, &code, &off, NULL);
    if (!r->re) {
        PCRE2_UCHAR msg[128];
        pcre2_get_error_message(code, msg, sizeof msg);
        return tn_err("%s: %s does not compile at offset %zu: %s", t->path, where, (size_t)off, (char *)msg);
    }
    r->jit = pcre2_jit_compile(r->re, PCRE2_JIT_COMPLETE) == 0;  /* without JIT the interpreter serves */
    uint32_t caps = 0;
    pcre2_pattern_info(r->re, PCRE2_INFO_CAPTURECOUNT, &caps);
    if (caps + 1 > t->max_pairs) t->max_pairs = caps + 1;
    return 0;
}

static int normalizer(tn_tokenizer *t, const cJSON *n, const char *where) {
    char sb[48];
    if (!n) return 0;
    const char *ty = type_of(t, n, where);
    if (!ty) return -1;
    if (strcmp(ty, "NFC") == 0) {
        t->nfc = 1;
        return 0;
    }
    if (strcmp(ty, "Sequence") == 0) {
        const cJSON *list = get(n, "normalizers");
        if (!cJSON_IsArray(list)) return tn_err("%s: %s.normalizers must be an array", t->path, where);
        int i = 0;
        for (const cJSON *e = list->child; e; e = e->next, i++) {
            char w[64];
            snprintf(w, sizeof w, "%s.normalizers[%d]", where, i);
            const char *ety = type_of(t, e, w);
            if (!ety) return -1;
            if (strcmp(ety, "NFC") != 0)
                return tn_err("%s: %s.type '%s' not supported (expected NFC)", t->path, w, shown(ety, sb));
            t->nfc = 1;
        }
        return 0;
    }
    return tn_err("%s: %s.type '%s' not supported (expected NFC, a Sequence of NFC, or null)", t->path, where, shown(ty, sb));
}

static int split(tn_tokenizer *t, const cJSON *s, const char *where) {
    const cJSON *beh = get(s, "behavior");
    if (!cJSON_IsString(beh) || strcmp(beh->valuestring, "Isolated") != 0)
        return tn_err("%s: %s.behavior must be \"Isolated\" (the only one supported)", t->path, where);
    int invert = 0;
    if (flag(t, s, "invert", 0, where, &invert) != 0) return -1;
    if (invert) return tn_err("%s: %s.invert true not supported", t->path, where);
    if (t->n_splits == TK_MAX_SPLITS) return tn_err("%s: %s: more than %d Split steps", t->path, where, TK_MAX_SPLITS);
    const cJSON *pat = get(s, "pattern"), *re = pat ? get(pat, "Regex") : NULL, *str = pat ? get(pat, "String") : NULL;
    char w[96];
    if (cJSON_IsString(re)) {
        snprintf(w, sizeof w, "%s.pattern.Regex", where);
        return compile(t, &t->split[t->n_splits++], re->valuestring, strlen(re->valuestring), 0, w);
    }
    if (cJSON_IsString(str)) {
        snprintf(w, sizeof w, "%s.pattern.String", where);
        return compile(t, &t->split[t->n_splits++], str->valuestring, strlen(str->valuestring), PCRE2_LITERAL, w);
    }
    return tn_err("%s: %s.pattern must be {\"Regex\": ...} or {\"String\": ...}", t->path, where);
}

static int bytelevel(tn_tokenizer *t, const cJSON *b, const char *where) {
    int use_regex = 0;
    if (flag(t, b, "add_prefix_space", 1, where, &t->bl_prefix_space) != 0 || flag(t, b, "use_regex", 1, where, &use_regex) != 0)
        return -1;
    if (!use_regex) return 0;
    char w[96];
    snprintf(w, sizeof w, "%s (GPT-2 pattern)", where);
    return compile(t, &t->bl_re, k_gpt2_pattern, sizeof k_gpt2_pattern - 1, 0, w);
}

static int pre_tokenizer(tn_tokenizer *t, const cJSON *p) {
    char sb[48];
    if (!p) return tn_err("%s: pre_tokenizer is null (expected ByteLevel: only byte-level BPE is supported)", t->path);
    const char *ty = type_of(t, p, "pre_tokenizer");
    if (!ty) return -1;
    if (strcmp(ty, "ByteLevel") == 0) return bytelevel(t, p, "pre_tokenizer");
    if (strcmp(ty, "Sequence") != 0)
        return tn_err("%s: pre_tokenizer.type '%s' not supported (expected ByteLevel or Sequence)", t->path, shown(ty, sb));
    const cJSON *list = get(p, "pretokenizers");
    if (!cJSON_IsArray(list)) return tn_err("%s: pre_tokenizer.pretokenizers must be an array", t->path);
    int i = 0, seen_bl = 0;
    for (const cJSON *e = list->child; e; e = e->next, i++) {
        char w[64];
        snprintf(w, sizeof w, "pre_tokenizer.pretokenizers[%d]", i);
        const char *ety = type_of(t, e, w);
        if (!ety) return -1;
        if (seen_bl) return tn_err("%s: %s: ByteLevel must be the last pre-tokenizer (supported layout)", t->path, w);
        if (strcmp(ety, "Split") == 0) {
            if (split(t, e, w) != 0) return -1;
        } else if (strcmp(ety, "ByteLevel") == 0) {
            if (bytelevel(t, e, w) != 0) return -1;
            seen_bl = 1;
        } else {
            return tn_err("%s: %s.type '%s' not supported (expected Split or ByteLevel)", t->path, w, shown(ety, sb));
        }
    }
    if (!seen_bl) return tn_err("%s: pre_tokenizer.pretokenizers has no ByteLevel (only byte-level BPE is supported)", t->path);
    return 0;
}

static int decoder(tn_tokenizer *t, const cJSON *d) {
    char sb[48];
    if (!d) return tn_err("%s: decoder is null (expected ByteLevel)", t->path);
    const char *ty = type_of(t, d, "decoder");
    if (!ty) return -1;
    if (strcmp(ty, "ByteLevel") == 0) return 0;
    if (strcmp(ty, "Sequence") == 0) {
        const cJSON *list = get(d, "decoders");
        int i = 0;
        for (const cJSON *e = cJSON_IsArray(list) ? list->child : NULL; e; e = e->next, i++) {
            char w[48];
            snprintf(w, sizeof w, "decoder.decoders[%d]", i);
            const char *ety = type_of(t, e, w);
            if (!ety) return -1;
            if (strcmp(ety, "ByteLevel") != 0)
                return tn_err("%s: %s.type '%s' not supported (expected ByteLevel)", t->path, w, shown(ety, sb));
        }
        if (i == 0) return tn_err("%s: decoder.decoders must be a non-empty array of ByteLevel", t->path);
        return 0;
    }
    return tn_err("%s: decoder.type '%s' not supported (expected ByteLevel)", t->path, shown(ty, sb));
}

int tk_load_pipeline(tn_tokenizer *t, const void *root_json) {
    const cJSON *root = root_json;
    t->max_pairs = 1;
    if (normalizer(t, get(root, "normalizer"), "normalizer") != 0) return -1;
    if (pre_tokenizer(t, get(root, "pre_tokenizer")) != 0) return -1;
    return decoder(t, get(root, "decoder"));
}
