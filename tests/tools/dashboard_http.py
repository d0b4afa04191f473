#!/usr/bin/env python3
"""dashboard_http.py -- the dashboard at the HTTP level, over raw sockets (tests/cli/test_dashboard.sh).

Usage:
  dashboard_http.py routes PORT RUN_NAME        every route: status, Content-Type, security headers, bodies; HEAD;
                                                405 / 404 / 400 / 403 / 413 with JSON error bodies; malformed requests
  dashboard_http.py fuzz PORT SEED N MARKER     N generated URLs (traversal, encodings, long, binary): only the fixed
                                                routes answer 200, no answer carries MARKER (a file's content next to
                                                the run) or /etc/passwd, the server keeps answering
  dashboard_http.py token PORT TOKEN            the token on every request: none, wrong, bearer, ?token= (303 + cookie),
                                                cookie; the Host guard is off with a token
  dashboard_http.py follow PORT DIR             events: a line appended to DIR/trainer_log.jsonl reaches an open
                                                /api/events stream within 5 s, with ?since= replaying nothing older
  dashboard_http.py viewers PORT N SECONDS      once the server answers: N event-stream viewers reading for SECONDS (or
                                                until it closes) while 5 connections stall half-way through their
                                                request and 5 streams are never read; prints
                                                {"viewers", "with_events", "events_min", "events_max"}
Prints one summary line; exit 1 with FAIL lines on any violation."""
import json, os, random, socket, sys, threading, time

fails, checks = [], [0]


def check(ok, what):
    checks[0] += 1
    if not ok:
        fails.append(what)
        print("FAIL: " + what)


def request(port, raw, timeout=10.0, half_close=False, limit=1 << 22):
    """Sends raw bytes; returns (status, headers dict (lower-case names), body) or (None, {}, data) when no HTTP
    answer came (closed), ("hang", ...) on timeout."""
    s = socket.create_connection(("127.0.0.1", port), timeout=timeout)
    data = b""
    try:
        s.sendall(raw)
        if half_close:
            s.shutdown(socket.SHUT_WR)
        while len(data) < limit:
            chunk = s.recv(65536)
            if not chunk:
                break
            data += chunk
    except socket.timeout:
        if not data:
            return "hang", {}, b""
    except (ConnectionResetError, BrokenPipeError):
        pass
    finally:
        s.close()
    if not data.startswith(b"HTTP/1."):
        return None, {}, data
    head, _, body = data.partition(b"\r\n\r\n")
    lines = head.decode("latin-1").split("\r\n")
    headers = {}
    for l in lines[1:]:
        k, _, v = l.partition(":")
        headers[k.strip().lower()] = v.strip()
    if headers.get("transfer-encoding") == "chunked":
        body = unchunk(body)
    return int(lines[0].split(" ")[1]), headers, body


def unchunk(b):
    """The data of the complete chunks of a chunked body (a chunk still arriving is left out)."""
    out = b""
    while b:
        size, sep, rest = b.partition(b"\r\n")
        try:
            n = int(size.split(b";")[0], 16)
        except ValueError:
            return out
        if n == 0 or not sep or len(rest) < n + 2:
            break
        out += rest[:n]
        b = rest[n + 2:]
    return out


def get(port, path, method="GET", headers=None, body=b"", host=None):
    hs = {"Host": host or "127.0.0.1:%d" % port, "Connection": "close"}
    hs.update(headers or {})
    if body:
        hs["Content-Length"] = str(len(body))
    raw = ("%s %s HTTP/1.1\r\n" % (method, path)).encode("latin-1")
    raw += "".join("%s: %s\r\n" % kv for kv in hs.items()).encode("latin-1") + b"\r\n" + body
    return request(port, raw)


def is_error_body(body, code):
    try:
        e = json.loads(body)["error"]
        return e["code"] == code and isinstance(e["message"], str) and e["message"]
    except (ValueError, KeyError, TypeError):
        return False


def first_events(port, path, n, timeout=5.0, extra=""):
    """Opens an event stream and returns the data of its first n events (or fewer after timeout)."""
    s = socket.create_connection(("127.0.0.1", port), timeout=timeout)
    s.sendall(("GET %s HTTP/1.1\r\nHost: 127.0.0.1:%d\r\n%s\r\n" % (path, port, extra)).encode())
    data, t0, events = b"", time.time(), []
    try:
        while time.time() - t0 < timeout and len(events) < n:
            chunk = s.recv(65536)
            if not chunk:
                break
            data += chunk
            head, _, body = data.partition(b"\r\n\r\n")
            if b"chunked" in head.lower():
                body = unchunk(body)  # the complete chunks so far
            whole = body.decode("utf-8", "replace").rpartition("\n\n")[0]  # events end with an empty line
            events = [l[6:] for l in whole.split("\n") if l.startswith("data: ")]
    except socket.timeout:
        pass
    finally:
        s.close()
    return data, [json.loads(e) for e in events[:n] if e.startswith("{")]


ROUTES = {"/": "text/html", "/index.html": "text/html", "/app.js": "text/javascript", "/app.css": "text/css",
          "/uplot/uPlot.iife.min.js": "text/javascript", "/uplot/uPlot.min.css": "text/css", "/api/state": "application/json"}


def routes(port, run_name):
    for path, ctype in ROUTES.items():
        st, h, body = get(port, path)
        check(st == 200 and h.get("content-type", "").startswith(ctype) and len(body) > 0,
              "GET %s: 200 %s with a body, got %s %s (%d bytes)" % (path, ctype, st, h.get("content-type"), len(body)))
        check(h.get("x-content-type-options") == "nosniff" and "default-src 'self'" in h.get("content-security-policy", ""),
              "GET %s: nosniff and a content security policy" % path)
    st, h, body = get(port, "/")
    check(b"/app.js" in body and b"uPlot.iife.min.js" in body, "the page loads its script and uPlot")
    st, h, body = get(port, "/", method="HEAD")
    check(st == 200 and body == b"", "HEAD /: 200 without a body, got %s, %d bytes" % (st, len(body)))
    st, h, body = get(port, "/api/state")
    state = json.loads(body)
    names = [r.get("info", {}).get("name") for r in state["runs"]]
    check(run_name in names and isinstance(state["seq"], int), "/api/state names the run %s: %s" % (run_name, names))
    data, evs = first_events(port, "/api/events?since=0", 1)
    ops = evs[0]["ops"] if evs else []
    check(b"text/event-stream" in data.split(b"\r\n\r\n")[0] and len(evs) == 1 and evs[0]["seq"] == 1 and
          any(o["part"] == "info" and o["data"]["name"] == run_name for o in ops),
          "/api/events?since=0 replays event 1 with the run's info: %s" % [e.get("seq") for e in evs])
    seq = state["seq"]
    data, evs = first_events(port, "/api/events?since=%d" % seq, 1, timeout=1.5)
    check(all(e["seq"] > seq for e in evs), "?since=%d sends nothing older" % seq)
    for path, code in [("/api/events?since=abc", 400), ("/api/events?since=", 400), ("/api/events?since=99999999999", 400),
                       ("/nope", 404), ("/api", 404), ("/app.js/", 404), ("/API/STATE", 404), ("/index.htm", 404)]:
        st, h, body = get(port, path)
        check(st == code and is_error_body(body, code), "GET %s: %d with a JSON error, got %s %r" % (path, code, st, body[:120]))
    for method in ["POST", "PUT", "DELETE", "PATCH"]:
        st, h, body = get(port, "/api/state", method=method, body=b"{}")
        check(st == 405 and "GET" in h.get("allow", "") and is_error_body(body, 405),
              "%s /api/state: 405 with Allow, got %s" % (method, st))
    st, h, body = get(port, "/api/state", method="POST", body=b"x" * 5000)
    check(st == 413, "a 5000-byte body: 413, got %s" % st)
    for host, code in [("evil.example", 403), ("evil.example:%d" % port, 403), ("127.0.0.1.evil.example", 403),
                       ("localhost:%d" % port, 200), ("[::1]:%d" % port, 200)]:
        st, h, body = get(port, "/api/state", host=host)
        check(st == code, "Host: %s: %d, got %s" % (host, code, st))
    for raw in [b"GARBAGE\r\n\r\n", b"GET\r\n\r\n", b"GET / HTTP/9.9\r\nHost: x\r\n\r\n", b"\x00\x01\x02\r\n\r\n",
                b"GET /" + b"a" * 20000 + b" HTTP/1.1\r\nHost: x\r\n\r\n", b"GET / HTTP/1.1\r\nHost: x\r\nBad Header\r\n\r\n"]:
        st, h, body = request(port, raw, half_close=True)
        check(st != "hang" and (st is None or st >= 400), "malformed %r: an error or a close, got %s" % (raw[:30], st))
    st, h, body = get(port, "/api/state")
    check(st == 200, "still answering after the malformed requests")


PIECES = ["..", "../", "..%2f", "%2e%2e", "%2e%2e%2f", "%252e%252e", "..\\", "%5c", "/", "//", "etc/passwd", "secret.txt",
          "trainer_log.jsonl", "tandem_ranks.jsonl", "uplot", "uPlot.iife.min.js", "api", "state", "events", "app.js",
          "index.html", "%00", "\x01", "~", "%7e", ".", "./", "%2f", "?", "#", ";", "&token=", "%ff", "\xc3\xa9", "AAAA" * 50,
          "..;", "%c0%ae%c0%ae", "node_modules", "deps", "proc/self/environ", "cmdline", " ", "%20", "+"]


def fuzz(port, seed, n, marker):
    rnd = random.Random(seed)
    ok_paths = set(ROUTES) | {"/api/events"}
    for i in range(n):
        path = "/" + "".join(rnd.choice(PIECES) for _ in range(rnd.randint(1, 8)))
        if rnd.random() < 0.1:
            path = path.replace("/", "\\")
        raw = ("GET %s HTTP/1.1\r\nHost: 127.0.0.1:%d\r\nConnection: close\r\n\r\n" % (path, port)).encode("latin-1", "replace")
        st, h, body = request(port, raw, timeout=10, limit=1 << 16)
        if st == 200 and path.split("?")[0] not in ok_paths:
            check(False, "fuzz %r: 200 for a path that is no route" % path)
        check(st != "hang", "fuzz %r: no answer within 10 s" % path)
        check(marker.encode() not in body and b"root:x:0:0" not in body, "fuzz %r: served a file's content" % path)
        if st not in (None, "hang", 200, 400, 403, 404, 405, 414, 431):
            check(False, "fuzz %r: unexpected status %s" % (path, st))
    st, h, body = get(port, "/api/state")
    check(st == 200, "still answering after %d fuzzed URLs" % n)


def token(port, tok):
    st, h, body = get(port, "/api/state")
    check(st == 401 and is_error_body(body, 401), "no token: 401, got %s" % st)
    st, h, body = get(port, "/", headers={"Authorization": "Bearer wrong-token-0123456789"})
    check(st == 401, "a wrong bearer token: 401, got %s" % st)
    st, h, body = get(port, "/api/state?token=wrong-token-0123456789")
    check(st == 401, "a wrong ?token=: 401, got %s" % st)
    st, h, body = get(port, "/api/state", headers={"Cookie": "tandem_token=wrong-token-0123456789"})
    check(st == 401, "a wrong cookie: 401, got %s" % st)
    st, h, body = get(port, "/api/state", headers={"Authorization": "Bearer " + tok})
    check(st == 200, "the bearer token: 200, got %s" % st)
    st, h, body = get(port, "/?token=" + tok)
    cookie = h.get("set-cookie", "")
    check(st == 303 and h.get("location") == "/" and cookie.startswith("tandem_token=" + tok) and "HttpOnly" in cookie,
          "?token= on the page: 303 to / with an HttpOnly cookie, got %s %s" % (st, cookie))
    st, h, body = get(port, "/app.js", headers={"Cookie": "other=1; tandem_token=" + tok})
    check(st == 200, "the cookie: 200, got %s" % st)
    data, evs = first_events(port, "/api/events?since=0", 1, extra="Cookie: tandem_token=%s\r\n" % tok)
    check(len(evs) == 1, "the event stream with the cookie")
    data, evs = first_events(port, "/api/events?since=0", 1, timeout=2)
    check(b" 401 " in data.split(b"\r\n")[0] and not evs, "the event stream without the token: 401")
    st, h, body = get(port, "/api/state", headers={"Authorization": "Bearer " + tok}, host="dashboard.example:8080")
    check(st == 200, "with the token any Host is let in (the token is the guard): got %s" % st)


def follow(port, d):
    st, h, body = get(port, "/api/state")
    seq = json.loads(body)["seq"]
    s = socket.create_connection(("127.0.0.1", port), timeout=8)
    s.sendall(("GET /api/events?since=%d HTTP/1.1\r\nHost: 127.0.0.1:%d\r\n\r\n" % (seq, port)).encode())
    time.sleep(0.5)
    line = {"current_steps": 777, "total_steps": 1000, "loss": 0.125, "lr": 3e-05, "epoch": 1.5, "percentage": 77.7,
            "elapsed_time": "0:01:01", "remaining_time": "0:00:10"}
    with open(os.path.join(d, "trainer_log.jsonl"), "a") as f:
        f.write(json.dumps(line) + "\n")
    t0, data, got = time.time(), b"", None
    try:
        while time.time() - t0 < 5 and got is None:
            data += s.recv(65536)
            head, _, body = data.partition(b"\r\n\r\n")
            whole = unchunk(body).decode("utf-8", "replace").rpartition("\n\n")[0]
            for l in whole.split("\n"):
                if l.startswith("data: {"):
                    e = json.loads(l[6:])
                    check(e["seq"] > seq, "an event older than ?since= was sent")
                    for o in e["ops"]:
                        if o["part"] == "points" and any(p["step"] == 777 for p in o["data"]):
                            got = o
    except socket.timeout:
        pass
    s.close()
    check(got is not None and got["data"][-1]["loss"] == 0.125 and got["op"] == "append",
          "the appended line reached the stream within 5 s: %s" % got)
    if got:
        print("an appended trainer_log line reached the stream in %.2f s" % (time.time() - t0))


def viewers(port, n, seconds):
    t0 = time.time()
    while True:  # the run's server may not be up yet
        try:
            socket.create_connection(("127.0.0.1", port), timeout=2).close()
            break
        except OSError:
            if time.time() - t0 > 300:
                check(False, "no server on port %d within 300 s" % port)
                return
            time.sleep(0.1)
    counts, stop = [0] * n, time.time() + seconds
    stalls = []
    for i in range(5):  # half a request, then nothing
        s = socket.create_connection(("127.0.0.1", port), timeout=5)
        s.sendall(b"GET /api/state HTTP/1.1\r\nHost: 127.0.0.1\r\n")
        stalls.append(s)
    for i in range(5):  # a stream nobody reads, with a tiny receive buffer
        s = socket.socket()
        s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 1024)
        s.connect(("127.0.0.1", port))
        s.sendall(("GET /api/events?since=0 HTTP/1.1\r\nHost: 127.0.0.1:%d\r\n\r\n" % port).encode())
        stalls.append(s)

    def watch(i):
        try:
            s = socket.create_connection(("127.0.0.1", port), timeout=5)
            s.sendall(("GET /api/events HTTP/1.1\r\nHost: 127.0.0.1:%d\r\n\r\n" % port).encode())
            while time.time() < stop:
                try:
                    chunk = s.recv(65536)
                except socket.timeout:
                    continue
                if not chunk:
                    break
                counts[i] += chunk.count(b"\ndata: {") + chunk.startswith(b"data: {")
            s.close()
        except OSError as e:
            print("viewer %d: %s" % (i, e))

    ts = [threading.Thread(target=watch, args=(i,)) for i in range(n)]
    for t in ts:
        t.start()
    for t in ts:
        t.join()
    for s in stalls:
        s.close()
    print(json.dumps({"viewers": n, "with_events": sum(1 for c in counts if c > 0), "events_min": min(counts),
                      "events_max": max(counts)}))


if __name__ == "__main__":
    mode, port = sys.argv[1], int(sys.argv[2])
    if mode == "routes":
        routes(port, sys.argv[3])
    elif mode == "fuzz":
        fuzz(port, int(sys.argv[3]), int(sys.argv[4]), sys.argv[5])
    elif mode == "token":
        token(port, sys.argv[3])
    elif mode == "follow":
        follow(port, sys.argv[3])
    elif mode == "viewers":
        viewers(port, int(sys.argv[3]), float(sys.argv[4]))
    else:
        check(False, "unknown mode " + mode)
    print("dashboard_http %s: %d checks, %d failed" % (mode, checks[0], len(fails)))
    sys.exit(1 if fails else 0)
