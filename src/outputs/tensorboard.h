/* tensorboard -- TensorBoard event files, as HF Trainer's TensorBoardCallback (torch's SummaryWriter) writes
 * them for `report_to: tensorboard`: LOGDIR/events.out.tfevents.<time>.<host>.<pid>.0, a sequence of TFRecord
 * records (uint64 length, masked CRC-32C of those 8 bytes, the data, masked CRC-32C of the data; all little
 * endian), each an Event protobuf: the first holds file_version "brain.Event:2", every later one a wall_time,
 * a step and a Summary of one scalar (tag + simple_value, a float). Field numbers are those of TensorFlow's
 * event.proto / summary.proto: Event{wall_time=1 double, step=2 int64, file_version=3 string,
 * summary=5 Summary}, Summary{value=1 repeated Value}, Value{tag=1 string, simple_value=2 float}.
 * The encoding is written here (a few bytes per field); tests/tools/tb_read.py decodes it independently. */
#ifndef TN_TENSORBOARD_H
#define TN_TENSORBOARD_H

#include <stddef.h>
#include <stdint.h>

typedef struct tn_tb_writer tn_tb_writer;

/* HF's default logging_dir: OUTPUT_DIR/runs/<Mon><DD>_<HH>-<MM>-<SS>_<hostname> (local time, as
 * TrainingArguments' default_logdir()). malloc'ed. */
char *tn_tb_default_logdir(const char *output_dir);
/* Creates LOGDIR (and parents) and a new event file in it, starting with the file_version record.
 * NULL with tn_err set on failure. */
tn_tb_writer *tn_tb_open(const char *logdir);
/* One scalar (SummaryWriter.add_scalar): stored as a float, as TensorBoard's simple_value. Written and
 * flushed at once, so TensorBoard sees a running job. 0, or -1 with tn_err. */
int tn_tb_scalar(tn_tb_writer *w, const char *tag, double value, int64_t step);
const char *tn_tb_path(const tn_tb_writer *w); /* the event file */
void tn_tb_close(tn_tb_writer *w);

/* The Event protobuf bytes of one scalar (or, with tag NULL, of the file_version record) into out (at
 * least 64 + strlen(tag) bytes); returns the length. Exposed for the unit test. */
size_t tn_tb_encode_event(unsigned char *out, double wall_time, int64_t step, const char *tag, float value);
/* The TFRecord frame of n data bytes: 12 header bytes into head, 4 footer bytes into foot. */
void tn_tb_frame(const unsigned char *data, size_t n, unsigned char head[12], unsigned char foot[4]);

#endif
