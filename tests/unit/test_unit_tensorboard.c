/* TensorBoard event files (src/outputs/tensorboard.c, crc32c.c) against hand-derived bytes: CRC-32C check
 * values (the "123456789" check value and RFC 3720's 32-byte vectors), one Event protobuf encoded field by
 * field from event.proto's numbers, TFRecord frames whose CRCs were computed by a separate bit-by-bit CRC-32C
 * (tests/tools/tb_read.py's), and a written file read back frame by frame. tests/cli/test_tensorboard.sh
 * decodes real runs' files with protoc + python3-protobuf. */
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "core/core.h"
#include "outputs/crc32c.h"
#include "outputs/tensorboard.h"
#include "testlib.h"

static uint32_t le32(const unsigned char *p) { return p[0] | p[1] << 8 | p[2] << 16 | (uint32_t)p[3] << 24; }

static void crc(void) {
    CHECKF(tn_crc32c(0, "123456789", 9) == 0xE3069283u, "crc32c(123456789) = %08x", tn_crc32c(0, "123456789", 9));
    unsigned char zeros[32] = {0}, ones[32];
    memset(ones, 0xFF, sizeof ones);
    CHECK(tn_crc32c(0, zeros, 32) == 0x8A9136AAu);
    CHECK(tn_crc32c(0, ones, 32) == 0x62A8AB43u);
    CHECK(tn_crc32c(0, "", 0) == 0);
    /* continuing a CRC over two pieces equals one pass */
    CHECK(tn_crc32c(tn_crc32c(0, "1234", 4), "56789", 5) == 0xE3069283u);
    /* mask: rotate right 15, add 0xa282ead8 (mod 2^32) */
    CHECK(tn_crc32c_mask(0) == 0xa282ead8u);
    CHECK(tn_crc32c_mask(0x00008000u) == 0xa282ead9u);
    CHECK(tn_crc32c_mask(0x00000001u) == 0xa284ead8u);
}

static void encoding(void) {
    unsigned char out[128];
    /* wall_time 1.5 (field 1, fixed64), step 3 (field 2, varint), summary (field 5) { value (field 1) {
     * tag "a" (field 1), simple_value 2.0f (field 2, fixed32) } } */
    static const unsigned char want[] = {0x09, 0, 0, 0, 0, 0, 0, 0xF8, 0x3F, 0x10, 0x03, 0x2A, 0x0A, 0x0A, 0x08,
                                         0x0A, 0x01, 'a', 0x15, 0, 0, 0, 0x40};
    size_t n = tn_tb_encode_event(out, 1.5, 3, "a", 2.0f);
    CHECKF(n == sizeof want && memcmp(out, want, n) == 0, "scalar event: %zu bytes", n);
    /* the first record: wall_time, file_version (field 3) "brain.Event:2"; step 0 left out (proto3 default) */
    n = tn_tb_encode_event(out, 1.5, 0, NULL, 0);
    CHECK(n == 9 + 2 + 13 && out[9] == 0x1A && out[10] == 13 && memcmp(out + 11, "brain.Event:2", 13) == 0);
    /* step 300: varint AC 02; a negative step: ten bytes of two's complement */
    n = tn_tb_encode_event(out, 0, 300, "t", 1.0f);
    CHECK(out[9] == 0x10 && out[10] == 0xAC && out[11] == 0x02 && out[12] == 0x2A);
    n = tn_tb_encode_event(out, 0, -1, "t", 1.0f);
    CHECK(out[9] == 0x10 && out[10] == 0xFF && out[18] == 0xFF && out[19] == 0x01 && out[20] == 0x2A);
    /* frame: length 23 LE, masked CRC of those 8 bytes, masked CRC of the data (from tb_read.py's CRC) */
    unsigned char head[12], foot[4];
    tn_tb_frame(want, sizeof want, head, foot);
    CHECK(head[0] == 23 && memcmp(head + 1, "\0\0\0\0\0\0\0", 7) == 0);
    CHECKF(le32(head + 8) == 0x1ef8cee7u, "length CRC %08x", le32(head + 8));
    CHECKF(le32(foot) == 0x9d3a1ce8u, "data CRC %08x", le32(foot));
}

static void file(void) {
    char *dir = tn_path_join(tl_tmpdir(), "tb/runs/x");
    tn_tb_writer *w = tn_tb_open(dir);
    CHECKF(w != NULL, "%s", tn_errmsg());
    if (!w) return;
    CHECK(strstr(tn_tb_path(w), "/events.out.tfevents.") != NULL);
    CHECK(tn_tb_scalar(w, "train/loss", 0.25, 7) == 0);
    char *path = tn_xstrdup(tn_tb_path(w));
    tn_tb_close(w);
    size_t len = 0;
    unsigned char *b = (unsigned char *)tn_read_file(path, &len, 0);
    CHECK(b != NULL);
    /* two frames: file_version (24 data bytes), then the scalar: every length and CRC as tn_tb_frame says */
    size_t pos = 0;
    int frames = 0;
    while (b && pos + 12 <= len) {
        size_t n = le32(b + pos);
        unsigned char head[12], foot[4];
        if (pos + 16 + n > len) break;
        tn_tb_frame(b + pos + 12, n, head, foot);
        CHECK(memcmp(head, b + pos, 12) == 0 && memcmp(foot, b + pos + 12 + n, 4) == 0);
        if (frames == 1) CHECK(memcmp(b + pos + 12 + n - 4, "\0\0\x80\x3e", 4) == 0); /* 0.25f, last field */
        pos += 16 + n;
        frames++;
    }
    CHECKF(frames == 2 && pos == len, "%d frames, %zu of %zu bytes", frames, pos, len);
    free(b);
    free(path);
    free(dir);
    /* HF's default logging_dir: OUTPUT_DIR/runs/<Mon><DD>_<HH>-<MM>-<SS>_<host> */
    char *d = tn_tb_default_logdir("out"), host[256] = "";
    gethostname(host, sizeof host - 1);
    const char *stamp = d + strlen("out/runs/");
    CHECKF(strncmp(d, "out/runs/", 9) == 0 && strlen(stamp) == 14 + 1 + strlen(host) && stamp[5] == '_' &&
               stamp[8] == '-' && stamp[11] == '-' && stamp[14] == '_' && strcmp(stamp + 15, host) == 0,
           "default logdir %s", d);
    free(d);
    /* a folder that cannot be made: one error line, no writer */
    CHECK(tn_tb_open("/proc/tandem-no/such") == NULL && strstr(tn_errmsg(), "/proc/tandem-no"));
}

int main(void) {
    crc();
    encoding();
    file();
    return tl_done("test_unit_tensorboard");
}
