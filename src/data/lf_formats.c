/* lf_formats.c -- data files -> records -> LLaMA-Factory's aligned examples (converter.py).
 *
 * Files (as HF `datasets` reads them): .json/.jsonl hold a JSON array of objects or JSON lines (decided
 * by content, as HF's json builder falls back between the two; blank lines skipped); .txt gives one
 * record {"text": line} per line (universal newlines). A column missing from a record is null, as
 * in HF's table; a mapped column that no record has is an error (LF's KeyError).
 *
 * alpaca: user turn = prompt + "\n" + query (each only if non-empty), history pairs become earlier
 * turns, the response only if it is a string (else no response: LF drops the example in SFT).
 * sharegpt: an optional leading system turn, then roles alternating user|observation and
 * assistant|function; a wrong role or an odd count marks the example broken (LF drops it).
 * images (either format): a path or a list of paths; each is media_dir/path when that is a file, else the
 * path as written (LF's _find_medias); the files are opened only when the example is encoded. */
#include <dirent.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "core/core.h"
#include "data/lf_internal.h"

#define LF_MAX_FILE ((size_t)8 << 30)

static int name_cmp(const void *a, const void *b) { return strcmp(*(char *const *)a, *(char *const *)b); }

/* HF's FILEEXT2TYPE: the text after the last '.' of the name. */
static int file_type(const char *path, int *type) {
    const char *slash = strrchr(path, '/'), *base = slash ? slash + 1 : path, *dot = strrchr(base, '.');
    const char *ext = dot ? dot + 1 : base;
    if (strcmp(ext, "json") == 0 || strcmp(ext, "jsonl") == 0) *type = LF_FILE_JSON;
    else if (strcmp(ext, "txt") == 0) *type = LF_FILE_TXT;
    else if (strcmp(ext, "csv") == 0 || strcmp(ext, "parquet") == 0 || strcmp(ext, "arrow") == 0)
        return tn_err("%s: .%s files are not supported (tandem reads json, jsonl and txt)", path, ext);
    else
        return tn_err("%s: unknown file type (allowed: json, jsonl, txt)", path);
    return 0;
}

/* A data file must be a regular file: a FIFO or a device would hang the run or feed it endless bytes. */
static int regular_file(const char *path, const char *dsname) {
    struct stat st;
    if (stat(path, &st) != 0) return tn_err("%s: dataset '%s': cannot read: %s", path, dsname, strerror(errno));
    if (S_ISREG(st.st_mode)) return 0;
    const char *what = S_ISFIFO(st.st_mode) ? "a FIFO" : S_ISCHR(st.st_mode) || S_ISBLK(st.st_mode) ? "a device"
                       : S_ISSOCK(st.st_mode) ? "a socket" : S_ISDIR(st.st_mode) ? "a folder" : "not a file";
    return tn_err("%s: dataset '%s': %s, not a regular file; expected a json, jsonl or txt file", path, dsname, what);
}

int lf_dataset_files(const char *dataset_dir, const lf_dsattr *ds, lf_file **files, int *n) {
    *files = NULL, *n = 0;
    char *local = ds->file_name[0] == '/' ? tn_xstrdup(ds->file_name) : tn_path_join(dataset_dir, ds->file_name);
    struct stat st;
    char **names = NULL;
    int nn = 0, rc = 0;
    if (stat(local, &st) != 0) {
        rc = tn_err("%s: dataset '%s': file not found", local, ds->name);
    } else if (S_ISDIR(st.st_mode)) {
        DIR *d = opendir(local);
        if (!d) rc = tn_err("%s: dataset '%s': cannot list the folder", local, ds->name);
        for (struct dirent *e; d && (e = readdir(d));) {
            if (strcmp(e->d_name, ".") == 0 || strcmp(e->d_name, "..") == 0) continue;
            names = tn_xrealloc(names, (size_t)(nn + 1) * sizeof *names);
            names[nn++] = tn_path_join(local, e->d_name);
        }
        if (d) closedir(d);
        /* os.listdir order is the file system's; name order makes every node read the same data */
        if (nn > 1) qsort(names, (size_t)nn, sizeof *names, name_cmp);
        if (rc == 0 && nn == 0) rc = tn_err("%s: dataset '%s': the folder is empty", local, ds->name);
    } else {
        names = tn_xmalloc(sizeof *names);
        names[nn++] = tn_xstrdup(local);
    }
    if (rc == 0) *files = tn_xcalloc((size_t)nn, sizeof **files);
    for (int i = 0; i < nn && rc == 0; i++) {
        lf_file *f = &(*files)[i];
        f->path = names[i], names[i] = NULL;
        (*n)++;
        if (regular_file(f->path, ds->name) != 0 || file_type(f->path, &f->type) != 0) rc = -1;
        else if (i > 0 && f->type != (*files)[0].type)
            rc = tn_err("%s: dataset '%s': files of one folder must have the same type", f->path, ds->name);
        else if (!(f->bytes = tn_read_file(f->path, &f->n, LF_MAX_FILE)))
            rc = -1;
    }
    for (int i = 0; i < nn; i++) free(names[i]);
    free(names);
    free(local);
    if (rc != 0) {
        lf_files_free(*files, *n);
        *files = NULL, *n = 0;
    }
    return rc;
}

void lf_files_free(lf_file *f, int n) {
    for (int i = 0; f && i < n; i++) free(f[i].path), free(f[i].bytes);
    free(f);
}

/* ---- records ---- */
typedef struct {
    const lj_val **rec;
    int *fidx;             /* file of each record */
    int *ridx;             /* index in that file */
    int n, cap;
} records;

static void rec_add(records *r, const lj_val *v, int f, int i) {
    if (r->n == r->cap) {
        r->cap = r->cap ? 2 * r->cap : 1024;
        r->rec = tn_xrealloc(r->rec, (size_t)r->cap * sizeof *r->rec);
        r->fidx = tn_xrealloc(r->fidx, (size_t)r->cap * sizeof *r->fidx);
        r->ridx = tn_xrealloc(r->ridx, (size_t)r->cap * sizeof *r->ridx);
    }
    r->rec[r->n] = v, r->fidx[r->n] = f, r->ridx[r->n] = i;
    r->n++;
}

static int json_err(const char *path, const char *text, size_t base, const lj_error *e) {
    size_t line, col;
    lj_linecol(text, base + e->off, &line, &col);
    return tn_err("%s: invalid JSON at line %zu, column %zu (byte %zu): %s", path, line, col, base + e->off, e->msg);
}

static int read_json_records(lf_arena *a, const lf_file *f, int fi, records *r) {
    const char *t = f->bytes;
    size_t n = f->n, i = 0;
    if (n >= 3 && memcmp(t, "\xEF\xBB\xBF", 3) == 0) i = 3;  /* a UTF-8 BOM */
    size_t j = i;
    while (j < n && (t[j] == ' ' || t[j] == '\t' || t[j] == '\n' || t[j] == '\r')) j++;
    lj_error err;
    if (j < n && t[j] == '[') {  /* one JSON array of records */
        const lj_val *root = lj_parse(a, t + i, n - i, &err);
        if (!root) return json_err(f->path, t, i, &err);
        int k = 0;
        for (const lj_val *v = root->child; v; v = v->next, k++) {
            if (v->type != LJ_OBJ)
                return tn_err("%s: record %d: expected an object, got %s", f->path, k, lj_type_name(v->type));
            rec_add(r, v, fi, k);
        }
        return 0;
    }
    /* JSON lines */
    int k = 0;
    for (size_t line = 1; i < n; line++) {
        const char *nl = memchr(t + i, '\n', n - i);
        size_t e = nl ? (size_t)(nl - t) : n;
        size_t s = i;
        while (s < e && (t[s] == ' ' || t[s] == '\t' || t[s] == '\r')) s++;
        if (s < e) {
            const lj_val *v = lj_parse(a, t + i, e - i, &err);
            if (!v) {
                size_t l, col;
                lj_linecol(t + i, err.off, &l, &col);
                return tn_err("%s: line %zu: invalid JSON at column %zu (byte %zu of the file): %s", f->path, line, col,
                              i + err.off, err.msg);
            }
            if (v->type != LJ_OBJ)
                return tn_err("%s: line %zu: expected a JSON object per line, got %s", f->path, line, lj_type_name(v->type));
            rec_add(r, v, fi, k++);
        }
        i = e + 1;
    }
    return 0;
}

/* Text mode with universal newlines (\r\n and \r read as \n), then one record per line. */
static int read_txt_records(lf_arena *a, const lf_file *f, int fi, records *r) {
    const char *t = f->bytes;
    size_t n = f->n, i = 0;
    if (n >= 3 && memcmp(t, "\xEF\xBB\xBF", 3) == 0) i = 3;
    int k = 0;
    while (i < n) {
        size_t e = i;
        while (e < n && t[e] != '\n' && t[e] != '\r') e++;
        size_t bad;
        if (lj_utf8_check(t + i, e - i, &bad) != 0)
            return tn_err("%s: line %d: invalid UTF-8 at byte %zu", f->path, k + 1, i + bad);
        lj_val *obj = lf_alloc(a, sizeof *obj), *s = lf_alloc(a, sizeof *s);
        obj->type = LJ_OBJ, obj->n = 1, obj->child = s;
        s->type = LJ_STR, s->key = "text", s->klen = 4;
        s->s = lf_strndup(a, t + i, e - i), s->n = (uint32_t)(e - i);
        rec_add(r, obj, fi, k++);
        i = e;
        if (i < n && t[i] == '\r') i++;
        else if (i < n && t[i] == '\n') i++;
        if (i < n && t[i] == '\n' && t[i - 1] == '\r') i++;  /* \r\n is one newline */
    }
    return 0;
}

/* ---- alignment ---- */
typedef struct {
    const lf_dsattr *ds;
    lf_arena *a;
    const char *path;      /* file of the current record (in the arena) */
    int rec;
} actx;

/* A text column: null/absent -> NULL; a non-string is an error. */
static int text_of(const actx *c, const lj_val *obj, const char *col, const char *what, const lj_val **out) {
    const lj_val *v = lj_get(obj, col);
    *out = NULL;
    if (!v || v->type == LJ_NULL) return 0;
    if (v->type != LJ_STR)
        return tn_err("%s: record %d: %s '%s' must be a string (got %s)", c->path, c->rec, what, col, lj_type_name(v->type));
    *out = v;
    return 0;
}

static void set_msg(lf_msg *m, int role, const lj_val *v) {
    m->role = role;
    m->s = v ? v->s : "";
    m->n = v ? v->n : 0;
}

static int align_alpaca(const actx *c, const lj_val *r, lf_example *e) {
    const lf_dsattr *d = c->ds;
    const lj_val *hist = d->history ? lj_get(r, d->history) : NULL;
    int nh = hist && hist->type == LJ_ARR ? (int)hist->n : 0;
    e->msg = lf_alloc(c->a, (size_t)(2 * nh + 2) * sizeof *e->msg);
    int k = 0, i = 0;
    for (const lj_val *h = nh ? hist->child : NULL; h; h = h->next, i++) {
        if (h->type != LJ_ARR || h->n != 2)
            return tn_err("%s: record %d: history[%d] must be a pair [query, response]", c->path, c->rec, i);
        for (const lj_val *q = h->child; q; q = q->next) {
            if (q->type != LJ_STR && q->type != LJ_NULL)
                return tn_err("%s: record %d: history[%d] must hold strings (got %s)", c->path, c->rec, i,
                              lj_type_name(q->type));
            set_msg(&e->msg[k], (k % 2) ? LF_ASSISTANT : LF_USER, q->type == LJ_STR ? q : NULL);
            k++;
        }
    }
    const lj_val *p = NULL, *q = NULL, *resp = NULL;
    if (d->prompt && text_of(c, r, d->prompt, "prompt column", &p) != 0) return -1;
    if (d->query && text_of(c, r, d->query, "query column", &q) != 0) return -1;
    if (p && p->n == 0) p = NULL;
    if (q && q->n == 0) q = NULL;
    lf_msg *u = &e->msg[k++];
    u->role = LF_USER;
    if (p && q) {  /* "prompt\nquery" */
        char *s = lf_alloc(c->a, (size_t)p->n + q->n + 2);
        memcpy(s, p->s, p->n);
        s[p->n] = '\n';
        memcpy(s + p->n + 1, q->s, q->n);
        u->s = s, u->n = (size_t)p->n + 1 + q->n;
    } else {
        set_msg(u, LF_USER, p ? p : q);
    }
    e->n_prompt = k;
    const lj_val *rv = d->response ? lj_get(r, d->response) : NULL;
    if (rv && rv->type == LJ_STR) resp = rv;
    if (resp) {
        set_msg(&e->msg[k++], LF_ASSISTANT, resp);
        e->n_resp = 1;
    } else {
        e->bad = "no response (the response column is missing or not a string)";
    }
    return 0;
}

/* *turn_sys = 1 when a leading system turn gives the system prompt (*sys: its text, NULL for null). */
static int align_sharegpt(const actx *c, const lj_val *r, lf_example *e, const lj_val **sys, int *turn_sys) {
    const lf_dsattr *d = c->ds;
    const lj_val *msgs = lj_get(r, d->messages);
    if (!msgs || msgs->type != LJ_ARR)
        return tn_err("%s: record %d: column '%s' must be a list of messages (got %s)", c->path, c->rec, d->messages,
                      msgs ? lj_type_name(msgs->type) : "it is missing");
    const lj_val *m = msgs->child;
    int i = 0;
    for (const lj_val *x = m; x; x = x->next, i++)
        if (x->type != LJ_OBJ)
            return tn_err("%s: record %d: %s[%d] must be an object {%s, %s}", c->path, c->rec, d->messages, i, d->role_tag,
                          d->content_tag);
    *turn_sys = 0, *sys = NULL;
    if (d->system_tag && m && lj_streq(lj_get(m, d->role_tag), d->system_tag)) {
        const lj_val *sv = lj_get(m, d->content_tag);
        if (sv && sv->type != LJ_STR && sv->type != LJ_NULL)
            return tn_err("%s: record %d: the system turn's '%s' must be a string", c->path, c->rec, d->content_tag);
        *turn_sys = 1, *sys = sv && sv->type == LJ_STR ? sv : NULL;
        m = m->next;
    }
    int n = 0;
    for (const lj_val *x = m; x; x = x->next) n++;
    e->msg = lf_alloc(c->a, (size_t)(n ? n : 1) * sizeof *e->msg);
    /* roles first: a broken conversation is dropped whatever its contents */
    int k = 0;
    static const int roles[2][2] = {{LF_USER, LF_OBSERVATION}, {LF_ASSISTANT, LF_FUNCTION}};
    for (const lj_val *x = m; x; x = x->next, k++) {
        const lj_val *role = lj_get(x, d->role_tag);
        const char *odd[2] = {d->user_tag, d->observation_tag}, *even[2] = {d->assistant_tag, d->function_tag};
        const char **acc = (k % 2) ? even : odd;
        int which = -1;
        for (int t = 0; t < 2; t++)
            if (acc[t] && lj_streq(role, acc[t])) which = t;
        if (which < 0) {
            char *why = lf_alloc(c->a, 240), want[128];
            snprintf(want, sizeof want, "%s%s%s", acc[0] ? acc[0] : "", acc[0] && acc[1] ? " or " : "", acc[1] ? acc[1] : "");
            if (role && role->type == LJ_STR)
                snprintf(why, 240, "message %d has role '%.40s' (expected %s)", k, role->s, want);
            else
                snprintf(why, 240, "message %d has %s '%s' (expected %s)", k, role ? "a non-string" : "no", d->role_tag, want);
            e->bad = why;
            return 0;
        }
        e->msg[k].role = roles[k % 2][which];
    }
    if (n % 2 != 0) {
        char *why = lf_alloc(c->a, 80);
        snprintf(why, 80, "odd number of messages (%d)", n);
        e->bad = why;
        return 0;
    }
    if (n == 0) {
        e->bad = "no messages";
        return 0;
    }
    k = 0;
    for (const lj_val *x = m; x; x = x->next, k++) {
        const lj_val *cv = lj_get(x, d->content_tag);
        if (cv && cv->type != LJ_STR && cv->type != LJ_NULL)
            return tn_err("%s: record %d: %s[%d].%s must be a string (got %s)", c->path, c->rec, d->messages, k, d->content_tag,
                          lj_type_name(cv->type));
        set_msg(&e->msg[k], e->msg[k].role, cv && cv->type == LJ_STR ? cv : NULL);
    }
    e->n_prompt = n - 1, e->n_resp = 1;
    return 0;
}

/* os.path.isfile */
static int is_file(const char *path) {
    struct stat st;
    return stat(path, &st) == 0 && S_ISREG(st.st_mode);
}

static int align_images(const actx *c, const lj_val *r, const char *media_dir, lf_example *e) {
    const lj_val *v = lj_get(r, c->ds->images);
    if (!v || v->type == LJ_NULL) return 0;
    if (v->type != LJ_STR && v->type != LJ_ARR)
        return tn_err("%s: record %d: images column '%s' must be an image path or a list of them (got %s)", c->path, c->rec,
                      c->ds->images, lj_type_name(v->type));
    int n = v->type == LJ_STR ? 1 : (int)v->n, k = 0;
    if (n == 0) return 0;
    const char **img = lf_alloc(c->a, (size_t)n * sizeof *img), **raw = lf_alloc(c->a, (size_t)n * sizeof *raw);
    for (const lj_val *x = v->type == LJ_STR ? v : v->child; x && k < n; x = x->next, k++) {
        if (x->type != LJ_STR || x->n == 0 || memchr(x->s, '\0', x->n))
            return tn_err("%s: record %d: %s[%d] must be an image file path (a non-empty string, got %s)", c->path, c->rec,
                          c->ds->images, k, x->type == LJ_STR ? "an empty or NUL-holding string" : lj_type_name(x->type));
        raw[k] = x->s, img[k] = x->s;
        if (media_dir && x->s[0] != '/') {
            char *joined = tn_path_join(media_dir, x->s);
            if (is_file(joined)) img[k] = lf_strndup(c->a, joined, strlen(joined));
            free(joined);
        }
    }
    e->n_img = n, e->img = img, e->img_raw = raw;
    return 0;
}

int lf_align_dataset(const lf_dsattr *ds, const lf_file *files, int n_files, int max_samples, const char *media_dir,
                     lf_examples *out) {
    records r = {0};
    int rc = 0;
    for (int f = 0; f < n_files && rc == 0; f++)
        rc = files[f].type == LF_FILE_TXT ? read_txt_records(&out->arena, &files[f], f, &r)
                                          : read_json_records(&out->arena, &files[f], f, &r);
    if (rc == 0 && r.n == 0) rc = tn_err("%s: dataset '%s' has no records", files[0].path, ds->name);
    /* a mapped column no record has is LF's KeyError */
    const char *cols[] = {ds->prompt, ds->query, ds->response, ds->history, ds->messages, ds->system, ds->tools, ds->images};
    const char *what[] = {"prompt", "query", "response", "history", "messages", "system", "tools", "images"};
    for (size_t k = 0; k < sizeof cols / sizeof *cols && rc == 0 && r.n > 0; k++) {
        if (!cols[k]) continue;
        int found = 0;
        for (int i = 0; i < r.n && !found; i++) found = lj_get(r.rec[i], cols[k]) != NULL;
        if (!found)
            rc = tn_err("%s: dataset '%s': column '%s' (%s) is in no record (check columns in dataset_info.json)",
                        files[0].path, ds->name, cols[k], what[k]);
    }
    int take = max_samples > 0 && max_samples < r.n ? max_samples : r.n;
    const char **paths = tn_xcalloc((size_t)(n_files ? n_files : 1), sizeof *paths);
    for (int f = 0; f < n_files; f++) paths[f] = lf_strndup(&out->arena, files[f].path, strlen(files[f].path));
    const char *dsname = lf_strndup(&out->arena, ds->name, strlen(ds->name));
    for (int i = 0; i < take && rc == 0; i++) {
        if (out->n == out->cap) {
            out->cap = out->cap ? 2 * out->cap : 1024;
            out->ex = tn_xrealloc(out->ex, (size_t)out->cap * sizeof *out->ex);
        }
        lf_example *e = &out->ex[out->n];
        memset(e, 0, sizeof *e);
        actx c = {ds, &out->arena, paths[r.fidx[i]], r.ridx[i]};
        e->file = c.path, e->rec = c.rec, e->dsname = dsname;
        const lj_val *sys = NULL;
        int turn_sys = 0;
        rc = ds->formatting == LF_ALPACA ? align_alpaca(&c, r.rec[i], e) : align_sharegpt(&c, r.rec[i], e, &sys, &turn_sys);
        if (rc == 0 && !turn_sys && ds->system) rc = text_of(&c, r.rec[i], ds->system, "system column", &sys);
        const lj_val *tools = NULL;
        if (rc == 0 && ds->tools) {
            tools = lj_get(r.rec[i], ds->tools);
            if (tools && tools->type == LJ_NULL) tools = NULL;
            if (tools && tools->type != LJ_STR && tools->type != LJ_ARR)
                rc = tn_err("%s: record %d: tools column '%s' must be a JSON string or a list (got %s)", c.path, c.rec,
                            ds->tools, lj_type_name(tools->type));
        }
        if (rc == 0 && ds->images) rc = align_images(&c, r.rec[i], media_dir, e);
        if (rc != 0) break;
        e->system = sys ? sys->s : "", e->nsys = sys ? sys->n : 0;
        if (tools && tools->type == LJ_ARR) {  /* a list in the file: use its JSON text, as if it were a string */
            lf_buf b = {0};
            lj_dump(tools, -1, &b);
            e->tools = lf_strndup(&out->arena, b.p, b.n), e->ntools = b.n;
            free(b.p);
        } else {
            e->tools = tools ? tools->s : "", e->ntools = tools ? tools->n : 0;
        }
        out->n++;
    }
    free(paths);
    free(r.rec), free(r.fidx), free(r.ridx);
    return rc;
}

void lf_examples_free(lf_examples *e) {
    lf_arena_free(&e->arena);
    free(e->ex);
    memset(e, 0, sizeof *e);
}
