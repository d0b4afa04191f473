/* http -- the HTTP plumbing tandem's servers share, on libmicrohttpd (Debian libmicrohttpd-dev): start and stop,
 * the bind rule, request bodies up to a limit, JSON answers, OpenAI-style error bodies, and server-sent events.
 *
 * Threads: one per connection (libmicrohttpd's thread-per-connection mode), so a handler may block until its
 * answer is ready, and a stream's producer may block until its next piece is. A client that goes away is noticed
 * while a handler or a stream waits (tn_http_client_gone), not only at the next write.
 *
 * Bind rule: 127.0.0.1 unless host says otherwise; a host beyond the loopback is refused unless the server checks
 * a key (opts.authenticated), so nothing answers the network unauthenticated by accident. */
#ifndef TN_HTTP_H
#define TN_HTTP_H

#include <stddef.h>
#include <sys/types.h>

typedef struct tn_http tn_http;
typedef struct tn_http_req tn_http_req;

/* Called once per request when its body is complete; it must answer with one of the tn_http_respond_* calls (or
 * tn_http_stream) before returning. */
typedef void (*tn_http_handler)(void *ctx, tn_http_req *r);

typedef struct {
    const char *host;      /* NULL or "": 127.0.0.1 */
    int port;              /* 0: any free port (tn_http_port tells which) */
    size_t max_body;       /* bytes; a larger body is answered 413 */
    int max_connections;   /* open connections at once (more are refused by libmicrohttpd) */
    int authenticated;     /* the handler checks a key: a non-loopback host may be used */
} tn_http_opts;

/* Starts listening. NULL + tn_err (the bind rule, an address in use, a host that does not resolve). */
tn_http *tn_http_start(const tn_http_opts *o, tn_http_handler h, void *ctx);
/* Stops accepting, waits for open connections' threads to end. */
void tn_http_stop(tn_http *s);
int tn_http_port(const tn_http *s);
/* 1 for 127.0.0.0/8, ::1 and "localhost". */
int tn_http_is_loopback(const char *host);

const char *tn_http_method(const tn_http_req *r);
const char *tn_http_path(const tn_http_req *r);
const char *tn_http_header(const tn_http_req *r, const char *name); /* NULL when absent */
const char *tn_http_query(const tn_http_req *r, const char *name);  /* ?name=value, decoded; NULL when absent */
const char *tn_http_body(const tn_http_req *r, size_t *n);         /* NUL-terminated */
/* 1 once the client has closed its side of the connection. */
int tn_http_client_gone(tn_http_req *r);

/* Answers (each call copies what it needs). extra_headers: "Name: value" strings, NULL-terminated list, or NULL. */
void tn_http_respond(tn_http_req *r, int status, const char *content_type, const char *body, size_t n,
                     const char *const *extra_headers);
void tn_http_respond_json(tn_http_req *r, int status, const char *json);
/* OpenAI's error object: {"error": {"message", "type", "param", "code"}} with code = status (as llama.cpp and
 * vLLM do); param may be NULL. */
void tn_http_respond_error(tn_http_req *r, int status, const char *type, const char *param, const char *message,
                           const char *const *extra_headers);

/* Server-sent events: the answer is 200 text/event-stream, its bytes come from next(), which fills buf with up to
 * max bytes and returns their number, blocks while it has none (up to ~100 ms, then returns 0: the client is
 * checked and next is called again), and returns -1 at the end. done() is called once when the stream ends, the
 * client having read it all or gone away (gone = 1). */
typedef ssize_t (*tn_sse_next)(void *ctx, char *buf, size_t max);
typedef void (*tn_sse_done)(void *ctx, int gone);
void tn_http_stream(tn_http_req *r, tn_sse_next next, tn_sse_done done, void *ctx);

#endif
