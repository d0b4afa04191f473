/* tensorboard.c -- see tensorboard.h. */
#include "outputs/tensorboard.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/time.h>
#include <time.h>
#include <unistd.h>

#include "core/core.h"
#include "outputs/crc32c.h"

#define TB_TAG_MAX 256

struct tn_tb_writer {
    char *path;
    FILE *f;
};

/* ---- protobuf wire format: varint keys (field << 3 | wire type), little-endian fixed-width values ---- */

enum { WIRE_VARINT = 0, WIRE_FIXED64 = 1, WIRE_BYTES = 2, WIRE_FIXED32 = 5 };

static size_t put_varint(unsigned char *p, uint64_t v) {
    size_t n = 0;
    do {
        p[n++] = (unsigned char)((v & 0x7F) | (v > 0x7F ? 0x80 : 0));
        v >>= 7;
    } while (v);
    return n;
}

static size_t put_key(unsigned char *p, unsigned field, unsigned wire) { return put_varint(p, (uint64_t)field << 3 | wire); }

static size_t put_le(unsigned char *p, uint64_t v, int bytes) {
    for (int i = 0; i < bytes; i++) p[i] = (unsigned char)(v >> (8 * i));
    return (size_t)bytes;
}

static size_t put_bytes(unsigned char *p, unsigned field, const void *data, size_t n) {
    size_t k = put_key(p, field, WIRE_BYTES);
    k += put_varint(p + k, n);
    memcpy(p + k, data, n);
    return k + n;
}

size_t tn_tb_encode_event(unsigned char *out, double wall_time, int64_t step, const char *tag, float value) {
    uint64_t wt;
    uint32_t fv32;
    memcpy(&wt, &wall_time, sizeof wt);
    size_t n = put_key(out, 1, WIRE_FIXED64);  /* Event.wall_time */
    n += put_le(out + n, wt, 8);
    if (!tag) /* the first record: step 0 is proto3's default and is left out, as TensorFlow writes it */
        return n + put_bytes(out + n, 3, "brain.Event:2", 13); /* Event.file_version */
    if (step != 0) {
        n += put_key(out + n, 2, WIRE_VARINT); /* Event.step: int64, negative values as 10-byte two's complement */
        n += put_varint(out + n, (uint64_t)step);
    }
    unsigned char val[TB_TAG_MAX + 16], sum[TB_TAG_MAX + 24];
    size_t tl = strlen(tag), vn = put_bytes(val, 1, tag, tl); /* Value.tag */
    memcpy(&fv32, &value, sizeof fv32);
    vn += put_key(val + vn, 2, WIRE_FIXED32);              /* Value.simple_value */
    vn += put_le(val + vn, fv32, 4);
    size_t sn = put_bytes(sum, 1, val, vn);                 /* Summary.value */
    return n + put_bytes(out + n, 5, sum, sn);              /* Event.summary */
}

void tn_tb_frame(const unsigned char *data, size_t n, unsigned char head[12], unsigned char foot[4]) {
    put_le(head, (uint64_t)n, 8);
    put_le(head + 8, tn_crc32c_mask(tn_crc32c(0, head, 8)), 4);
    put_le(foot, tn_crc32c_mask(tn_crc32c(0, data, n)), 4);
}

/* ---- the file ---- */

static double wall_now(void) {
    struct timeval tv;
    gettimeofday(&tv, NULL);
    return (double)tv.tv_sec + tv.tv_usec / 1e6;
}

static void hostname(char *h, size_t n) {
    if (gethostname(h, n - 1) != 0 || !h[0]) snprintf(h, n, "localhost");
    h[n - 1] = 0;
}

char *tn_tb_default_logdir(const char *output_dir) {
    char host[256], stamp[64], name[400];
    hostname(host, sizeof host);
    time_t now = time(NULL);
    struct tm tm;
    localtime_r(&now, &tm);
    strftime(stamp, sizeof stamp, "%b%d_%H-%M-%S", &tm); /* C locale month: "Jan" ... as Python's %b */
    snprintf(name, sizeof name, "runs/%s_%s", stamp, host);
    return tn_path_join(output_dir, name);
}

static int write_record(tn_tb_writer *w, const unsigned char *data, size_t n) {
    unsigned char head[12], foot[4];
    tn_tb_frame(data, n, head, foot);
    if (fwrite(head, 1, 12, w->f) != 12 || fwrite(data, 1, n, w->f) != n || fwrite(foot, 1, 4, w->f) != 4 ||
        fflush(w->f) != 0)
        return tn_err("%s: write failed: %s", w->path, strerror(errno));
    return 0;
}

tn_tb_writer *tn_tb_open(const char *logdir) {
    if (tn_mkdirs(logdir) != 0) return NULL;
    char host[256], name[400];
    hostname(host, sizeof host);
    double now = wall_now();
    snprintf(name, sizeof name, "events.out.tfevents.%010lld.%s.%ld.0", (long long)now, host, (long)getpid());
    tn_tb_writer *w = tn_xcalloc(1, sizeof *w);
    w->path = tn_path_join(logdir, name);
    w->f = fopen(w->path, "wb");
    if (!w->f) {
        tn_err("%s: cannot create the TensorBoard event file: %s", w->path, strerror(errno));
        tn_tb_close(w);
        return NULL;
    }
    unsigned char ev[64];
    if (write_record(w, ev, tn_tb_encode_event(ev, now, 0, NULL, 0)) != 0) {
        tn_tb_close(w);
        return NULL;
    }
    return w;
}

int tn_tb_scalar(tn_tb_writer *w, const char *tag, double value, int64_t step) {
    if (strlen(tag) > TB_TAG_MAX) return tn_err("TensorBoard tag '%.40s...' is too long", tag);
    unsigned char ev[TB_TAG_MAX + 64];
    return write_record(w, ev, tn_tb_encode_event(ev, wall_now(), step, tag, (float)value));
}

const char *tn_tb_path(const tn_tb_writer *w) { return w->path; }

void tn_tb_close(tn_tb_writer *w) {
    if (!w) return;
    if (w->f) fclose(w->f);
    free(w->path);
    free(w);
}
