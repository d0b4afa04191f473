/* api.c -- see api.h. Threads: libmicrohttpd's (one per connection: parse, validate, tokenize, queue, then wait
 * for or stream the answer) and one engine thread (admits queued requests into free sequences, runs the steps,
 * turns tokens into text and SSE chunks). One mutex guards the queue and every request's output; the engine runs
 * a step without it. */
#include "serve/api.h"

#include <cjson/cJSON.h>
#include <pthread.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "core/core.h"
#include "infer/infer.h"
#include "serve/http.h"

enum { R_QUEUED, R_RUNNING, R_DONE };

typedef struct request request;
struct request {
    int refs, state, cancelled, slot, stream, include_usage;
    tn_ids prompt;
    tn_sampling sp;
    char id[48], *model;
    long created;
    tn_text_stream ts;
    char *text;                  /* the whole answer so far */
    size_t text_len;
    char *sse;                   /* SSE bytes not yet handed to the connection */
    size_t sse_len, sse_cap;
    int completion_tokens;
    const char *finish;
    char error[256];
    request *next;
};

typedef struct {
    tn_infer inf;
    tn_gen *g;
    int n_slots, ctx, max_queue, queued;
    request *head, *tail, **running;
    pthread_mutex_t mu, tok_mu;
    pthread_cond_t wake, out;
    int stop;
    pthread_t engine;
    char model_name[128];
    const char *key;
    uint64_t seeds;
    double t_start;
} api;

/* ---------------------------------------------------------------- requests */

static void unref(request *r) { /* under mu */
    if (--r->refs) return;
    tn_ids_free(&r->prompt);
    free(r->model), free(r->text), free(r->sse);
    free(r);
}

static void sse_put(request *r, const char *s, size_t n) {
    if (r->sse_len + n > r->sse_cap) {
        r->sse_cap = (r->sse_len + n) * 2 + 256;
        r->sse = tn_xrealloc(r->sse, r->sse_cap);
    }
    memcpy(r->sse + r->sse_len, s, n);
    r->sse_len += n;
}

/* data: <json>\n\n of j (consumed) */
static void sse_json(request *r, cJSON *j) {
    char *s = cJSON_PrintUnformatted(j);
    cJSON_Delete(j);
    if (!s) tn_die("out of memory formatting JSON");
    sse_put(r, "data: ", 6);
    sse_put(r, s, strlen(s));
    sse_put(r, "\n\n", 2);
    free(s);
}

static cJSON *chunk(const request *r, cJSON *delta, const char *finish) {
    cJSON *j = cJSON_CreateObject(), *choices = cJSON_AddArrayToObject(j, "choices");
    cJSON_AddStringToObject(j, "id", r->id);
    cJSON_AddStringToObject(j, "object", "chat.completion.chunk");
    cJSON_AddNumberToObject(j, "created", (double)r->created);
    cJSON_AddStringToObject(j, "model", r->model);
    if (delta) {
        cJSON *c = cJSON_CreateObject();
        cJSON_AddNumberToObject(c, "index", 0);
        cJSON_AddItemToObject(c, "delta", delta);
        if (finish) cJSON_AddStringToObject(c, "finish_reason", finish);
        else cJSON_AddNullToObject(c, "finish_reason");
        cJSON_AddItemToArray(choices, c);
    }
    return j;
}

static cJSON *usage(const request *r) {
    cJSON *u = cJSON_CreateObject();
    cJSON_AddNumberToObject(u, "prompt_tokens", (double)r->prompt.n);
    cJSON_AddNumberToObject(u, "completion_tokens", r->completion_tokens);
    cJSON_AddNumberToObject(u, "total_tokens", (double)r->prompt.n + r->completion_tokens);
    return u;
}

/* ---------------------------------------------------------------- engine */

static void finish(api *a, request *r, const char *reason) { /* under mu */
    r->finish = reason;
    r->state = R_DONE;
    if (r->stream && !r->cancelled) {
        if (r->error[0]) {
            cJSON *j = cJSON_CreateObject(), *e = cJSON_AddObjectToObject(j, "error");
            cJSON_AddStringToObject(e, "message", r->error);
            cJSON_AddStringToObject(e, "type", "server_error");
            cJSON_AddNumberToObject(e, "code", 500);
            sse_json(r, j);
        } else {
            sse_json(r, chunk(r, cJSON_CreateObject(), reason));
            if (r->include_usage) {
                cJSON *j = chunk(r, NULL, NULL);
                cJSON_AddItemToObject(j, "usage", usage(r));
                sse_json(r, j);
            }
        }
        sse_put(r, "data: [DONE]\n\n", 14);
    }
    pthread_cond_broadcast(&a->out);
    unref(r);
}

static void on_token(api *a, request *r, const tn_gen_event *ev) { /* under mu */
    r->completion_tokens++;
    int n;
    const int32_t *ids = tn_gen_output(a->g, ev->slot, &n);
    pthread_mutex_lock(&a->tok_mu);
    char *piece = tn_text_next(&r->ts, a->inf.tok, ids, n, ev->finish != TN_FINISH_NONE);
    pthread_mutex_unlock(&a->tok_mu);
    size_t pl = strlen(piece);
    r->text = tn_xrealloc(r->text, r->text_len + pl + 1);
    memcpy(r->text + r->text_len, piece, pl + 1);
    r->text_len += pl;
    if (r->stream && pl) {
        cJSON *d = cJSON_CreateObject();
        cJSON_AddStringToObject(d, "content", piece);
        sse_json(r, chunk(r, d, NULL));
    }
    free(piece);
    pthread_cond_broadcast(&a->out);
}

/* Queued requests into free sequences; cancelled ones out. Under mu. */
static void admit(api *a) {
    for (int s = 0; s < a->n_slots; s++) {
        request *r = a->running[s];
        if (r && r->cancelled) {
            tn_gen_release(a->g, s);
            a->running[s] = NULL;
            finish(a, r, "stop");
        }
    }
    for (request **p = &a->head, *prev = NULL; *p;) { /* a client that left while queued leaves the queue now */
        request *r = *p;
        if (!r->cancelled) {
            prev = r, p = &r->next;
            continue;
        }
        *p = r->next, a->queued--;
        if (a->tail == r) a->tail = prev;
        finish(a, r, "stop");
    }
    for (int s = 0; s < a->n_slots && a->head; s++) {
        if (a->running[s]) continue;
        request *r = a->head;
        a->head = r->next, a->queued--;
        if (!a->head) a->tail = NULL;
        if (tn_gen_start(a->g, s, r->prompt.ids, (int)r->prompt.n, &r->sp, a->inf.stop, a->inf.n_stop) != 0) {
            snprintf(r->error, sizeof r->error, "%s", tn_errmsg());
            finish(a, r, "stop");
            s--;
            continue;
        }
        r->state = R_RUNNING, r->slot = s;
        a->running[s] = r;
        if (r->stream) {
            cJSON *d = cJSON_CreateObject();
            cJSON_AddStringToObject(d, "role", "assistant");
            cJSON_AddStringToObject(d, "content", "");
            sse_json(r, chunk(r, d, NULL));
            pthread_cond_broadcast(&a->out);
        }
    }
}

static void *engine(void *arg) {
    api *a = arg;
    tn_gen_event *ev = tn_xcalloc((size_t)a->n_slots, sizeof *ev);
    pthread_mutex_lock(&a->mu);
    while (!a->stop) {
        admit(a);
        if (!tn_gen_n_running(a->g)) {
            pthread_cond_wait(&a->wake, &a->mu);
            continue;
        }
        pthread_mutex_unlock(&a->mu);
        int n = tn_gen_step(a->g, ev);
        pthread_mutex_lock(&a->mu);
        if (n < 0) { /* a failed step: every running request ends with the error */
            for (int s = 0; s < a->n_slots; s++) {
                request *r = a->running[s];
                if (!r) continue;
                snprintf(r->error, sizeof r->error, "generation failed: %s", tn_errmsg());
                tn_gen_release(a->g, s);
                a->running[s] = NULL;
                finish(a, r, "stop");
            }
            continue;
        }
        for (int i = 0; i < n; i++) {
            request *r = a->running[ev[i].slot];
            if (!r) continue;
            on_token(a, r, &ev[i]);
            if (ev[i].finish == TN_FINISH_NONE) continue;
            tn_gen_release(a->g, ev[i].slot); /* the server keeps no conversation: its memory goes back at once */
            a->running[ev[i].slot] = NULL;
            finish(a, r, ev[i].finish == TN_FINISH_STOP ? "stop" : "length");
        }
    }
    pthread_mutex_unlock(&a->mu);
    free(ev);
    return NULL;
}

/* ---------------------------------------------------------------- parsing a chat request */

typedef struct {
    int status;
    const char *type, *param;
    char msg[512];
} failure;

static int fail(failure *f, int status, const char *param, const char *fmt, ...) TN_PRINTF(4, 5);
static int fail(failure *f, int status, const char *param, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(f->msg, sizeof f->msg, fmt, ap);
    va_end(ap);
    f->status = status, f->param = param;
    f->type = status == 401 ? "authentication_error" : status == 404 ? "not_found_error" : "invalid_request_error";
    return -1;
}

/* the text of a message's content: a string, or a list of {"type": "text", "text": ...} parts */
static int content_text(const cJSON *c, int i, char **out, failure *f) {
    if (cJSON_IsString(c)) {
        *out = tn_xstrdup(c->valuestring);
        return 0;
    }
    if (!cJSON_IsArray(c)) return fail(f, 400, "messages", "messages[%d].content must be a string or a list of parts", i);
    size_t len = 0;
    char *s = tn_xstrdup("");
    for (const cJSON *p = c->child; p; p = p->next) {
        const cJSON *type = cJSON_GetObjectItemCaseSensitive(p, "type"), *t = cJSON_GetObjectItemCaseSensitive(p, "text");
        if (!cJSON_IsString(type) || strcmp(type->valuestring, "text") || !cJSON_IsString(t)) {
            free(s);
            return fail(f, 400, "messages", "messages[%d].content: only text parts are supported (type \"text\")", i);
        }
        size_t k = strlen(t->valuestring);
        s = tn_xrealloc(s, len + k + 1);
        memcpy(s + len, t->valuestring, k + 1);
        len += k;
    }
    *out = s;
    return 0;
}

/* LF's message rules: optional leading system, then user/assistant alternating, ending with user */
static int parse_messages(const cJSON *msgs, char **system, char ***turns, int *n_turns, failure *f) {
    if (!cJSON_IsArray(msgs)) return fail(f, 400, "messages", "'messages' is required: a list of {role, content}");
    int n = cJSON_GetArraySize(msgs), i = 0, k = 0;
    if (n == 0) return fail(f, 400, "messages", "'messages' is empty");
    *turns = tn_xcalloc((size_t)n, sizeof **turns);
    for (const cJSON *m = msgs->child; m; m = m->next, i++) {
        const cJSON *role = cJSON_GetObjectItemCaseSensitive(m, "role");
        const cJSON *content = cJSON_GetObjectItemCaseSensitive(m, "content");
        if (!cJSON_IsObject(m) || !cJSON_IsString(role) || !content)
            return fail(f, 400, "messages", "messages[%d] needs a string 'role' and a 'content'", i);
        const char *want = k % 2 ? "assistant" : "user";
        if (i == 0 && !strcmp(role->valuestring, "system")) {
            if (content_text(content, i, system, f) != 0) return -1;
            continue;
        }
        if (strcmp(role->valuestring, want))
            return fail(f, 400, "messages", "messages[%d]: role '%.40s' where '%s' was expected (after an optional system "
                        "message, user and assistant alternate, ending with user)", i, role->valuestring, want);
        if (content_text(content, i, &(*turns)[k++], f) != 0) return -1;
    }
    *n_turns = k;
    if (k % 2 == 0) return fail(f, 400, "messages", "the last message must be the user's (roles alternate user, assistant, ..., user)");
    return 0;
}

static int number(const cJSON *j, const char *key, double lo, double hi, double *out, failure *f) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(j, key);
    if (!v || cJSON_IsNull(v)) return 0;
    if (!cJSON_IsNumber(v) || !(v->valuedouble >= lo && v->valuedouble <= hi))
        return fail(f, 400, key, "'%s' must be a number in [%g, %g]", key, lo, hi);
    *out = v->valuedouble;
    return 1;
}

/* 1 when s[0..n) is well-formed UTF-8 (JSON text must be; echoed strings would otherwise break the answer's JSON) */
static int utf8_ok(const unsigned char *s, size_t n) {
    for (size_t i = 0; i < n;) {
        unsigned c = s[i];
        size_t k = c < 0x80 ? 1 : (c >> 5) == 6 ? 2 : (c >> 4) == 14 ? 3 : (c >> 3) == 30 ? 4 : 0;
        if (!k || i + k > n || (k == 2 && c < 0xC2)) return 0;
        unsigned cp = k == 1 ? c : c & (0x7Fu >> k);
        for (size_t j = 1; j < k; j++) {
            if ((s[i + j] & 0xC0) != 0x80) return 0;
            cp = cp << 6 | (s[i + j] & 0x3F);
        }
        if ((k == 3 && (cp < 0x800 || (cp >= 0xD800 && cp < 0xE000))) || (k == 4 && (cp < 0x10000 || cp > 0x10FFFF)))
            return 0;
        i += k;
    }
    return 1;
}

/* The request's settings over the YAML's defaults; its prompt tokenized. 0 or -1 with f filled. */
static int parse_request(api *a, const char *body, size_t n, request *r, failure *f) {
    if (!utf8_ok((const unsigned char *)body, n)) return fail(f, 400, NULL, "the request body is not valid UTF-8");
    cJSON *j = cJSON_ParseWithLength(body, n);
    if (!j || !cJSON_IsObject(j)) {
        cJSON_Delete(j);
        return fail(f, 400, NULL, "the request body is not a JSON object");
    }
    char *system = NULL, **turns = NULL;
    int n_turns = 0, rc = 0;
    const cJSON *model = cJSON_GetObjectItemCaseSensitive(j, "model");
    const cJSON *stream = cJSON_GetObjectItemCaseSensitive(j, "stream");
    const cJSON *opts = cJSON_GetObjectItemCaseSensitive(j, "stream_options");
    const cJSON *do_sample = cJSON_GetObjectItemCaseSensitive(j, "do_sample");
    if (!cJSON_IsString(model)) rc = fail(f, 400, "model", "'model' is required (a string)");
    if (rc == 0 && stream && !cJSON_IsBool(stream) && !cJSON_IsNull(stream)) rc = fail(f, 400, "stream", "'stream' must be true or false");
    if (rc == 0 && cJSON_GetObjectItemCaseSensitive(j, "tools"))
        rc = fail(f, 400, "tools", "tools are not supported by this server yet");
    r->sp = tn_infer_sampling(&a->inf, 0);
    double v = 1, seed = -1;
    if (rc == 0) {
        int got = number(j, "n", 1, 1, &v, f);
        if (got < 0) rc = fail(f, 400, "n", "only n = 1 is supported");
    }
    if (rc == 0 && (rc = number(j, "max_tokens", 1, 1e9, &v, f)) > 0) r->sp.max_new = (int)v;
    if (rc >= 0 && (rc = number(j, "max_completion_tokens", 1, 1e9, &v, f)) > 0) r->sp.max_new = (int)v;
    if (rc >= 0 && (rc = number(j, "temperature", 0, 100, &v, f)) > 0) {
        r->sp.temperature = v;
        if (v == 0) r->sp.do_sample = 0;
    }
    if (rc >= 0 && (rc = number(j, "top_p", 1e-9, 1, &v, f)) > 0) r->sp.top_p = v;
    if (rc >= 0 && (rc = number(j, "top_k", 0, 1e9, &v, f)) > 0) r->sp.top_k = (int)v;
    if (rc >= 0 && (rc = number(j, "presence_penalty", -2, 2, &v, f)) > 0 && v > 0) r->sp.repetition_penalty = v;
    if (rc >= 0 && (rc = number(j, "seed", -9.2e18, 9.2e18, &seed, f)) >= 0) rc = 0;
    if (rc == 0 && do_sample && !cJSON_IsNull(do_sample)) {
        if (!cJSON_IsBool(do_sample)) rc = fail(f, 400, "do_sample", "'do_sample' must be true or false");
        else r->sp.do_sample = cJSON_IsTrue(do_sample);
    }
    if (rc == 0) rc = parse_messages(cJSON_GetObjectItemCaseSensitive(j, "messages"), &system, &turns, &n_turns, f);
    if (rc == 0) {
        r->stream = cJSON_IsTrue(stream);
        const cJSON *inc = opts ? cJSON_GetObjectItemCaseSensitive(opts, "include_usage") : NULL;
        r->include_usage = r->stream && cJSON_IsTrue(inc);
        r->model = tn_xstrdup(model->valuestring);
        pthread_mutex_lock(&a->tok_mu);
        r->sp.seed = seed >= 0 ? (uint64_t)seed : (uint64_t)time(NULL) ^ (0x9E3779B97F4A7C15ull * ++a->seeds);
        int prc = tn_infer_prompt(&a->inf, system, (const char *const *)turns, n_turns, &r->prompt);
        pthread_mutex_unlock(&a->tok_mu);
        if (prc != 0) rc = fail(f, 400, "messages", "%s", tn_errmsg());
    }
    if (rc == 0 && (int)r->prompt.n > a->ctx - 1)
        rc = fail(f, 400, "messages", "the prompt has %zu tokens; this server's context is %d tokens (prompt and answer), "
                  "so a prompt may have at most %d", r->prompt.n, a->ctx, a->ctx - 1);
    if (rc == 0 && r->sp.max_new > a->ctx - (int)r->prompt.n) r->sp.max_new = a->ctx - (int)r->prompt.n;
    for (int i = 0; i < n_turns; i++) free(turns[i]);
    free(turns), free(system);
    cJSON_Delete(j);
    return rc < 0 ? -1 : 0;
}

/* ---------------------------------------------------------------- answering */

typedef struct {
    api *a;
    request *r;
} stream_ctx;

static ssize_t sse_next(void *ctx, char *buf, size_t max) {
    stream_ctx *sc = ctx;
    api *a = sc->a;
    request *r = sc->r;
    pthread_mutex_lock(&a->mu);
    if (!r->sse_len && r->state != R_DONE) {
        struct timespec ts;
        clock_gettime(CLOCK_REALTIME, &ts);
        ts.tv_nsec += 100000000;
        if (ts.tv_nsec >= 1000000000) ts.tv_sec++, ts.tv_nsec -= 1000000000;
        pthread_cond_timedwait(&a->out, &a->mu, &ts);
    }
    ssize_t k = 0;
    if (r->sse_len) {
        k = (ssize_t)(r->sse_len < max ? r->sse_len : max);
        memcpy(buf, r->sse, (size_t)k);
        memmove(r->sse, r->sse + k, r->sse_len - (size_t)k);
        r->sse_len -= (size_t)k;
    } else if (r->state == R_DONE) {
        k = -1;
    }
    pthread_mutex_unlock(&a->mu);
    return k;
}

static void sse_done(void *ctx, int gone) {
    stream_ctx *sc = ctx;
    api *a = sc->a;
    pthread_mutex_lock(&a->mu);
    if (gone && sc->r->state != R_DONE) sc->r->cancelled = 1, pthread_cond_signal(&a->wake); /* frees its sequence */
    unref(sc->r);
    pthread_mutex_unlock(&a->mu);
    free(sc);
}

static void answer_whole(api *a, tn_http_req *hr, request *r) {
    pthread_mutex_lock(&a->mu);
    while (r->state != R_DONE) {
        struct timespec ts;
        clock_gettime(CLOCK_REALTIME, &ts);
        ts.tv_nsec += 100000000;
        if (ts.tv_nsec >= 1000000000) ts.tv_sec++, ts.tv_nsec -= 1000000000;
        pthread_cond_timedwait(&a->out, &a->mu, &ts);
        if (r->state != R_DONE && !r->cancelled && tn_http_client_gone(hr)) {
            r->cancelled = 1;
            pthread_cond_signal(&a->wake);
        }
    }
    cJSON *j = NULL;
    if (!r->error[0] && !r->cancelled) {
        j = cJSON_CreateObject();
        cJSON_AddStringToObject(j, "id", r->id);
        cJSON_AddStringToObject(j, "object", "chat.completion");
        cJSON_AddNumberToObject(j, "created", (double)r->created);
        cJSON_AddStringToObject(j, "model", r->model);
        cJSON *choices = cJSON_AddArrayToObject(j, "choices"), *c = cJSON_CreateObject(), *msg = cJSON_CreateObject();
        cJSON_AddNumberToObject(c, "index", 0);
        cJSON_AddStringToObject(msg, "role", "assistant");
        cJSON_AddStringToObject(msg, "content", r->text ? r->text : "");
        cJSON_AddItemToObject(c, "message", msg);
        cJSON_AddStringToObject(c, "finish_reason", r->finish);
        cJSON_AddItemToArray(choices, c);
        cJSON_AddItemToObject(j, "usage", usage(r));
    }
    char err[256];
    snprintf(err, sizeof err, "%s", r->error);
    unref(r);
    pthread_mutex_unlock(&a->mu);
    if (!j) {
        tn_http_respond_error(hr, 500, "server_error", NULL, err[0] ? err : "the request was cancelled", NULL);
        return;
    }
    char *s = cJSON_PrintUnformatted(j);
    cJSON_Delete(j);
    tn_http_respond_json(hr, 200, s);
    free(s);
}

static void chat(api *a, tn_http_req *hr) {
    size_t n;
    const char *body = tn_http_body(hr, &n);
    request *r = tn_xcalloc(1, sizeof *r);
    failure f = {0};
    if (parse_request(a, body, n, r, &f) != 0) {
        tn_http_respond_error(hr, f.status, f.type, f.param, f.msg, NULL);
        r->refs = 1;
        pthread_mutex_lock(&a->mu);
        unref(r);
        pthread_mutex_unlock(&a->mu);
        return;
    }
    r->created = (long)time(NULL);
    tn_rng rng;
    tn_rng_seed(&rng, r->sp.seed ^ (uint64_t)(tn_now() * 1e9));
    snprintf(r->id, sizeof r->id, "chatcmpl-%016llx%016llx", (unsigned long long)tn_rng_next(&rng),
             (unsigned long long)tn_rng_next(&rng));
    r->refs = 2; /* the connection's and the engine's */
    pthread_mutex_lock(&a->mu);
    int free_slots = 0;
    for (int s = 0; s < a->n_slots; s++) free_slots += !a->running[s];
    if (a->queued >= a->max_queue + free_slots) {
        pthread_mutex_unlock(&a->mu);
        static const char *const retry[] = {"Retry-After: 1", NULL};
        char m[160];
        snprintf(m, sizeof m, "the server is busy: %d requests are waiting already; retry shortly", a->max_queue);
        tn_http_respond_error(hr, 429, "rate_limit_error", NULL, m, retry);
        pthread_mutex_lock(&a->mu);
        r->refs = 1;
        unref(r);
        pthread_mutex_unlock(&a->mu);
        return;
    }
    if (a->tail) a->tail->next = r;
    else a->head = r;
    a->tail = r, a->queued++;
    pthread_cond_signal(&a->wake);
    pthread_mutex_unlock(&a->mu);
    if (!r->stream) {
        answer_whole(a, hr, r);
        return;
    }
    stream_ctx *sc = tn_xmalloc(sizeof *sc);
    sc->a = a, sc->r = r;
    tn_http_stream(hr, sse_next, sse_done, sc);
}

static void models(api *a, tn_http_req *hr) {
    char body[512];
    snprintf(body, sizeof body,
             "{\"object\":\"list\",\"data\":[{\"id\":\"%s\",\"object\":\"model\",\"created\":%ld,\"owned_by\":\"owner\"}]}",
             a->model_name, (long)time(NULL));
    tn_http_respond_json(hr, 200, body);
}

/* constant-time comparison of the bearer token */
static int key_ok(const api *a, tn_http_req *hr) {
    if (!a->key) return 1;
    const char *h = tn_http_header(hr, "Authorization");
    if (!h || strncmp(h, "Bearer ", 7)) return 0;
    const char *t = h + 7;
    size_t n = strlen(t), k = strlen(a->key);
    unsigned diff = (unsigned)(n != k);
    for (size_t i = 0; i < n && i < k; i++) diff |= (unsigned)(t[i] ^ a->key[i]);
    return diff == 0;
}

static void handle(void *ctx, tn_http_req *hr) {
    api *a = ctx;
    const char *m = tn_http_method(hr), *p = tn_http_path(hr);
    int is_models = !strcmp(p, "/v1/models"), is_chat = !strcmp(p, "/v1/chat/completions");
    if (!is_models && !is_chat) {
        char msg[200];
        snprintf(msg, sizeof msg, "no route %.100s: this server has GET /v1/models and POST /v1/chat/completions", p);
        for (char *c = msg; *c; c++) *c = (unsigned char)*c < 0x20 ? '?' : *c;
        tn_http_respond_error(hr, 404, "not_found_error", NULL, msg, NULL);
        return;
    }
    if (!key_ok(a, hr)) {
        tn_http_respond_error(hr, 401, "authentication_error", NULL, "Invalid API key.", NULL);
        return;
    }
    if ((is_models && strcmp(m, "GET")) || (is_chat && strcmp(m, "POST"))) {
        static const char *const allow_get[] = {"Allow: GET", NULL}, *const allow_post[] = {"Allow: POST", NULL};
        tn_http_respond_error(hr, 405, "invalid_request_error", NULL, is_models ? "use GET" : "use POST",
                              is_models ? allow_get : allow_post);
        return;
    }
    if (is_models) models(a, hr);
    else chat(a, hr);
}

/* ---------------------------------------------------------------- main */

static int env_int(const char *name, int dflt, int lo, int hi, int *out) {
    const char *v = getenv(name);
    if (!v || !*v) {
        *out = dflt;
        return 0;
    }
    char *end;
    long x = strtol(v, &end, 10);
    if (*end || x < lo || x > hi) return tn_err("%s=%s: expected an integer in [%d, %d]", name, v, lo, hi);
    *out = (int)x;
    return 0;
}

int tn_api_main(int argc, char **argv) {
    static tn_train_config cfg;
    static api a;
    if (argc < 1 || strchr(argv[0], '='))
        return fprintf(stderr, "tandem: error: api needs a config file: tandem api CONFIG.yaml [key=value ...]\n"), 1;
    int rc = tn_train_config_load(argv[0], &cfg);
    for (int i = 1; i < argc && rc == 0; i++)
        rc = strchr(argv[i], '=') ? tn_train_config_override(&cfg, argv[i])
                                  : tn_err("command line: '%s' is not key=value", argv[i]);
    if (rc == 0) rc = tn_train_config_finish(&cfg);
    if (rc == 0) rc = tn_train_config_check_model_paths(&cfg);
    int port = 8000, max_body = 1 << 20, ctx_cap = 4096;
    if (rc == 0) rc = env_int("API_PORT", 8000, 0, 65535, &port);
    if (rc == 0) rc = env_int("MAX_CONCURRENT", 8, 1, 1024, &a.n_slots);
    if (rc == 0) rc = env_int("API_MAX_QUEUE", 64, 0, 1 << 20, &a.max_queue);
    if (rc == 0) rc = env_int("API_MAX_BODY", 1 << 20, 1024, 1 << 30, &max_body);
    if (rc == 0) rc = env_int("API_CONTEXT", 4096, 2, 1 << 20, &ctx_cap);
    const char *key = getenv("API_KEY"), *host = getenv("API_HOST"), *name = getenv("API_MODEL_NAME");
    a.key = key && *key ? key : NULL;
    snprintf(a.model_name, sizeof a.model_name, "%s", name && *name ? name : "gpt-3.5-turbo");
    if (rc == 0 && !tn_http_is_loopback(host) && !a.key)
        rc = tn_err("API_HOST=%s would answer beyond this machine without a key: set API_KEY (clients then send "
                    "'Authorization: Bearer KEY'), or leave API_HOST unset for 127.0.0.1", host);
    if (rc == 0) tn_train_config_print_notices(&cfg, stderr);
    if (rc == 0) rc = tn_infer_open(&a.inf, &cfg, 1);
    if (rc == 0) {
        a.ctx = tn_infer_context(&a.inf, ctx_cap);
        if (!(a.g = tn_gen_create(a.inf.m, a.n_slots, a.ctx))) rc = -1;
    }
    tn_http *srv = NULL;
    sigset_t stop_set; /* SIGINT / SIGTERM: taken by sigwait below, not by whichever thread they happen to hit */
    sigemptyset(&stop_set), sigaddset(&stop_set, SIGINT), sigaddset(&stop_set, SIGTERM);
    pthread_sigmask(SIG_BLOCK, &stop_set, NULL);
    signal(SIGPIPE, SIG_IGN);
    if (rc == 0) {
        pthread_mutex_init(&a.mu, NULL), pthread_mutex_init(&a.tok_mu, NULL);
        pthread_cond_init(&a.wake, NULL), pthread_cond_init(&a.out, NULL);
        a.running = tn_xcalloc((size_t)a.n_slots, sizeof *a.running);
        if (pthread_create(&a.engine, NULL, engine, &a) != 0) rc = tn_err("cannot start the engine thread");
    }
    if (rc == 0) {
        tn_http_opts o = {.host = host, .port = port, .max_body = (size_t)max_body,
                          .max_connections = 4 * (a.n_slots + a.max_queue) + 16, .authenticated = a.key != NULL};
        if (!(srv = tn_http_start(&o, handle, &a))) rc = -1;
    }
    if (rc != 0) {
        fprintf(stderr, "tandem: error: %s\n", tn_errmsg());
        if (a.running) {
            pthread_mutex_lock(&a.mu);
            a.stop = 1;
            pthread_cond_signal(&a.wake);
            pthread_mutex_unlock(&a.mu);
            pthread_join(a.engine, NULL);
        }
        tn_gen_free(a.g);
        tn_infer_close(&a.inf);
        return 1;
    }
    printf("tandem api: %s%s%s as \"%s\" on http://%s:%d/v1 (%d sequences decoded together, context %d tokens, "
           "queue %d%s); Ctrl-C stops\n", cfg.model_name_or_path, cfg.adapter_name_or_path[0] ? " + " : "",
           cfg.adapter_name_or_path, a.model_name, host && *host ? host : "127.0.0.1", tn_http_port(srv), a.n_slots,
           a.ctx, a.max_queue, a.key ? ", API_KEY required" : "");
    fflush(stdout);
    int sig;
    sigwait(&stop_set, &sig);
    tn_http_stop(srv);
    pthread_mutex_lock(&a.mu);
    a.stop = 1;
    pthread_cond_signal(&a.wake);
    pthread_mutex_unlock(&a.mu);
    pthread_join(a.engine, NULL);
    tn_gen_free(a.g);
    free(a.running);
    tn_infer_close(&a.inf);
    printf("tandem api: stopped\n");
    return 0;
}
