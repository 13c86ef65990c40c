#!/usr/bin/env python3
"""Do big prompts stall everyone else? Inter-token latency of running streams,
quiet and while other clients post huge prompts.

usage: clients/prompt_stall.py URL [--streams 16] [--big-clients 4]
                                   [--big-mib 4] [--seconds 10] [--max-tokens 64]

Phase 1 (quiet): --streams clients stream completions back to back for
--seconds; every gap between two events of a stream is one inter-token sample.
Phase 2 (loaded): the same, while --big-clients clients post prompts of
--big-mib MiB in a loop (each is refused as longer than the context, after
the server has tokenized it). Prints p50/p99/max per phase and the ratio of
the p99s. Loopback only; stdlib only."""
import argparse
import http.client
import json
import sys
import threading
import time
import urllib.parse


def pct(xs, p):
    """Interpolated percentile (type 7) of a non-empty list."""
    xs = sorted(xs)
    if len(xs) == 1:
        return xs[0]
    h = (len(xs) - 1) * p / 100.0
    lo = int(h)
    return xs[lo] + (xs[min(lo + 1, len(xs) - 1)] - xs[lo]) * (h - lo)


def stream_loop(host, port, stop, gaps, max_tokens, errors):
    while not stop.is_set():
        try:
            c = http.client.HTTPConnection(host, port, timeout=120)
            body = json.dumps({"prompt": "The quick brown fox", "max_tokens": max_tokens, "stream": True,
                               "ignore_eos": True, "temperature": 0.7})
            c.request("POST", "/v1/completions", body, {"Content-Type": "application/json"})
            r = c.getresponse()
            if r.status != 200:
                errors.append("stream status %d" % r.status)
                r.read()
                continue
            last = None
            while True:
                line = r.readline()  # de-chunked; b"" at the end of the response
                if not line:
                    break
                if line.startswith(b"data: {"):
                    now = time.monotonic()
                    if last is not None:
                        gaps.append(now - last)
                    last = now
            c.close()
        except OSError as e:
            errors.append(repr(e))


def big_loop(host, port, stop, payload, counts, errors):
    while not stop.is_set():
        try:
            c = http.client.HTTPConnection(host, port, timeout=120)
            c.request("POST", "/v1/completions", payload, {"Content-Type": "application/json"})
            r = c.getresponse()
            r.read()
            counts.append(r.status)
            c.close()
        except OSError as e:
            errors.append(repr(e))


def phase(host, port, a, big):
    stop, gaps, errors, counts = threading.Event(), [], [], []
    threads = [threading.Thread(target=stream_loop, args=(host, port, stop, gaps, a.max_tokens, errors))
               for _ in range(a.streams)]
    if big:
        text = ("lorem ipsum dolor sit amet " * (a.big_mib * 1048576 // 27 + 1))[: a.big_mib * 1048576 - 64]
        payload = json.dumps({"prompt": text, "max_tokens": 1}).encode()
        threads += [threading.Thread(target=big_loop, args=(host, port, stop, payload, counts, errors))
                    for _ in range(a.big_clients)]
    for t in threads:
        t.start()
    time.sleep(a.seconds)
    stop.set()
    for t in threads:
        t.join()
    return gaps, counts, errors


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("url")
    p.add_argument("--streams", type=int, default=16)
    p.add_argument("--big-clients", type=int, default=4)
    p.add_argument("--big-mib", type=int, default=4)
    p.add_argument("--seconds", type=float, default=10)
    p.add_argument("--max-tokens", type=int, default=64)
    a = p.parse_args()
    u = urllib.parse.urlparse(a.url)
    res = {}
    for name, big in (("quiet", False), ("big prompts", True)):
        gaps, counts, errors = phase(u.hostname, u.port, a, big)
        if not gaps:
            print("no inter-token samples in phase %s (errors: %s)" % (name, errors[:3]))
            return 1
        res[name] = gaps
        extra = ""
        if big:
            extra = ", %d big prompts answered (%s)" % (len(counts), ", ".join(
                "%d x %d" % (counts.count(s), s) for s in sorted(set(counts))))
        print("%-12s inter-token p50 %6.1f ms  p99 %6.1f ms  max %6.1f ms  (n=%d%s%s)" % (
            name, pct(gaps, 50) * 1e3, pct(gaps, 99) * 1e3, max(gaps) * 1e3, len(gaps), extra,
            ", %d errors" % len(errors) if errors else ""))
    print("p99 ratio (big prompts / quiet): %.2f" % (pct(res["big prompts"], 99) / pct(res["quiet"], 99)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
