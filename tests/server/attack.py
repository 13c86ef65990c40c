#!/usr/bin/env python3
"""Hostile connection shapes against latentd, for tests/integration/server_attack.sh.

usage: attack.py COMMAND URL [args...]; exits non-zero with a message on
failure and prints a one-line summary when the check passes. Every socket
goes to the server's own loopback address; attackers bind a second loopback
address (127.0.0.2) so that per-client limits can tell them from the probe."""
import socket
import sys
import time
import urllib.parse

ATTACKER = "127.0.0.2"


def addr(url):
    u = urllib.parse.urlparse(url)
    return u.hostname, u.port


def fail(msg):
    print("FAIL: " + msg)
    sys.exit(1)


def timed_request(url, request, seconds, source=None, until_header=False):
    """Seconds a raw request took to get a 200 on a fresh connection (the
    header only, or the whole response), or None."""
    t0 = time.monotonic()
    try:
        s = socket.create_connection(addr(url), timeout=seconds, source_address=(source, 0) if source else None)
        s.settimeout(max(0.1, seconds - (time.monotonic() - t0)))
        s.sendall(request)
        data = b""
        while not (until_header and b"\r\n\r\n" in data):
            chunk = s.recv(65536)
            if not chunk:
                break
            data += chunk
        s.close()
        if data.startswith(b"HTTP/1.1 200"):
            return time.monotonic() - t0
    except OSError:
        pass
    return None


def health_within(url, seconds, source=None):
    """Seconds /health took to answer 200 on a fresh connection, or None."""
    return timed_request(url, b"GET /health HTTP/1.1\r\nHost: t\r\nConnection: close\r\n\r\n", seconds, source, True)


def open_idle(url, n, source=None):
    socks = []
    for _ in range(n):
        s = socket.create_connection(addr(url), timeout=5, source_address=(source, 0) if source else None)
        socks.append(s)
    return socks


def cmd_deaf(url, n, wait):
    """Fill every connection slot with idle connections, let the server's
    idle timeout close them all at once, then expect /health to answer."""
    socks = open_idle(url, int(n))
    time.sleep(float(wait))
    took = health_within(url, 5)
    for s in socks:
        s.close()
    if took is None:
        fail(f"/health did not answer within 5 s after {n} idle connections timed out together")
    print(f"/health answered in {took:.2f} s after {n} idle connections were timed out together")


def cmd_deaf_hangup(url, n):
    """Fill every slot, then have all clients hang up at the same moment."""
    socks = open_idle(url, int(n))
    time.sleep(0.5)
    for s in socks:
        s.close()
    time.sleep(0.5)
    took = health_within(url, 5)
    if took is None:
        fail(f"/health did not answer within 5 s after {n} clients hung up together")
    print(f"/health answered in {took:.2f} s after {n} clients at the limit hung up together")


def cmd_hit_and_run(url, n):
    """Connections that send half a request with the FIN in the same segment."""
    n = int(n)
    for _ in range(n):
        s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        s.bind((ATTACKER, 0))
        s.connect(addr(url))
        s.setsockopt(socket.IPPROTO_TCP, socket.TCP_CORK, 1)
        s.sendall(b"POST /v1/completions HTTP/1.1\r\nHost: t\r\nContent-Length: 100\r\n\r\n{\"pro")
        s.close()  # data and FIN leave together when the cork comes off
    took = health_within(url, 5)
    if took is None:
        fail(f"/health did not answer within 5 s after {n} hit-and-run connections")
    print(f"/health answered in {took:.2f} s after {n} hit-and-run connections")


def cmd_slowloris(url, n, per_client):
    """One address opens n slow connections; another client must still be
    served, and the attacker gets no more than per_client of them."""
    n, per_client = int(n), int(per_client)
    socks, held = [], 0
    for _ in range(n):
        try:
            s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            s.bind((ATTACKER, 0))
            s.settimeout(5)
            s.connect(addr(url))
            s.sendall(b"GET /health HTTP/1.1\r\nHost: t\r\n")
            socks.append(s)
        except OSError:
            pass
    time.sleep(0.5)
    for s in socks:  # a connection the server refused has been closed by now
        try:
            s.sendall(b"X-a: b\r\n")
            s.setblocking(False)
            try:
                gone = s.recv(1) == b""
            except BlockingIOError:
                gone = False
            held += 0 if gone else 1
        except OSError:
            pass
    took = health_within(url, 5)
    for s in socks:
        s.close()
    if took is None:
        fail(f"/health from another client did not answer within 5 s while one address held {n} slow connections")
    if held > per_client:
        fail(f"one address holds {held} connections, above the per-client limit of {per_client}")
    print(f"another client answered in {took:.2f} s; the attacker holds {held} of {n} connections (limit {per_client})")


def exchange(url, data, timeout=5):
    """Sends raw bytes; returns (all bytes the server sent, closed by server?)."""
    s = socket.create_connection(addr(url), timeout=timeout)
    s.sendall(data)
    got, closed = b"", False
    t0 = time.monotonic()
    try:
        while time.monotonic() - t0 < timeout:
            chunk = s.recv(65536)
            if not chunk:
                closed = True
                break
            got += chunk
    except socket.timeout:
        pass
    except ConnectionResetError:
        closed = True
    s.close()
    return got, closed


SMUGGLED = b"GET /health HTTP/1.1\r\nHost: t\r\n\r\n"
BODY = b'{"prompt":"a","max_tokens":1}'
SMUGGLED_POST = (b"POST /v1/completions HTTP/1.1\r\nHost: t\r\nContent-Type: application/json\r\n"
                 b"Content-Length: %d\r\n\r\n" % len(BODY) + BODY)


def cmd_smuggle(url):
    cases = [
        ("Content-Length with Transfer-Encoding", 400,
         b"POST /v1/completions HTTP/1.1\r\nHost: t\r\nContent-Type: application/json\r\n"
         b"Content-Length: %d\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n" % (len(SMUGGLED) + 5) + SMUGGLED),
        ("two different Content-Lengths", 400,
         b"POST /v1/completions HTTP/1.1\r\nHost: t\r\nContent-Type: application/json\r\n"
         b"Content-Length: %d\r\nContent-Length: %d\r\n\r\n" % (len(BODY), len(BODY) + len(SMUGGLED)) + BODY + SMUGGLED),
        ("a Content-Length list", 400,
         b"POST /v1/completions HTTP/1.1\r\nHost: t\r\nContent-Length: %d, %d\r\n\r\n" % (len(BODY), len(BODY)) + BODY),
        ("Transfer-Encoding: xchunked", 501,
         b"POST /v1/completions HTTP/1.1\r\nHost: t\r\nTransfer-Encoding: xchunked\r\n\r\n5\r\nhello\r\n0\r\n\r\n"),
        ("Transfer-Encoding: gzip, chunked", 501,
         b"POST /v1/completions HTTP/1.1\r\nHost: t\r\nTransfer-Encoding: gzip, chunked\r\n\r\n0\r\n\r\n"),
        ("a 2^64-byte chunk (libmicrohttpd: 413)", 413,
         b"POST /v1/completions HTTP/1.1\r\nHost: t\r\nTransfer-Encoding: chunked\r\n\r\n10000000000000000\r\nabc"),
        ("no Host header", 400, b"GET /health HTTP/1.1\r\n\r\n"),
        # RFC 9112 section 5.1: a proxy that trims the space frames a body here
        # that latentd would have read as a second, smuggled request.
        ("Content-Length : N (whitespace before the colon)", 400,
         b"GET /health HTTP/1.1\r\nHost: t\r\nContent-Length : %d\r\n\r\n" % len(SMUGGLED_POST) + SMUGGLED_POST),
        ("a field name that is not a token", 400,
         b"GET /health HTTP/1.1\r\nHost: t\r\nX(y): 1\r\n\r\n" + SMUGGLED),
        ("a bare CR inside a field value", 400,
         b"GET /health HTTP/1.1\r\nHost: t\r\nX-A: a\rContent-Length: 5\r\n\r\n" + SMUGGLED),
    ]
    for name, want, data in cases:
        t0 = time.monotonic()
        got, closed = exchange(url, data)
        took = time.monotonic() - t0
        status = got.split(b"\r\n", 1)[0]
        if not status.startswith(b"HTTP/1.1 %d" % want):
            fail(f"{name}: want {want}, got {status[:60]!r} after {took:.1f} s")
        if b"HTTP/1.1 200" in got or b'"choices"' in got:
            fail(f"{name}: the server went on to serve the request smuggled behind it")
        if not closed or took > 3:
            fail(f"{name}: the connection was not closed at once ({took:.1f} s)")
    print(f"{len(cases)} smuggling and framing shapes refused with their status, connection closed")


def cmd_header_flood(url):
    """2,000 request headers: 431, and the server goes on."""
    h = b"".join(b"X-H%d: %s\r\n" % (i, b"v" * 50) for i in range(2000))
    got, closed = exchange(url, b"GET /health HTTP/1.1\r\nHost: t\r\n" + h + b"\r\n")
    if not got.startswith(b"HTTP/1.1 431"):
        fail("2000 headers: %r" % got.split(b"\r\n", 1)[0])
    if health_within(url, 5) is None:
        fail("/health does not answer after the header flood")
    print("2,000 request headers answered 431; the server goes on")


def connect_from(url, source, timeout=5):
    s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    s.bind((source, 0))
    s.settimeout(timeout)
    s.connect(addr(url))
    return s


def cmd_drip(url, n_addrs, per_addr, seconds):
    """Slowloris from many addresses: n_addrs x per_addr connections (more
    than max-connections, each address under the per-client cap), each sends
    a partial header and then one byte every 2 s. /health from a fresh
    address must answer within 5 s in at least 80% of probes, one per 2 s."""
    n_addrs, per_addr, seconds = int(n_addrs), int(per_addr), float(seconds)
    socks, s_addr, reopened = [], [], 0
    for a in range(n_addrs):
        for _ in range(per_addr):
            try:
                s = connect_from(url, "127.0.1.%d" % (a + 1))
                s.sendall(b"GET /health HTTP/1.1\r\nHost: t\r\nX-Drip: ")
                s.setblocking(False)
                socks.append(s)
                s_addr.append("127.0.1.%d" % (a + 1))
            except OSError:
                pass
    t_end, probes, answered, last_drip, worst = time.monotonic() + seconds, 0, 0, 0.0, 0.0
    while time.monotonic() < t_end:
        if time.monotonic() - last_drip >= 2:  # one byte each; a closed connection is opened again
            last_drip = time.monotonic()
            for i, s in enumerate(socks):
                if server_closed(s):
                    s.close()
                    try:
                        s = socks[i] = connect_from(url, s_addr[i])
                        s.sendall(b"GET /health HTTP/1.1\r\nHost: t\r\nX-Drip: ")
                        s.setblocking(False)
                        reopened += 1
                    except OSError:
                        continue
                try:
                    s.send(b"a")
                except OSError:
                    pass
        took = health_within(url, 5, source="127.0.2.1")
        probes += 1
        if took is not None:
            answered += 1
            worst = max(worst, took)
        time.sleep(max(0.0, 2 - (took if took is not None else 5)))
    for s in socks:
        s.close()
    if answered * 5 < probes * 4:
        fail(f"/health answered within 5 s in {answered} of {probes} probes while {len(socks)} connections drip-fed headers")
    print(f"/health answered in {answered} of {probes} probes (slowest {worst:.2f} s) beside {len(socks)} drip-fed connections "
          f"(reopened {reopened} times)")


def server_closed(s):
    """A non-blocking socket's peer closed it (end of stream or reset)."""
    try:
        return s.recv(4096) == b""
    except BlockingIOError:
        return False
    except OSError:
        return True


def rss_kib(pid):
    for line in open(f"/proc/{pid}/status"):
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
    return 0


def completion_within(url, seconds, source):
    """Seconds a small completion took to answer 200 on a fresh connection, or None."""
    body = b'{"prompt":"a","max_tokens":2}'
    return timed_request(url, b"POST /v1/completions HTTP/1.1\r\nHost: t\r\nContent-Type: application/json\r\n"
                         b"Connection: close\r\nContent-Length: %d\r\n\r\n" % len(body) + body, seconds, source)


def cmd_body_hold(url, pid, n, mib, max_growth_mib, body_timeout):
    """n connections each announce a body of `mib` MiB and send all of it but
    the last byte. The server's RSS may grow by at most max_growth_mib, a
    small completion from another address is served within 5 s, and every
    held body's connection is closed by the server after body_timeout."""
    n, size, pid = int(n), int(mib) << 20, int(pid)
    before = rss_kib(pid)
    chunk = b"x" * (1 << 20)
    socks, refused = [], 0
    for i in range(n):
        try:
            s = connect_from(url, "127.0.3.%d" % (i % 200 + 1))
            s.sendall(b"POST /v1/completions HTTP/1.1\r\nHost: t\r\nContent-Type: application/json\r\n"
                      b"Content-Length: %d\r\n\r\n" % size)
            left = size - 1
            while left > 0:
                k = min(left, len(chunk))
                s.sendall(chunk[:k])
                left -= k
            socks.append(s)
        except OSError:
            refused += 1
    time.sleep(1)
    growth = (rss_kib(pid) - before) / 1024
    took = completion_within(url, 5, "127.0.2.2")
    time.sleep(float(body_timeout) + 2.5)
    for s in socks:
        s.setblocking(False)
    still_open = sum(1 for s in socks if not server_closed(s))
    for s in socks:
        s.close()
    if still_open:
        fail(f"{still_open} connections holding a body without sending are still open after body-timeout-seconds")
    if growth > float(max_growth_mib):
        fail(f"RSS grew by {growth:.0f} MiB with {n} held {mib} MiB bodies (limit {max_growth_mib} MiB)")
    if took is None:
        fail(f"a small completion was not served within 5 s beside {n} held {mib} MiB bodies")
    print(f"RSS grew by {growth:.0f} MiB beside {n} held {mib} MiB bodies ({refused} refused at send); "
          f"a small completion took {took:.2f} s")


def cmd_nonreader(url, n, within):
    """One connection streams n sequences with a 4 KiB receive buffer and
    never reads. A small completion from another address must be served
    within `within` seconds."""
    body = (b'{"prompt":"hi","max_tokens":1000,"ignore_eos":true,"stream":true,"logprobs":20,"n":%d}' % int(n))
    hog = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    hog.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
    hog.bind(("127.0.4.1", 0))
    hog.connect(addr(url))
    hog.sendall(b"POST /v1/completions HTTP/1.1\r\nHost: t\r\nContent-Type: application/json\r\n"
                b"Content-Length: %d\r\n\r\n" % len(body) + body)
    time.sleep(3)  # its sequences run, fill the socket and pause
    took = completion_within(url, float(within), "127.0.2.3")
    hog.close()
    if took is None:
        fail(f"a small completion was not served within {within} s beside a non-reading n={n} stream")
    print(f"a small completion took {took:.2f} s beside a non-reading n={n} stream")


def cmd_stall(url, n, stall_s):
    """A non-reading stream is cancelled once its client took nothing for
    stream-stall-seconds: its connection is closed by the server."""
    body = (b'{"prompt":"hi","max_tokens":2000,"ignore_eos":true,"stream":true,"logprobs":20,"n":%d}' % int(n))
    hog = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    hog.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
    hog.bind(("127.0.4.2", 0))
    hog.connect(addr(url))
    hog.sendall(b"POST /v1/completions HTTP/1.1\r\nHost: t\r\nContent-Type: application/json\r\n"
                b"Content-Length: %d\r\n\r\n" % len(body) + body)
    time.sleep(float(stall_s) + 4)
    hog.settimeout(10)
    closed = False
    try:  # read what is buffered: the server must have ended the stream
        while True:
            if not hog.recv(1 << 20):
                closed = True
                break
    except (socket.timeout, ConnectionResetError):
        closed = isinstance(sys.exc_info()[1], ConnectionResetError)
    hog.close()
    if not closed:
        fail(f"a stream whose client read nothing for {stall_s} s is still open")
    print(f"a stream whose client read nothing was closed after stream-stall-seconds {stall_s}")


def cmd_lanes(url, loaders, seconds):
    """A measurement, not a check (issue 20 item 5): the latency of 20 KB
    bodies (parsed on the thread pool) quiet, then beside `loaders` clients
    that send 4 MiB prompts back to back. Prints p50 and p90 of each."""
    import json
    import threading
    import urllib.request
    small = json.dumps({"prompt": "Hello", "max_tokens": 1, "pad": "x" * 20000}).encode()
    big = json.dumps({"prompt": "lorem ipsum " * 349000, "max_tokens": 1}).encode()

    def post(body):
        req = urllib.request.Request(url + "/v1/completions", body, {"Content-Type": "application/json"})
        try:
            urllib.request.urlopen(req, timeout=120).read()
        except urllib.error.HTTPError as e:
            e.read()

    def sample(n):
        times = []
        for _ in range(n):
            t0 = time.monotonic()
            post(small)
            times.append(time.monotonic() - t0)
        times.sort()
        return times[len(times) // 2] * 1e3, times[int(len(times) * 0.9)] * 1e3

    q50, q90 = sample(40)
    stop = threading.Event()
    def load():
        while not stop.is_set():
            post(big)
    threads = [threading.Thread(target=load) for _ in range(int(loaders))]
    for t in threads:
        t.start()
    time.sleep(1)
    t_end = time.monotonic() + float(seconds)
    b50 = []
    while time.monotonic() < t_end:
        b50.append(sample(10))
    stop.set()
    for t in threads:
        t.join()
    l50 = sorted(x[0] for x in b50)[len(b50) // 2]
    l90 = sorted(x[1] for x in b50)[len(b50) // 2]
    print(f"20 KB bodies: quiet p50 {q50:.1f} ms p90 {q90:.1f} ms; beside {loaders} loaders of 4 MiB prompts p50 {l50:.1f} ms p90 {l90:.1f} ms")


if __name__ == "__main__":
    globals()["cmd_" + sys.argv[1].replace("-", "_")](*sys.argv[2:])
