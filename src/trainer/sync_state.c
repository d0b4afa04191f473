/* sync_state.c -- see sync_state.h. Lists travel between ranks as one byte blob each:
 * u64 count, then per array: name[64], u64 dtype, u64 n, n values. */
#include "trainer/sync_state.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/core.h"

#define NAME_MAX_LEN 64
#define JOB_FILE "sync-state.safetensors"

typedef struct {
    char name[NAME_MAX_LEN];
    st_dtype dtype;
    size_t n;
    void *data;
} entry;

struct tn_state {
    entry *e;
    int n;
};

tn_state *tn_state_new(void) { return tn_xcalloc(1, sizeof(tn_state)); }

void tn_state_free(tn_state *s) {
    if (!s) return;
    for (int i = 0; i < s->n; i++) free(s->e[i].data);
    free(s->e), free(s);
}

int tn_state_empty(const tn_state *s) { return !s || s->n == 0; }

static entry *find(const tn_state *s, const char *name) {
    for (int i = 0; s && i < s->n; i++)
        if (strcmp(s->e[i].name, name) == 0) return &s->e[i];
    return NULL;
}

void tn_state_put(tn_state *s, const char *name, st_dtype dtype, const void *data, size_t n) {
    if (n == 0) return;
    entry *e = find(s, name);
    if (!e) {
        s->e = tn_xrealloc(s->e, (size_t)(s->n + 1) * sizeof *s->e);
        e = &s->e[s->n++];
        memset(e, 0, sizeof *e);
        snprintf(e->name, sizeof e->name, "%s", name);
    }
    free(e->data);
    e->dtype = dtype, e->n = n;
    e->data = tn_xmalloc(n * st_dtype_size(dtype));
    memcpy(e->data, data, n * st_dtype_size(dtype));
}

const void *tn_state_get(const tn_state *s, const char *name, st_dtype dtype, size_t *n) {
    const entry *e = find(s, name);
    if (!e || e->dtype != dtype) return NULL;
    if (n) *n = e->n;
    return e->data;
}

/* ---- blobs ---- */

static void *serialize(const tn_state *s, size_t *len) {
    size_t total = 8;
    for (int i = 0; s && i < s->n; i++) total += NAME_MAX_LEN + 16 + s->e[i].n * st_dtype_size(s->e[i].dtype);
    if (!s || s->n == 0) {
        *len = 0;
        return NULL;
    }
    unsigned char *b = tn_xmalloc(total), *p = b;
    uint64_t count = (uint64_t)s->n;
    memcpy(p, &count, 8), p += 8;
    for (int i = 0; i < s->n; i++) {
        const entry *e = &s->e[i];
        uint64_t head[2] = {(uint64_t)e->dtype, (uint64_t)e->n};
        memcpy(p, e->name, NAME_MAX_LEN), p += NAME_MAX_LEN;
        memcpy(p, head, 16), p += 16;
        size_t bytes = e->n * st_dtype_size(e->dtype);
        memcpy(p, e->data, bytes), p += bytes;
    }
    *len = total;
    return b;
}

/* Appends the arrays of blob b (len bytes; from this program, checked anyway) whose name starts with
 * prefix (NULL: all) to s. */
static int deserialize(const unsigned char *b, size_t len, const char *prefix, tn_state *s) {
    if (len == 0) return 0;
    uint64_t count;
    if (len < 8) return tn_err("sync state: truncated message");
    memcpy(&count, b, 8);
    size_t at = 8;
    for (uint64_t i = 0; i < count; i++) {
        uint64_t head[2];
        if (len - at < NAME_MAX_LEN + 16) return tn_err("sync state: truncated message");
        char name[NAME_MAX_LEN];
        memcpy(name, b + at, NAME_MAX_LEN);
        name[NAME_MAX_LEN - 1] = 0;
        memcpy(head, b + at + NAME_MAX_LEN, 16);
        at += NAME_MAX_LEN + 16;
        if (head[0] != ST_F32 && head[0] != ST_F64 && head[0] != ST_I64) return tn_err("sync state: bad dtype");
        size_t es = st_dtype_size((st_dtype)head[0]);
        if (head[1] > (len - at) / es) return tn_err("sync state: truncated message");
        if (!prefix || strncmp(name, prefix, strlen(prefix)) == 0)
            tn_state_put(s, name, (st_dtype)head[0], b + at, (size_t)head[1]);
        at += (size_t)head[1] * es;
    }
    return 0;
}

/* ---- files ---- */

static int write_file(const char *dir, const char *name, const tn_state *s) {
    st_entry *e = tn_xcalloc((size_t)s->n, sizeof *e);
    for (int i = 0; i < s->n; i++)
        e[i] = (st_entry){.name = s->e[i].name, .dtype = s->e[i].dtype, .src_dtype = s->e[i].dtype, .ndim = 1,
                          .shape = {(int64_t)s->e[i].n}, .data = s->e[i].data};
    const char *meta[] = {"format", "tandem-sync-state-1", NULL};
    char *path = tn_path_join(dir, name);
    int rc = st_write(path, e, s->n, meta);
    free(path), free(e);
    return rc;
}

/* dir/name into s (nothing when the file does not exist). */
static int read_file(const char *dir, const char *name, tn_state *s) {
    char *path = tn_path_join(dir, name);
    int rc = 0;
    if (tn_file_exists(path)) {
        st_file f;
        if (st_open(&f, path) != 0) {
            free(path);
            return -1;
        }
        for (int i = 0; rc == 0 && i < f.n; i++) {
            const st_tensor *t = &f.tensors[i];
            if (strlen(t->name) >= NAME_MAX_LEN || (t->dtype != ST_F32 && t->dtype != ST_F64 && t->dtype != ST_I64)) {
                rc = tn_err("%s: tensor '%s' is not tandem's sync state", path, t->name);
                break;
            }
            void *v = tn_xmalloc((size_t)(t->numel ? t->numel : 1) * st_dtype_size(t->dtype));
            rc = t->dtype == ST_F32   ? st_read_f32(&f, t, v, t->numel)
                 : t->dtype == ST_F64 ? st_read_f64(&f, t, v, t->numel)
                                      : st_read_i64(&f, t, v, t->numel);
            if (rc == 0) tn_state_put(s, t->name, t->dtype, v, (size_t)t->numel);
            free(v);
        }
        st_close(&f);
    }
    free(path);
    return rc;
}

static void rank_file(char *out, size_t n, int r, int world) {
    snprintf(out, n, "sync-rank-%05d-of-%05d.safetensors", r, world);
}

/* ---- collectives ---- */

static int send_blob(tn_comm *c, const void *b, size_t len, int to) {
    uint64_t l = len;
    if (tn_comm_send(c, &l, 8, to) != 0) return -1;
    return len ? tn_comm_send(c, b, len, to) : 0;
}

static unsigned char *recv_blob(tn_comm *c, size_t *len, int from) {
    uint64_t l = 0;
    *len = 0;
    if (tn_comm_recv(c, &l, 8, from) != 0) return NULL;
    unsigned char *b = tn_xmalloc(l ? l : 1);
    if (l && tn_comm_recv(c, b, l, from) != 0) {
        free(b);
        return NULL;
    }
    *len = l;
    return b;
}

int tn_state_save(tn_comm *c, const char *dir, const tn_state *mine, const tn_state *job) {
    int rank = c ? tn_comm_get_info(c)->rank : 0, world = c ? tn_comm_get_info(c)->size : 1;
    size_t len;
    void *blob = serialize(mine, &len);
    if (rank != 0) {
        int rc = send_blob(c, blob, len, 0);
        free(blob);
        return rc ? tn_err("sending this rank's sync state to rank 0 failed: %s", tn_errmsg()) : 0;
    }
    int rc = tn_state_empty(job) ? 0 : write_file(dir, JOB_FILE, job);
    for (int r = 0; r < world; r++) {
        unsigned char *b = r == 0 ? blob : recv_blob(c, &len, r);
        if (!b && r != 0) {
            if (rc == 0) rc = tn_err("receiving rank %d's sync state failed: %s", r, tn_errmsg());
            continue;
        }
        if (rc == 0 && len > 0) {
            tn_state *s = tn_state_new();
            char name[64];
            rank_file(name, sizeof name, r, world);
            rc = deserialize(b, len, NULL, s);
            if (rc == 0) rc = write_file(dir, name, s);
            tn_state_free(s);
        }
        free(b);
    }
    return rc;
}

int tn_state_load(tn_comm *c, const char *dir, tn_state **mine, tn_state **job) {
    int rank = c ? tn_comm_get_info(c)->rank : 0, world = c ? tn_comm_get_info(c)->size : 1;
    *mine = tn_state_new(), *job = tn_state_new();
    int *node = tn_xcalloc((size_t)world, sizeof *node), me = c ? tn_comm_get_info(c)->node : 0;
    if (c && tn_comm_allgather(c, &me, sizeof me, node) != 0) {
        free(node);
        return tn_err("sync state: machine exchange failed: %s", tn_errmsg());
    }
    int rc = 0;
    size_t len = 0;
    unsigned char *b = NULL;
    if (rank == 0) {
        for (int r = 0; r < world; r++) {
            tn_state *s = tn_state_new();
            char name[64];
            rank_file(name, sizeof name, r, world);
            if (rc == 0) rc = read_file(dir, name, s);
            int first = 0;
            while (node[first] != node[r]) first++;
            if (rc == 0 && first != r) { /* the machine's arrays live in its first rank's file */
                tn_state *m = tn_state_new();
                rank_file(name, sizeof name, first, world);
                rc = read_file(dir, name, m);
                size_t ml;
                void *mb = serialize(m, &ml);
                if (rc == 0) rc = deserialize(mb, ml, "machine.", s);
                free(mb), tn_state_free(m);
            }
            void *sb = serialize(rc == 0 ? s : NULL, &len);
            if (r == 0) {
                if (rc == 0) rc = deserialize(sb, len, NULL, *mine);
            } else if (send_blob(c, sb, len, r) != 0 && rc == 0) {
                rc = tn_err("sending rank %d its sync state failed: %s", r, tn_errmsg());
            }
            free(sb), tn_state_free(s);
        }
        if (rc == 0) rc = read_file(dir, JOB_FILE, *job);
        b = serialize(rc == 0 ? *job : NULL, &len);
    } else {
        b = recv_blob(c, &len, 0);
        if (!b) rc = tn_err("receiving this rank's sync state failed: %s", tn_errmsg());
        else rc = deserialize(b, len, NULL, *mine);
        free(b);
        b = NULL;
    }
    /* the job's list: its length, then the bytes, from rank 0 to all */
    uint64_t jl = len;
    if (c && world > 1) {
        if (tn_comm_bcast(c, &jl, 8, 0) != 0) jl = 0, rc = -1;
        if (rank != 0) b = tn_xmalloc(jl ? jl : 1);
        if (jl && tn_comm_bcast(c, b, jl, 0) != 0) rc = -1;
        if (rc == 0 && rank != 0) rc = deserialize(b, jl, NULL, *job);
    }
    free(b), free(node);
    return rc;
}
