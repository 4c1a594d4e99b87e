#!/usr/bin/env python3
"""The parts of bench/cachesoak.sh that speak HTTP: an origin, checking clients, a verifier.

  objects DIR N                 write N objects o0.bin..o{N-1}.bin (version 0) into DIR
  origin PORT DIR LOG           serve DIR (Range, strong ETag, Last-Modified), one line per
                                request in LOG; while the file DIR/.faults exists, answer about
                                one request in six wrongly: 503, a Content-Length longer than
                                the body, a reset, a stall of 1.5 s or a truncation mid-body
  clients PORT DIR SECS THREADS [change | purge ADMIN_PORT TOKEN]
                                random GETs, whole and single ranges (some past the end), and
                                HEADs, each answer checked byte for byte against a version of its
                                object; `change` also publishes new versions of random objects
                                (20/s), `purge` purges random objects (20/s) on the admin port
  verify PORT DIR RANGES        every object whole, then RANGES random ranges
  dups LOG DIR SLICE            origin requests per object against its slice count
Every object's bytes follow from (index, version), so any answer can be checked.
With SOAK_NOVAL=1 in the environment (of every command) the origin sends neither ETag nor
Last-Modified and every version of an object has the same size, so nothing but the bytes tells
two versions apart.
"""
import http.client
import json
import os
import random
import socket
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer


NOVAL = os.environ.get("SOAK_NOVAL") == "1"


def body(i, v):
    r = random.Random(i * 100_003 + v)
    n = random.Random(i * 100_003).randint(1_000, 3_600_000) if NOVAL else r.randint(1_000, 3_600_000)
    return r.randbytes(n)


def size(i, v):
    """len(body(i, v)) without making the bytes."""
    r = random.Random(i * 100_003 if NOVAL else i * 100_003 + v)
    return r.randint(1_000, 3_600_000)


def publish(d, i, v):
    tmp = f"{d}/.o{i}.tmp"
    with open(tmp, "wb") as f:
        f.write(body(i, v))
    # The version first (atomically: a checker reading it mid-write would see none), so a
    # checker never knows fewer versions than the origin may serve.
    with open(f"{d}/.o{i}.version.tmp", "w") as f:
        f.write(str(v))
    os.rename(f"{d}/.o{i}.version.tmp", f"{d}/.o{i}.version")
    os.rename(tmp, f"{d}/o{i}.bin")


def version(d, i):
    try:
        return int(open(f"{d}/.o{i}.version").read())
    except (OSError, ValueError):
        return 0


def objects(d):
    return sorted(int(f[1:-4]) for f in os.listdir(d) if f.startswith("o") and f.endswith(".bin"))


def origin(port, d, log):
    out = open(log, "a", buffering=1)
    lock = threading.Lock()

    class H(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, *a):
            pass

        def empty(self, code, extra=()):
            self.send_response(code)
            for k, v in extra:
                self.send_header(k, v)
            self.send_header("Content-Length", "0")
            self.end_headers()

        def do_GET(self):
            path = self.path.split("?")[0]
            rng = self.headers.get("Range") or "-"
            try:
                with open(d + path, "rb") as f:
                    st = os.fstat(f.fileno())
                    data = f.read()
            except OSError:
                return self.empty(404)
            x = random.random() if os.path.exists(f"{d}/.faults") else 1.0
            code, a, b = 200, 0, len(data) - 1
            if rng.startswith("bytes="):
                s, e = rng[6:].split("-")
                a, b = int(s), min(int(e), len(data) - 1) if e else len(data) - 1
                code = 206
            with lock:
                out.write(f"{path} {rng} {416 if a >= len(data) else code} {x:.3f}\n")
            if x < 0.03:
                return self.empty(503)
            if a >= len(data):
                return self.empty(416, [("Content-Range", f"bytes */{len(data)}")])
            part = data[a:b + 1]
            self.send_response(code)
            if not NOVAL:
                self.send_header("ETag", f'"{st.st_ino:x}-{st.st_size:x}-{st.st_mtime_ns:x}"')
                self.send_header("Last-Modified", self.date_time_string(int(st.st_mtime)))
            longer = 0.03 <= x < 0.06
            self.send_header("Content-Length", str(len(part) + (1000 if longer else 0)))
            if code == 206:
                self.send_header("Content-Range", f"bytes {a}-{b}/{len(data)}")
            self.end_headers()
            if self.command == "HEAD":
                return
            try:
                if 0.06 <= x < 0.09:  # reset mid-body
                    self.wfile.write(part[: len(part) // 2])
                    self.wfile.flush()
                    self.connection.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, b"\x01\0\0\0\0\0\0\0")
                    self.connection.close()
                elif 0.09 <= x < 0.12:  # stall mid-body
                    self.wfile.write(part[: len(part) // 3])
                    self.wfile.flush()
                    time.sleep(1.5)
                elif 0.12 <= x < 0.15:  # truncated, then a clean close
                    self.wfile.write(part[:-1])
                else:
                    self.wfile.write(part)
                    if not longer:
                        return
            except OSError:
                pass
            self.close_connection = True

        do_HEAD = do_GET

    ThreadingHTTPServer.daemon_threads = True
    ThreadingHTTPServer(("127.0.0.1", port), H).serve_forever()


def check(d, i, status, data, cr, seen):
    """True when (status, data, Content-Range) is a correct answer for some version of o{i}."""
    hi = version(d, i)
    for v in range(hi, max(-1, hi - 60), -1):
        if (i, v) not in seen:
            seen[(i, v)] = body(i, v)
        b = seen[(i, v)]
        if status == 200 and data == b:
            return True
        if status == 206 and cr:
            span, total = cr.split(" ")[1].split("/")
            s, e = map(int, span.split("-"))
            if int(total) == len(b) and data == b[s:e + 1]:
                return True
    return False


def clients(port, d, secs, threads, change, purge=None):
    ids = objects(d)
    stop = time.time() + secs
    stats = {"ok": 0, "bad": 0, "cut": 0, "5xx": 0, "416": 0, "other": 0}
    lock = threading.Lock()

    def client():
        seen = {}
        c = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
        while time.time() < stop:
            i = ids[min(int(random.paretovariate(0.9)) - 1, len(ids) - 1)]
            hdrs = {}
            method = "HEAD" if random.random() < 0.05 else "GET"
            if method == "GET" and random.random() < 0.4:
                a = random.randrange(0, 3_700_000)
                hdrs["Range"] = f"bytes={a}-{a + random.randrange(0, 1_500_000)}"
            try:
                c.request(method, f"/o{i}.bin", headers=hdrs)
                r = c.getresponse()
                data = r.read()
            except (OSError, http.client.HTTPException):
                with lock:
                    stats["cut"] += 1
                c.close()
                c = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
                continue
            if method == "HEAD" and r.status >= 500:
                k = "5xx"  # a clean error (the origin's, passed through), as for a GET
            elif method == "HEAD":
                n = int(r.getheader("Content-Length", "-1"))
                hi = version(d, i)
                known = {len(body(i, v)) for v in range(hi, max(-1, hi - 3), -1)}
                k = "ok" if r.status == 200 and not data and n in known else "bad"
            elif r.status in (200, 206):
                k = "ok" if check(d, i, r.status, data, r.getheader("Content-Range"), seen) else "bad"
            elif r.status == 416:
                # Only for a range that starts past the end of a version the node may still
                # serve (the newest three).
                hi = version(d, i)
                a = int(hdrs["Range"][6:].split("-")[0]) if "Range" in hdrs else 0
                fits = any(a >= size(i, v) for v in range(hi, max(-1, hi - 3), -1))
                k = "416" if "Range" in hdrs and fits else "bad"
            else:
                k = "5xx" if r.status >= 500 else "other"
            with lock:
                stats[k] += 1
            if k == "bad":
                print(f"BAD o{i} {r.status} {r.getheader('Content-Range')} {r.getheader('X-Cache')} {len(data)}B", file=sys.stderr)

    def changer():
        while time.time() < stop:
            i = random.choice(ids)
            publish(d, i, version(d, i) + 1)
            time.sleep(0.05)

    def purger():
        aport, token = purge
        c = http.client.HTTPConnection("127.0.0.1", aport, timeout=30)
        while time.time() < stop:
            key = f"/o{random.choice(ids)}.bin"
            c.request("POST", f"/cache/purge?key={key}", headers={"Authorization": f"Bearer {token}"})
            r = c.getresponse()
            r.read()
            with lock:
                stats["purged" if r.status == 200 else "purge_failed"] = stats.get("purged" if r.status == 200 else "purge_failed", 0) + 1
            time.sleep(0.05)

    ts = [threading.Thread(target=client) for _ in range(threads)]
    if change:
        ts.append(threading.Thread(target=changer))
    if purge:
        ts.append(threading.Thread(target=purger))
    for t in ts:
        t.start()
    for t in ts:
        t.join()
    print(json.dumps(stats))


def verify(port, d, ranges):
    bad = 0
    seen = {}
    c = http.client.HTTPConnection("127.0.0.1", port, timeout=60)
    ids = objects(d)
    todo = [(i, None) for i in ids]
    for _ in range(ranges):
        i = random.choice(ids)
        a = random.randrange(0, 3_600_000)
        todo.append((i, (a, a + random.randrange(0, 1_000_000))))
    for i, rng in todo:
        hdrs = {"Range": f"bytes={rng[0]}-{rng[1]}"} if rng else {}
        try:
            c.request("GET", f"/o{i}.bin", headers=hdrs)
            r = c.getresponse()
            data = r.read()
        except (OSError, http.client.HTTPException) as e:
            print(f"BAD o{i} {rng}: {e}", file=sys.stderr)
            bad += 1
            c = http.client.HTTPConnection("127.0.0.1", port, timeout=60)
            continue
        want = body(i, version(d, i))
        ok = (r.status == 200 and data == want) if not rng else (
            (r.status == 416 and rng[0] >= len(want))
            or (r.status == 206 and data == want[rng[0]:rng[1] + 1]))
        if not ok:
            print(f"BAD o{i} {rng} {r.status} {r.getheader('X-Cache')} {len(data)}B", file=sys.stderr)
            bad += 1
    print(bad)


def dups(log, d, slice_size):
    asked = {}
    for line in open(log):
        path, rng, status, _ = line.split()
        if status != "416":
            asked[path] = asked.get(path, 0) + 1
    extra = 0
    for i in objects(d):
        n = len(body(i, version(d, i)))
        extra += max(0, asked.get(f"/o{i}.bin", 0) - max(1, -(-n // slice_size)))
    print(extra)


if __name__ == "__main__":
    cmd, a = sys.argv[1], sys.argv[2:]
    if cmd == "objects":
        os.makedirs(a[0], exist_ok=True)
        for i in range(int(a[1])):
            publish(a[0], i, 0)
    elif cmd == "origin":
        origin(int(a[0]), a[1], a[2])
    elif cmd == "clients":
        extra = a[4:]
        purge = (int(extra[1]), extra[2]) if extra[:1] == ["purge"] else None
        clients(int(a[0]), a[1], float(a[2]), int(a[3]), extra[:1] == ["change"], purge)
    elif cmd == "verify":
        verify(int(a[0]), a[1], int(a[2]))
    elif cmd == "dups":
        dups(a[0], a[1], int(a[2]))
    else:
        sys.exit(f"cachesoak.py: unknown command {cmd}")
