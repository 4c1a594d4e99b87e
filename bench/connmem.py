"""Client half of bench/connmem.sh: open N connections to 127.0.0.1:PORT in one state, then
measure how much the server processes grew (Pss and Rss from /proc/PID/smaps_rollup, summed
over PIDS), per connection.

Usage: connmem.py PORT MODE N PIDS...   MODE = idle | header | slow
  idle    each connection sends one GET of /small.dat, reads the whole answer, stays open
  header  each connection sends half a request head (request line + one header), stays open
  slow    each connection asks for /big.dat with a 4 KiB receive buffer and reads 16 KiB of it,
          then stops reading (a stalled reader: the response stays in flight)
Prints one line: mode, connections still open at the end, bytes per connection (Pss, Rss).
"""
import os, select, socket, struct, sys, time

port, mode, n = int(sys.argv[1]), sys.argv[2], int(sys.argv[3])
pids = [int(p) for p in sys.argv[4:]]
DEADLINE = time.monotonic() + 120  # the whole run is bounded


def mem():
    pss = rss = 0
    for pid in pids:
        with open(f"/proc/{pid}/smaps_rollup") as f:
            for line in f:
                k, v = line.split(":", 1)
                if k == "Pss":
                    pss += int(v.split()[0]) * 1024
                elif k == "Rss":
                    rss += int(v.split()[0]) * 1024
    return pss, rss


def request(path):
    return f"GET {path} HTTP/1.1\r\nHost: 127.0.0.1\r\nUser-Agent: connmem\r\nAccept: */*\r\n\r\n".encode()


def head_len(buf):
    i = buf.find(b"\r\n\r\n")
    if i < 0:
        return None, None
    cl = 0
    for line in buf[:i].split(b"\r\n")[1:]:
        k, _, v = line.partition(b":")
        if k.strip().lower() == b"content-length":
            cl = int(v)
    return i + 4, cl


def open_conns(count, rcvbuf=None):
    socks = []
    ep = select.epoll()
    pending = {}
    batch = 500
    while len(socks) < count:
        for _ in range(min(batch, count - len(socks) - len(pending))):
            s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            s.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
            if rcvbuf:
                s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, rcvbuf)
            s.setblocking(False)
            try:
                s.connect(("127.0.0.1", port))
            except BlockingIOError:
                pass
            ep.register(s.fileno(), select.EPOLLOUT)
            pending[s.fileno()] = s
        while pending:
            if time.monotonic() > DEADLINE:
                sys.exit("connmem: timed out connecting")
            for fd, ev in ep.poll(1.0):
                s = pending.pop(fd)
                ep.unregister(fd)
                err = s.getsockopt(socket.SOL_SOCKET, socket.SO_ERROR)
                if err:
                    sys.exit(f"connmem: connect failed: {os.strerror(err)}")
                socks.append(s)
    ep.close()
    return socks


def exchange(socks, payload, want):
    """Send payload on every socket; read until want(buf) says done (None = read nothing)."""
    ep = select.epoll()
    bufs = {}
    for s in socks:
        s.send(payload)
        if want is not None:
            ep.register(s.fileno(), select.EPOLLIN)
            bufs[s.fileno()] = b""
    by_fd = {s.fileno(): s for s in socks}
    while bufs:
        if time.monotonic() > DEADLINE:
            sys.exit(f"connmem: timed out waiting for {len(bufs)} answers")
        for fd, ev in ep.poll(1.0):
            data = by_fd[fd].recv(65536)
            if not data:
                sys.exit("connmem: server closed a connection early")
            bufs[fd] += data
            if want(bufs[fd]):
                ep.unregister(fd)
                del bufs[fd]
    ep.close()


def whole_response(buf):
    h, cl = head_len(buf)
    return h is not None and len(buf) >= h + cl


def still_open(socks):
    """Connections the server has not closed (no EOF, no 408 waiting)."""
    alive = 0
    for s in socks:
        try:
            data = s.recv(1, socket.MSG_PEEK)
            if data and mode == "slow":
                alive += 1  # the stalled body is still coming
            elif not data:
                pass
        except BlockingIOError:
            alive += 1
        except OSError:
            pass
    return alive


# Warm up: a few connections through the whole exchange, so that per-worker buffers and
# allocator arenas exist before the baseline.
warm = open_conns(64)
exchange(warm, request("/small.dat"), whole_response)
for s in warm:
    s.close()
time.sleep(0.5)
pss0, rss0 = mem()
if mode == "idle":
    socks = open_conns(n)
    exchange(socks, request("/small.dat"), whole_response)
elif mode == "header":
    socks = open_conns(n)
    exchange(socks, b"GET /small.dat HTTP/1.1\r\nHost: 127.0.0.1\r\n", None)
elif mode == "slow":
    socks = open_conns(n, rcvbuf=4096)
    exchange(socks, request("/big.dat"), lambda b: len(b) >= 16384)
else:
    sys.exit(f"connmem: unknown mode {mode}")
time.sleep(2)  # let the server finish reacting (reads, timers, partial sends)
pss1, rss1 = mem()
alive = still_open(socks)
print(f"{mode:<7} conns={n} open_at_end={alive} pss_per_conn={(pss1 - pss0) / n:.0f} "
      f"rss_per_conn={(rss1 - rss0) / n:.0f} pss_total_mib={pss1 / 2**20:.1f}")
for s in socks:
    s.close()
