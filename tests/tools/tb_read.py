"""tb_read.py LOGDIR [OUTPUT_DIR] -- reads TensorBoard event files independently of tandem's writer.

Framing (TFRecord): uint64 length, uint32 masked CRC-32C of the 8 length bytes, the data, uint32 masked CRC-32C
of the data, all little endian; the CRC is this file's own bit-by-bit CRC-32C, checked first against the
standard check value crc32c(b"123456789") = 0xE3069283. Each record is decoded as tensorflow.Event with
Debian's python3-protobuf, from tb_event.proto compiled by protoc. The first record of every file must be
file_version "brain.Event:2"; every other one a summary of scalars.

Prints one line per scalar: "STEP TAG VALUE". With OUTPUT_DIR it also checks the scalars against what the run
wrote there: every log_history entry of trainer_state.json, and the final evaluation (eval_results.json), under
HF's tags (rewrite_logs: eval_<name> -> eval/<name>, otherwise train/<key>) at its step, equal as float32
(the same multiset: trainer_state.json sorts each entry's keys); plus train/tokens_per_second > 0 with every training loss. Exit 1 on any failure."""
import glob, json, os, struct, subprocess, sys, tempfile

here = os.path.dirname(os.path.abspath(__file__))


def crc32c(data):
    crc = 0xFFFFFFFF
    for b in data:
        crc ^= b
        for _ in range(8):
            crc = (crc >> 1) ^ (0x82F63B78 if crc & 1 else 0)
    return crc ^ 0xFFFFFFFF


def masked(crc):
    return (((crc >> 15) | (crc << 17)) + 0xA282EAD8) & 0xFFFFFFFF


def fail(msg):
    print("tb_read: " + msg)
    sys.exit(1)


if crc32c(b"123456789") != 0xE3069283:
    fail("the CRC-32C implementation of this tool is wrong")

tmp = tempfile.mkdtemp()
subprocess.run(["protoc", "-I", here, "--python_out", tmp, os.path.join(here, "tb_event.proto")], check=True)
sys.path.insert(0, tmp)
import tb_event_pb2  # noqa: E402


def records(path):
    data = open(path, "rb").read()
    pos = 0
    while pos < len(data):
        if pos + 12 > len(data):
            fail(f"{path}: truncated record header at byte {pos}")
        head = data[pos:pos + 8]
        (n,) = struct.unpack("<Q", head)
        (hcrc,) = struct.unpack("<I", data[pos + 8:pos + 12])
        if hcrc != masked(crc32c(head)):
            fail(f"{path}: length CRC mismatch at byte {pos}")
        body = data[pos + 12:pos + 12 + n]
        if len(body) != n or pos + 16 + n > len(data):
            fail(f"{path}: truncated record at byte {pos}")
        (dcrc,) = struct.unpack("<I", data[pos + 12 + n:pos + 16 + n])
        if dcrc != masked(crc32c(body)):
            fail(f"{path}: data CRC mismatch at byte {pos}")
        yield body
        pos += 16 + n


logdir = sys.argv[1]
files = sorted(glob.glob(os.path.join(logdir, "events.out.tfevents.*")))
if len(files) != 1:
    fail(f"{logdir}: expected one event file, found {len(files)}")
scalars = []
for i, rec in enumerate(records(files[0])):
    ev = tb_event_pb2.Event()
    ev.ParseFromString(rec)
    if ev.wall_time < 1.5e9:
        fail(f"record {i}: wall_time {ev.wall_time} is not a Unix time")
    if i == 0:
        if ev.WhichOneof("what") != "file_version" or ev.file_version != "brain.Event:2":
            fail(f"first record is not file_version brain.Event:2: {ev}")
        continue
    if ev.WhichOneof("what") != "summary" or not ev.summary.value:
        fail(f"record {i} holds no summary: {ev}")
    for v in ev.summary.value:
        if v.WhichOneof("value") != "simple_value":
            fail(f"record {i}: {v.tag} is not a simple_value")
        scalars.append((ev.step, v.tag, v.simple_value))
for s in scalars:
    print(*s)
if len(sys.argv) < 3:
    sys.exit(0)

out = sys.argv[2]
f32 = lambda x: struct.unpack("<f", struct.pack("<f", x))[0]
hist = json.load(open(os.path.join(out, "trainer_state.json")))["log_history"]
final = os.path.join(out, "eval_results.json")
if os.path.exists(final):
    hist = hist + [dict(json.load(open(final)), step=hist[-1]["step"])]
expected = []
for e in hist:
    for k, v in e.items():
        if k != "step":
            expected.append((e["step"], "eval/" + k[5:] if k.startswith("eval_") else "train/" + k, f32(v)))
got = sorted(s for s in scalars if s[1] != "train/tokens_per_second")
expected.sort()
if got != expected:
    for a, b in zip(got, expected):
        if a != b:
            fail(f"first difference: event file {a}, outputs {b} ({len(got)} scalars vs {len(expected)} expected)")
    fail(f"{len(got)} scalars in the event file, {len(expected)} in the outputs")
tps = [s for s in scalars if s[1] == "train/tokens_per_second"]
if len(tps) != sum("loss" in e for e in hist) or any(s[2] <= 0 for s in tps):
    fail(f"train/tokens_per_second: {len(tps)} values, expected one > 0 per training log")
print(f"tb_read: {len(scalars)} scalars match trainer_state.json and eval_results.json")
