#!/usr/bin/env python3
"""Client side of tests/integration/server_nginx.sh (stdlib only): latentd
replicas behind nginx.

usage: nginx_client.py COMMAND args...; exits non-zero with a message on
failure, prints a one-line summary when a check passes.
  stream URL                 a streamed completion arrives as events spread in time
  ttft N URL_PROXY URL...    time to first token, direct (URL... in turn) vs
                             through the proxy, N streamed requests each, interleaved
  affinity URL N_KEYS N LOG  N requests per affinity key; from nginx's access
                             log: one replica per key, several replicas over all keys
  drain URL PID N            N requests (2 clients, streamed and not, with and
                             without affinity keys); SIGTERM to PID after a
                             quarter of them; none may fail"""
import http.client
import json
import os
import signal
import statistics
import sys
import threading
import time
import urllib.parse

# Token 100 is a plain ASCII token of the test models: every sampled token is
# text at once, so each one is its own event.
FORCE = {"logit_bias": {"100": 100}, "ignore_eos": True}


def fail(msg):
    print(msg)
    sys.exit(1)


def conn(url, timeout=60):
    u = urllib.parse.urlparse(url)
    return http.client.HTTPConnection(u.hostname, u.port, timeout=timeout)


def completion(c, body, headers=None):
    """Sends one completion on connection c. Returns (status, arrival times of
    the SSE events in seconds from the send (non-streamed: the body's), the
    raw body)."""
    h = {"Content-Type": "application/json"}
    h.update(headers or {})
    t0 = time.perf_counter()
    c.request("POST", "/v1/completions", json.dumps(body), h)
    r = c.getresponse()
    times, raw = [], b""
    while True:
        chunk = r.read1(65536)
        if not chunk:
            break
        now = time.perf_counter() - t0
        times += [now] * chunk.count(b"data: ")
        raw += chunk
    raw += r.read()  # b"", and the response is done: the connection can take the next request
    return r.status, times or [time.perf_counter() - t0], raw


def stream_ok(raw):
    """A complete stream: JSON events, a finish_reason, then [DONE]."""
    evs = [l[6:] for l in raw.decode("utf-8", "replace").split("\n") if l.startswith("data: ")]
    if not evs or evs[-1] != "[DONE]":
        return False
    js = [json.loads(e) for e in evs[:-1]]
    return any(j.get("choices") and j["choices"][0].get("finish_reason") for j in js) and not any("error" in j for j in js)


def cmd_stream(url):
    c = conn(url)
    st, times, raw = completion(c, dict(prompt="stream me", max_tokens=48, stream=True, **FORCE))
    if st != 200 or not stream_ok(raw):
        fail("stream through the proxy: %d %r" % (st, raw[-300:]))
    distinct = len(set(round(t, 3) for t in times))  # arrivals at least ~1 ms apart
    spread = times[-1] - times[0]
    # Buffered, the events would come in one or two reads at the end.
    if len(times) < 20 or distinct < 10 or spread < 0.05:
        fail("stream looks buffered: %d events, %d distinct arrival times, %.1f ms from first to last"
             % (len(times), distinct, spread * 1e3))
    print("%d events arriving at %d distinct times over %.0f ms (first after %.1f ms)"
          % (len(times), distinct, spread * 1e3, times[0] * 1e3))


def health_ms(c):
    t0 = time.perf_counter()
    c.request("GET", "/health")
    r = c.getresponse()
    r.read()
    if r.status != 200:
        fail("GET /health: %d" % r.status)
    return (time.perf_counter() - t0) * 1e3


def cmd_ttft(n, proxy, *direct):
    """Streamed completions (max_tokens 1) on kept-alive connections, direct
    and through the proxy in turn (which goes first alternates), then the same
    for GET /health: the proxy's own share without the engine's jitter."""
    n = int(n)
    body = dict(prompt="The jury said", max_tokens=1, stream=True)
    pc = conn(proxy)
    dcs = [conn(u) for u in direct]
    via, dir_, hvia, hdir = [], [], [], []
    for i in range(n):
        pair = [("direct", dcs[i % len(dcs)], dir_), ("proxy", pc, via)]
        for which, c, out in (pair if i % 2 == 0 else pair[::-1]):
            st, times, raw = completion(c, body)
            if st != 200 or not stream_ok(raw):
                fail("%s request %d: %d %r" % (which, i, st, raw[-200:]))
            out.append(times[0] * 1e3)
    for i in range(n):
        hdir.append(health_ms(dcs[i % len(dcs)]))
        hvia.append(health_ms(pc))
    md, mp = statistics.median(dir_), statistics.median(via)
    hd, hp = statistics.median(hdir), statistics.median(hvia)
    if mp > md + 100:
        fail("the proxy adds %.1f ms to the median time to first token" % (mp - md))
    print("%d streamed requests each (max_tokens 1, kept-alive connections): time to first token median direct "
          "%.2f ms, through nginx %.2f ms (%+.2f ms), p90 %.2f / %.2f ms; GET /health median %.3f / %.3f ms (%+.3f ms)"
          % (n, md, mp, mp - md, statistics.quantiles(dir_, n=10)[-1], statistics.quantiles(via, n=10)[-1],
             hd, hp, hp - hd))


def cmd_affinity(url, n_keys, n, log):
    n_keys, n = int(n_keys), int(n)
    c = conn(url)
    for k in range(n_keys):
        for _ in range(n):
            st, _, raw = completion(c, {"prompt": "turn", "max_tokens": 2}, {"X-Session-Affinity": "conv-%d" % k})
            if st != 200:
                fail("key conv-%d: %d %r" % (k, st, raw[:200]))
    for _ in range(50):  # nginx writes a request's line just after its response
        seen = {}
        for line in open(log):
            parts = line.split('"')  # status "key" "upstream_addr" "upstream_status" uri
            if len(parts) >= 5 and parts[1].startswith("conv-"):
                seen.setdefault(parts[1], []).append(parts[3])
        if sum(map(len, seen.values())) >= n_keys * n:
            break
        time.sleep(0.1)
    if len(seen) != n_keys or any(len(v) != n for v in seen.values()):
        fail("access log: %r" % seen)
    split = {k: set(v) for k, v in seen.items() if len(set(v)) != 1}
    if split:
        fail("keys served by more than one replica: %r" % split)
    used = {v[0] for v in seen.values()}
    if len(used) < 2:
        fail("all %d keys went to %s" % (n_keys, used))
    print("%d keys x %d requests: each key on one replica, keys on %d replicas" % (n_keys, n, len(used)))


def cmd_drain(url, pid, n):
    pid, n = int(pid), int(n)
    lock = threading.Lock()
    state = {"next": 0, "done": 0, "errors": [], "signalled": None}

    def worker(wid):
        c = conn(url)
        while True:
            with lock:
                i = state["next"]
                if i >= n:
                    return
                state["next"] += 1
            stream = i % 2 == 0
            headers = {"X-Session-Affinity": "drain-%d" % (i % 6)} if i % 3 else {}
            body = dict(prompt="request %d" % i, max_tokens=12, stream=stream, **FORCE)
            try:
                st, _, raw = completion(c, body, headers)
                ok = st == 200 and (stream_ok(raw) if stream else json.loads(raw)["choices"][0]["finish_reason"])
            except (OSError, http.client.HTTPException, ValueError) as e:
                st, raw, ok = -1, repr(e).encode(), False
                c.close()
                c = conn(url)
            with lock:
                if not ok:
                    state["errors"].append("request %d (stream %s): %d %r" % (i, stream, st, raw[:160]))
                state["done"] += 1
                if state["done"] == n // 4 and state["signalled"] is None:
                    os.kill(pid, signal.SIGTERM)
                    state["signalled"] = state["next"]

    ts = [threading.Thread(target=worker, args=(w,)) for w in range(2)]
    for t in ts:
        t.start()
    for t in ts:
        t.join()
    if state["errors"]:
        fail("%d of %d requests failed:\n  %s" % (len(state["errors"]), n, "\n  ".join(state["errors"][:10])))
    print("%d requests, SIGTERM to the replica after %d: 0 errors" % (n, state["signalled"]))


if __name__ == "__main__":
    cmds = {"stream": cmd_stream, "ttft": cmd_ttft, "affinity": cmd_affinity, "drain": cmd_drain}
    if len(sys.argv) < 2 or sys.argv[1] not in cmds:
        fail(__doc__)
    cmds[sys.argv[1]](*sys.argv[2:])
