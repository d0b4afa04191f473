/* http.c -- see http.h. */
#include "serve/http.h"

#include <arpa/inet.h>
#include <microhttpd.h>
#include <netdb.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>

#include "core/core.h"

struct tn_http {
    struct MHD_Daemon *d;
    tn_http_handler handler;
    void *ctx;
    size_t max_body;
    int port;
};

struct tn_http_req {
    tn_http *srv;
    struct MHD_Connection *c;
    const char *method, *url;
    char *body;
    size_t n, cap;
    int too_large, answered;
};

typedef struct {
    tn_http_req *req; /* for client_gone */
    struct MHD_Connection *c;
    tn_sse_next next;
    tn_sse_done done;
    void *ctx;
    int ended, gone;
} stream_state;

int tn_http_is_loopback(const char *host) {
    if (!host || !*host || !strcmp(host, "localhost") || !strcmp(host, "::1")) return 1;
    struct in_addr a;
    return inet_pton(AF_INET, host, &a) == 1 && (ntohl(a.s_addr) >> 24) == 127;
}

const char *tn_http_method(const tn_http_req *r) { return r->method; }
const char *tn_http_path(const tn_http_req *r) { return r->url; }
const char *tn_http_header(const tn_http_req *r, const char *name) {
    return MHD_lookup_connection_value(r->c, MHD_HEADER_KIND, name);
}
const char *tn_http_query(const tn_http_req *r, const char *name) {
    return MHD_lookup_connection_value(r->c, MHD_GET_ARGUMENT_KIND, name);
}
const char *tn_http_body(const tn_http_req *r, size_t *n) {
    *n = r->n;
    return r->body ? r->body : "";
}

static int conn_gone(struct MHD_Connection *c) {
    const union MHD_ConnectionInfo *ci = MHD_get_connection_info(c, MHD_CONNECTION_INFO_CONNECTION_FD);
    if (!ci) return 1;
    char b;
    ssize_t k = recv(ci->connect_fd, &b, 1, MSG_PEEK | MSG_DONTWAIT);
    return k == 0; /* orderly shutdown by the peer; -1 (EAGAIN) is a live idle client */
}
int tn_http_client_gone(tn_http_req *r) { return conn_gone(r->c); }

void tn_http_respond(tn_http_req *r, int status, const char *content_type, const char *body, size_t n,
                     const char *const *extra_headers) {
    if (r->answered) return;
    struct MHD_Response *resp = MHD_create_response_from_buffer(n, (void *)body, MHD_RESPMEM_MUST_COPY);
    if (!resp) return;
    MHD_add_response_header(resp, "Content-Type", content_type);
    for (int i = 0; extra_headers && extra_headers[i]; i++) {
        char name[64];
        const char *colon = strchr(extra_headers[i], ':');
        if (!colon || (size_t)(colon - extra_headers[i]) >= sizeof name) continue;
        memcpy(name, extra_headers[i], (size_t)(colon - extra_headers[i]));
        name[colon - extra_headers[i]] = '\0';
        MHD_add_response_header(resp, name, colon + 1 + (colon[1] == ' '));
    }
    MHD_queue_response(r->c, (unsigned)status, resp);
    MHD_destroy_response(resp);
    r->answered = 1;
}

void tn_http_respond_json(tn_http_req *r, int status, const char *json) {
    tn_http_respond(r, status, "application/json", json, strlen(json), NULL);
}

/* JSON string literal of s into out (at most cap bytes, always terminated) */
static void json_str(char *out, size_t cap, const char *s) {
    size_t k = 0;
    out[k++] = '"';
    for (; *s && k + 8 < cap; s++) {
        unsigned char ch = (unsigned char)*s;
        if (ch == '"' || ch == '\\') out[k++] = '\\', out[k++] = (char)ch;
        else if (ch < 0x20) k += (size_t)snprintf(out + k, cap - k, "\\u%04x", ch);
        else out[k++] = (char)ch;
    }
    out[k++] = '"';
    out[k] = '\0';
}

void tn_http_respond_error(tn_http_req *r, int status, const char *type, const char *param, const char *message,
                           const char *const *extra_headers) {
    char msg[1200], par[200], body[1600];
    json_str(msg, sizeof msg, message);
    if (param) json_str(par, sizeof par, param);
    else snprintf(par, sizeof par, "null");
    snprintf(body, sizeof body, "{\"error\":{\"message\":%s,\"type\":\"%s\",\"param\":%s,\"code\":%d}}", msg, type, par,
             status);
    tn_http_respond(r, status, "application/json", body, strlen(body), extra_headers);
}

/* libmicrohttpd's content reader: blocks until the producer has bytes, checking that the client is still there */
static ssize_t sse_read(void *cls, uint64_t pos, char *buf, size_t max) {
    (void)pos;
    stream_state *st = cls;
    for (;;) {
        ssize_t k = st->next(st->ctx, buf, max);
        if (k > 0) return k;
        if (k < 0) {
            st->ended = 1;
            return MHD_CONTENT_READER_END_OF_STREAM;
        }
        if (conn_gone(st->c)) {
            st->gone = 1;
            return MHD_CONTENT_READER_END_WITH_ERROR;
        }
    }
}

static void sse_free(void *cls) {
    stream_state *st = cls;
    st->done(st->ctx, !st->ended || st->gone);
    free(st);
}

void tn_http_stream(tn_http_req *r, tn_sse_next next, tn_sse_done done, void *ctx) {
    stream_state *st = tn_xcalloc(1, sizeof *st);
    *st = (stream_state){.req = r, .c = r->c, .next = next, .done = done, .ctx = ctx};
    struct MHD_Response *resp = MHD_create_response_from_callback(MHD_SIZE_UNKNOWN, 16384, sse_read, st, sse_free);
    if (!resp) {
        done(ctx, 1);
        free(st);
        return;
    }
    MHD_add_response_header(resp, "Content-Type", "text/event-stream");
    MHD_add_response_header(resp, "Cache-Control", "no-cache");
    MHD_queue_response(r->c, MHD_HTTP_OK, resp);
    MHD_destroy_response(resp);
    r->answered = 1;
}

static enum MHD_Result on_request(void *cls, struct MHD_Connection *c, const char *url, const char *method,
                                  const char *version, const char *upload, size_t *upload_size, void **con_cls) {
    (void)version;
    tn_http *s = cls;
    tn_http_req *r = *con_cls;
    if (!r) { /* headers only: set up, and refuse a declared body over the limit at once */
        r = tn_xcalloc(1, sizeof *r);
        r->srv = s, r->c = c, r->method = method, r->url = url;
        *con_cls = r;
        const char *len = MHD_lookup_connection_value(c, MHD_HEADER_KIND, "Content-Length");
        if (len && strtoull(len, NULL, 10) > s->max_body) r->too_large = 1;
        return MHD_YES;
    }
    if (*upload_size) {
        if (!r->too_large && r->n + *upload_size > s->max_body) r->too_large = 1;
        if (!r->too_large) {
            if (r->n + *upload_size + 1 > r->cap) {
                r->cap = (r->n + *upload_size + 1) * 2;
                r->body = tn_xrealloc(r->body, r->cap);
            }
            memcpy(r->body + r->n, upload, *upload_size);
            r->n += *upload_size;
            r->body[r->n] = '\0';
        }
        *upload_size = 0;
        return MHD_YES;
    }
    if (r->answered) return MHD_YES;
    if (r->too_large) {
        char m[160];
        snprintf(m, sizeof m, "the request body is larger than this server's limit of %zu bytes", s->max_body);
        tn_http_respond_error(r, 413, "invalid_request_error", NULL, m, NULL);
        return MHD_YES;
    }
    s->handler(s->ctx, r);
    if (!r->answered) tn_http_respond_error(r, 500, "server_error", NULL, "the request got no answer", NULL);
    return MHD_YES;
}

static void on_completed(void *cls, struct MHD_Connection *c, void **con_cls, enum MHD_RequestTerminationCode toe) {
    (void)cls, (void)c, (void)toe;
    tn_http_req *r = *con_cls;
    if (!r) return;
    free(r->body);
    free(r);
    *con_cls = NULL;
}

/* libmicrohttpd's unescaping, except that %00 stays as it is: a decoded NUL would cut the path short, so that
 * "/%00anything" reached a handler as "/". */
static int hexval(char ch) {
    return ch >= '0' && ch <= '9' ? ch - '0' : ch >= 'a' && ch <= 'f' ? ch - 'a' + 10 : ch >= 'A' && ch <= 'F' ? ch - 'A' + 10 : -1;
}

static size_t unescape(void *cls, struct MHD_Connection *c, char *s) {
    (void)cls, (void)c;
    char *w = s;
    for (const char *r = s; *r; r++) {
        int hi, lo;
        if (*r == '%' && (hi = hexval(r[1])) >= 0 && (lo = hexval(r[2])) >= 0 && (hi | lo)) {
            *w++ = (char)(hi * 16 + lo);
            r += 2;
        } else {
            *w++ = *r;
        }
    }
    *w = '\0';
    return (size_t)(w - s);
}

tn_http *tn_http_start(const tn_http_opts *o, tn_http_handler h, void *ctx) {
    const char *host = o->host && *o->host ? o->host : "127.0.0.1";
    if (!tn_http_is_loopback(host) && !o->authenticated) {
        tn_err("API_HOST=%s would answer beyond this machine without a key: set API_KEY (clients then send "
               "'Authorization: Bearer KEY'), or leave API_HOST unset for 127.0.0.1", host);
        return NULL;
    }
    if (o->port < 0 || o->port > 65535) {
        tn_err("API_PORT=%d is not a TCP port (0-65535)", o->port);
        return NULL;
    }
    struct addrinfo hints = {.ai_family = AF_UNSPEC, .ai_socktype = SOCK_STREAM, .ai_flags = AI_PASSIVE}, *ai = NULL;
    char port[16];
    snprintf(port, sizeof port, "%d", o->port);
    if (getaddrinfo(host, port, &hints, &ai) != 0 || !ai) {
        tn_err("API_HOST=%s: not an address this machine can listen on", host);
        return NULL;
    }
    tn_http *s = tn_xcalloc(1, sizeof *s);
    s->handler = h, s->ctx = ctx, s->max_body = o->max_body;
    unsigned flags = MHD_USE_THREAD_PER_CONNECTION | MHD_USE_INTERNAL_POLLING_THREAD; /* no log: errors are ours, one line */
    if (ai->ai_family == AF_INET6) flags |= MHD_USE_IPv6;
    s->d = MHD_start_daemon(flags, (uint16_t)o->port, NULL, NULL, on_request, s, MHD_OPTION_SOCK_ADDR, ai->ai_addr,
                            MHD_OPTION_NOTIFY_COMPLETED, on_completed, s, MHD_OPTION_CONNECTION_LIMIT,
                            (unsigned)(o->max_connections > 0 ? o->max_connections : 256),
                            MHD_OPTION_CONNECTION_TIMEOUT, (unsigned)600, MHD_OPTION_UNESCAPE_CALLBACK, unescape, NULL,
                            MHD_OPTION_END);
    freeaddrinfo(ai);
    if (!s->d) {
        free(s);
        tn_err("cannot listen on %s:%d (address in use, or not this machine's?)", host, o->port);
        return NULL;
    }
    const union MHD_DaemonInfo *di = MHD_get_daemon_info(s->d, MHD_DAEMON_INFO_BIND_PORT);
    s->port = di ? di->port : o->port;
    return s;
}

void tn_http_stop(tn_http *s) {
    if (!s) return;
    MHD_stop_daemon(s->d);
    free(s);
}

int tn_http_port(const tn_http *s) { return s->port; }
