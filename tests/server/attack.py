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


def health_within(url, seconds, source=None):
    """Seconds /health took to answer 200 on a fresh connection, or None."""
    t0 = time.monotonic()
    try:
        s = socket.create_connection(addr(url), timeout=seconds, source_address=(source, 0) if source else None)
        s.settimeout(max(0.1, seconds - (time.monotonic() - t0)))
        s.sendall(b"GET /health HTTP/1.1\r\nHost: t\r\nConnection: close\r\n\r\n")
        data = b""
        while b"\r\n\r\n" not in data:
            chunk = s.recv(4096)
            if not chunk:
                break
            data += chunk
        s.close()
        if data.startswith(b"HTTP/1.1 200"):
            return time.monotonic() - t0
    except OSError:
        pass
    return None


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
    ]
    for name, want, data in cases:
        t0 = time.monotonic()
        got, closed = exchange(url, data)
        took = time.monotonic() - t0
        status = got.split(b"\r\n", 1)[0]
        if not status.startswith(b"HTTP/1.1 %d" % want):
            fail(f"{name}: want {want}, got {status[:60]!r} after {took:.1f} s")
        if b"HTTP/1.1 200" in got:
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


if __name__ == "__main__":
    globals()["cmd_" + sys.argv[1].replace("-", "_")](*sys.argv[2:])
