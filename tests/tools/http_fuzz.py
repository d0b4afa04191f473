#!/usr/bin/env python3
"""http_fuzz.py -- malformed HTTP and JSON against `tandem api` (tests/cli/test_api.sh).

Usage: http_fuzz.py PORT KEY SEED N
 1. hand-written malformed HTTP (garbage request lines, broken headers, lying or negative Content-Length, bad
    chunked encoding, oversized headers, binary bytes, half requests then close): each gets an HTTP error status or
    a closed connection within 10 s, never a 2xx;
 2. N bodies derived from a valid chat request by random byte edits (seeded): each gets 200 with a
    chat.completion or a 4xx with an OpenAI error object ({"error": {"message": ...}}), never a 5xx or a hang;
 3. the server still answers a valid request.
Prints one summary line; exit 1 with FAIL lines on any violation."""
import json, random, socket, sys

PORT, KEY, SEED, N = int(sys.argv[1]), sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
fails = []


def exchange(raw, timeout=10.0, half_close=True):
    """Sends raw bytes, returns (status or None if closed without a status, body bytes). half_close: shut down the
    sending side after the bytes (an incomplete request then ends); a complete request keeps it open, as clients
    do (the server takes end-of-input while it works on an answer as the client having left)."""
    s = socket.create_connection(("127.0.0.1", PORT), timeout=timeout)
    try:
        s.sendall(raw)
        if half_close:
            s.shutdown(socket.SHUT_WR)
        data = b""
        while True:
            chunk = s.recv(65536)
            if not chunk:
                break
            data += chunk
    except socket.timeout:
        return "hang", b""
    except (ConnectionResetError, BrokenPipeError):
        return None, b""
    finally:
        s.close()
    if not data.startswith(b"HTTP/1."):
        return None, data
    head, _, body = data.partition(b"\r\n\r\n")
    return int(head.split(b" ")[1]), body


def request(body, path="/v1/chat/completions", extra=b""):
    if isinstance(body, str):
        body = body.encode()
    return (b"POST " + path.encode() + b" HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer " + KEY.encode() +
            b"\r\nContent-Type: application/json\r\nConnection: close\r\n" + extra +
            b"Content-Length: " + str(len(body)).encode() + b"\r\n\r\n" + body)


MALFORMED = [
    b"GARBAGE\r\n\r\n",
    b"GET\r\n\r\n",
    b"GET /v1/models\r\n\r\n",
    b"GET /v1/models HTTP/9.9\r\nHost: x\r\n\r\n",
    b"GET /v1/models HTTP/1.1\r\nHost x\r\nBroken header line\r\n\r\n",
    b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Length: -5\r\n\r\n{}",
    b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Length: abc\r\n\r\n{}",
    b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Length: 100\r\n\r\n{\"model\":",
    b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\nZZ\r\n{}\r\n0\r\n\r\n",
    b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\nffffffffffffffffff\r\n",
    b"GET /v1/models HTTP/1.1\r\nHost: x\r\nX-Big: " + b"a" * 200000 + b"\r\n\r\n",
    b"GET /" + b"x" * 100000 + b" HTTP/1.1\r\nHost: x\r\n\r\n",
    b"\x00\x01\x02\xff\xfe\r\n\r\n",
    bytes(random.Random(SEED).randrange(256) for _ in range(4096)),
    b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Length: 5\r\n",
    b"GET /v1/models HTTP/1.1\r\nHost: x\r\n\r\nGET /v1/models HTTP/1.1\r\nHost: x\r\n\r\nBROKEN\r\n\r\n",
]

for i, raw in enumerate(MALFORMED):
    status, _ = exchange(raw)
    if status == "hang":
        fails.append(f"malformed HTTP case {i}: no answer and no close within 10 s")
    elif status is not None and 200 <= status < 300 and not raw.startswith(b"GET /v1/models HTTP/1.1\r\nHost: x\r\n\r\nGET"):
        fails.append(f"malformed HTTP case {i}: answered {status}")

VALID = json.dumps({"model": "tiny", "messages": [{"role": "system", "content": "be brief"},
                                                   {"role": "user", "content": "hi"}], "max_tokens": 2,
                    "temperature": 0.5, "top_p": 0.9, "stream": False})
rng = random.Random(SEED)
counts = {}
for i in range(N):
    b = bytearray(VALID.encode())
    for _ in range(rng.randint(1, 4)):
        if not b:
            break
        op, at = rng.randrange(4), rng.randrange(len(b))
        if op == 0:
            b[at] = rng.randrange(256)
        elif op == 1:
            del b[at:at + rng.randint(1, 8)]
        elif op == 2:
            b[at:at] = bytes(rng.choice([b"{", b"}", b"[", b"]", b"\"", b",", b":", b"\\", b"null", b"-1", b"1e999",
                                         b"\xc3", b"\x00", b"true"]))
        else:
            b = b[:at]
    status, body = exchange(request(bytes(b)), half_close=False)
    counts[status] = counts.get(status, 0) + 1
    if status == "hang" or status is None or status >= 500:
        fails.append(f"mutated JSON {i} ({bytes(b)[:80]!r}): {status}")
        continue
    try:
        j = json.loads(body)
    except ValueError:
        fails.append(f"mutated JSON {i}: status {status} with a body that is not JSON: {body[:80]!r}")
        continue
    if status == 200 and j.get("object") != "chat.completion":
        fails.append(f"mutated JSON {i}: 200 without a chat.completion")
    if status != 200 and not (isinstance(j.get("error"), dict) and isinstance(j["error"].get("message"), str)
                              and j["error"].get("code") == status):
        fails.append(f"mutated JSON {i}: {status} without an OpenAI error object: {body[:120]!r}")

status, body = exchange(request(VALID), half_close=False)
if status != 200:
    fails.append(f"a valid request after the fuzzing: {status}")
for f in fails[:20]:
    print("FAIL:", f)
print(f"http_fuzz: {len(MALFORMED)} malformed HTTP requests, {N} mutated JSON bodies (statuses "
      f"{dict(sorted((str(k), v) for k, v in counts.items()))}), {len(fails)} failures")
sys.exit(1 if fails else 0)
