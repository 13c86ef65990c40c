#!/usr/bin/env python3
"""HTTP checks for the latentd integration tests (stdlib only).

usage: client.py COMMAND URL [args...]; exits non-zero with a message on
failure. Commands are the check groups the tests/integration/server_*.sh
scripts call; each prints a one-line summary when it passes."""
import http.client
import json
import os
import signal
import socket
import sys
import threading
import time
import urllib.parse


def conn(url, timeout=60):
    u = urllib.parse.urlparse(url)
    return http.client.HTTPConnection(u.hostname, u.port, timeout=timeout)


def request(url, method, path, body=None, headers=None, timeout=60, c=None):
    """(status, headers dict (lower-case), body bytes)."""
    own = c is None
    c = c or conn(url, timeout)
    h = {"Content-Type": "application/json"}
    h.update(headers or {})
    data = body if isinstance(body, (bytes, type(None))) else json.dumps(body).encode()
    c.request(method, path, data, h)
    r = c.getresponse()
    raw = r.read()
    hd = {k.lower(): v for k, v in r.getheaders()}
    if own:
        c.close()
    return r.status, hd, raw


def post(url, path, body, **kw):
    return request(url, "POST", path, body, **kw)


def events(raw):
    """SSE data payloads (parsed JSON, or the string '[DONE]') and comment lines."""
    out, comments = [], []
    for block in raw.decode("utf-8").split("\n\n"):
        for line in block.split("\n"):
            if line.startswith("data: "):
                p = line[6:]
                out.append(p if p == "[DONE]" else json.loads(p))
            elif line.startswith(":"):
                comments.append(line)
    return out, comments


def stream_text(evs, chat=False, index=0):
    t = ""
    for e in evs:
        if e == "[DONE]" or "choices" not in e:
            continue
        for ch in e["choices"]:
            if ch["index"] != index:
                continue
            t += (ch["delta"].get("content") or "") if chat else ch["text"]
    return t


def completion(url, prompt, stream=False, **fields):
    body = {"prompt": prompt, "temperature": 0, "stream": stream}
    body.update(fields)
    st, hd, raw = post(url, "/v1/completions", body)
    if st != 200:
        raise SystemExit("completion: HTTP %d: %s" % (st, raw[:300]))
    if stream:
        evs, _ = events(raw)
        if evs[-1] != "[DONE]":
            raise SystemExit("stream does not end with [DONE]")
        return stream_text(evs)
    return json.loads(raw)["choices"][0]["text"]


def get_metric(url, name):
    st, _, raw = request(url, "GET", "/metrics")
    for line in raw.decode().split("\n"):
        parts = line.split(" ")
        if len(parts) == 2 and parts[0] == name:
            return float(parts[1])
    raise SystemExit("metric %s missing" % name)


def wait_idle(url, timeout=10):
    """Waits until no session is alive; fails with the gauges otherwise."""
    end = time.time() + timeout
    while True:
        s, r, q = (get_metric(url, m) for m in ("latentd_sessions", "latentd_running_sessions", "latentd_queue_length"))
        if s == 0 and r == 0 and q == 0:
            return
        if time.time() > end:
            raise SystemExit("sessions left behind: sessions=%g running=%g queued=%g" % (s, r, q))
        time.sleep(0.05)


def fail(msg):
    print(msg)
    sys.exit(1)


# ---- commands ----------------------------------------------------------------

def cmd_text(url, prompt, n, out, *extra):
    """Writes a completion's text (UTF-8 bytes) to `out`; extra: JSON merged into the body."""
    fields = {"max_tokens": int(n)}
    for e in extra:
        fields.update(json.loads(e))
    open(out, "wb").write(completion(url, prompt, **fields).encode("utf-8"))


def cmd_concurrency(url, n="64", base="8", spread="23"):
    """n streaming requests at once give the texts the same requests give one at a time."""
    n, base, spread = int(n), int(base), int(spread)
    prompts = ["Request %d: the story of the %s" % (i, ["fox", "dog", "cat", "owl"][i % 4]) for i in range(n)]
    lens = [base + (i * 5) % spread for i in range(n)]
    alone = [completion(url, prompts[i], max_tokens=lens[i], ignore_eos=True) for i in range(n)]
    together = [None] * n
    errors = []

    def run(i):
        try:
            together[i] = completion(url, prompts[i], stream=True, max_tokens=lens[i], ignore_eos=True)
        except BaseException as e:  # noqa
            errors.append("%d: %s" % (i, e))
    ts = [threading.Thread(target=run, args=(i,)) for i in range(n)]
    for t in ts:
        t.start()
    for t in ts:
        t.join()
    if errors:
        fail("errors: %s" % errors[:3])
    bad = [i for i in range(n) if alone[i] != together[i]]
    if bad:
        fail("%d of %d differ, e.g. #%d alone %r together %r" % (len(bad), n, bad[0], alone[bad[0]], together[bad[0]]))
    wait_idle(url)
    print("%d concurrent streams equal the sequential texts (%g preemptions so far)" %
          (n, get_metric(url, "latentd_preemptions_total")))


def cmd_n_equal(url):
    """n=3 greedy choices (forks of one prompt state) equal a single greedy completion."""
    one = completion(url, "Forked prompts share pages", max_tokens=20, ignore_eos=True)
    st, _, raw = post(url, "/v1/completions", {"prompt": "Forked prompts share pages", "max_tokens": 20, "n": 3,
                                               "temperature": 0, "ignore_eos": True})
    texts = [c["text"] for c in sorted(json.loads(raw)["choices"], key=lambda c: c["index"])]
    if st != 200 or texts != [one] * 3:
        fail("n=3: %r vs %r" % (texts, one))
    st, _, raw = post(url, "/v1/completions", {"prompt": "Forked prompts share pages", "max_tokens": 20, "n": 4,
                                               "temperature": 1.0, "seed": 11, "ignore_eos": True})
    texts = [c["text"] for c in json.loads(raw)["choices"]]
    if len(set(texts)) < 2:
        fail("n=4 sampled choices are all equal: %r" % texts)
    print("n=3 greedy forks equal one greedy run; sampled forks differ")


def cmd_overload(url, n="24", limit="1e9"):
    """More long requests than slots + queue: some 429 with Retry-After, the rest succeed;
    admitted sequences never exceed max-sessions + queue-len. (latentd_sessions also counts
    sessions still delivering their last bytes and ones about to be refused, so it may
    pass the limit for a moment; the admission bound is latentd_sessions_admitted.)"""
    n = int(n)
    results, peak = [], [0]
    stop = threading.Event()

    def sample():
        while not stop.is_set():
            try:
                peak[0] = max(peak[0], get_metric(url, "latentd_sessions_admitted"))
            except BaseException:  # noqa
                pass
            time.sleep(0.02)

    def run(i):
        st, hd, raw = post(url, "/v1/completions", {"prompt": "load %d" % i, "max_tokens": 300, "ignore_eos": True,
                                                    "stream": i % 2 == 0})
        results.append((st, hd.get("retry-after"), raw[:200]))
    sm = threading.Thread(target=sample)
    sm.start()
    ts = [threading.Thread(target=run, args=(i,)) for i in range(n)]
    for t in ts:
        t.start()
    for t in ts:
        t.join()
    stop.set()
    sm.join()
    codes = sorted(r[0] for r in results)
    rejected = [r for r in results if r[0] == 429]
    if not rejected or not any(r[0] == 200 for r in results):
        fail("expected both 200s and 429s, got %s" % codes)
    if any(r[0] not in (200, 429) for r in results):
        fail("unexpected statuses: %s" % [r for r in results if r[0] not in (200, 429)][:2])
    if not all(r[1] for r in rejected):
        fail("a 429 without Retry-After")
    if any(json.loads(r[2])["error"]["type"] != "rate_limit_error" for r in rejected):
        fail("429 body is not the error shape: %r" % rejected[0][2])
    limit = float(limit)
    if peak[0] > limit:
        fail("admitted sequences peaked at %g, over the limit %g" % (peak[0], limit))
    wait_idle(url)
    print("%d requests: %d ok, %d rejected with 429 + Retry-After; peak admitted %g" %
          (n, codes.count(200), len(rejected), peak[0]))


def raw_request(url, body_dict):
    u = urllib.parse.urlparse(url)
    body = json.dumps(body_dict).encode()
    s = socket.create_connection((u.hostname, u.port), timeout=30)
    s.sendall(b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n"
              % len(body) + body)
    return s


def cmd_disconnect(url, mode):
    """A client that leaves mid-prefill, mid-decode or in the queue leaves no session behind."""
    if mode == "prefill":
        prompt = " ".join("w%d" % i for i in range(400))
        before = get_metric(url, "latentd_prefill_tokens_total")
        s = raw_request(url, {"prompt": prompt, "max_tokens": 5, "stream": True})
        end = time.time() + 10
        while get_metric(url, "latentd_running_sessions") < 1 and time.time() < end:
            time.sleep(0.005)
        done = get_metric(url, "latentd_prefill_tokens_total") - before
        s.close()
        mode = "prefill (%d prompt tokens in when it left)" % done
    elif mode == "decode":
        s = raw_request(url, {"prompt": "decode and leave", "max_tokens": 1500, "ignore_eos": True, "stream": True})
        got = b""
        while got.count(b"data: ") < 5:
            got += s.recv(4096)
        s.close()
    elif mode == "decode-nonstream":
        s = raw_request(url, {"prompt": "wait and leave", "max_tokens": 1500, "ignore_eos": True})
        time.sleep(0.2)
        s.close()
    elif mode == "queue":
        # one long request holds the only slot; a second waits in the queue, gets keep-alive comments, leaves
        hold = raw_request(url, {"prompt": "hold the slot", "max_tokens": 4000, "ignore_eos": True, "stream": True})
        time.sleep(0.2)
        s = raw_request(url, {"prompt": "queued", "max_tokens": 5, "stream": True})
        got, end = b"", time.time() + 10
        s.settimeout(10)
        while b": keep-alive" not in got and time.time() < end:
            got += s.recv(4096)
        if b": keep-alive" not in got:
            fail("no keep-alive comment while queued: %r" % got[:300])
        if get_metric(url, "latentd_queue_length") < 1:
            fail("the second request was not queued")
        s.close()
        hold.close()
    else:
        fail("unknown mode " + mode)
    t0 = time.time()
    wait_idle(url, 10)
    print("left during %s: no session after %.2f s; cancelled total %g" %
          (mode, time.time() - t0, get_metric(url, "latentd_cancelled_sequences_total")))


def send_raw(url, data, read=True, timeout=10):
    u = urllib.parse.urlparse(url)
    s = socket.create_connection((u.hostname, u.port), timeout=timeout)
    try:
        s.sendall(data)
    except OSError:
        pass
    out = b""
    if read:
        try:
            while True:
                b = s.recv(65536)
                if not b:
                    break
                out += b
                if b"\r\n\r\n" in out and (b"Content-Length: 0" in out or out.rstrip().endswith(b"}")):
                    break
        except (socket.timeout, ConnectionResetError):
            pass
    s.close()
    return out


def status_of(resp):
    try:
        return int(resp.split(b" ", 2)[1])
    except (IndexError, ValueError):
        return 0


def cmd_malformed(url):
    """Bad HTTP and bad JSON get answers (or a closed connection), and the server still serves."""
    def post_raw(body, ctype=b"application/json", extra=b""):
        return b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: " + ctype + b"\r\nContent-Length: %d\r\n" % len(body) + \
            extra + b"\r\n" + body
    cases = [
        ("invalid UTF-8 in a string", post_raw(b'{"prompt": "\xff\xfe bad", "max_tokens": 2}'), 400),
        ("huge integer", post_raw(b'{"prompt": "x", "max_tokens": 123456789012345678901234567890}'), 400),
        ("huge real", post_raw(b'{"prompt": "x", "temperature": 1e999}'), 400),
        ("max_tokens 1e300", post_raw(b'{"prompt": "x", "max_tokens": 1e300}'), 400),
        ("deeply nested arrays", post_raw(b'{"prompt": ' + b"[" * 100000 + b"]" * 100000 + b"}"), 400),
        ("deeply nested objects", post_raw(b'{"a":' * 50000 + b"1" + b"}" * 50000), 400),
        ("not JSON", post_raw(b"hello there"), 400),
        ("JSON array body", post_raw(b"[1, 2, 3]"), 400),
        ("empty body", post_raw(b""), 400),
        ("NUL bytes", post_raw(b'{"prompt": "a\x00b"}'), 400),
        ("trailing garbage", post_raw(b'{"prompt": "x", "max_tokens": 1} trailing'), 400),
        ("garbage request line", b"GARBAGE\r\n\r\n", None),
        ("HTTP/9.9", b"GET /health HTTP/9.9\r\nHost: x\r\n\r\n", None),
        ("huge header", b"GET /health HTTP/1.1\r\nHost: x\r\nX-Big: " + b"a" * 200000 + b"\r\n\r\n", None),
        ("bad chunked body", b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\nab\r\n0\r\n\r\n", None),
    ]
    for name, data, want in cases:
        resp = send_raw(url, data)
        st = status_of(resp)
        if want is not None and st != want:
            fail("%s: status %d, want %d: %r" % (name, st, want, resp[:300]))
        if want == 400:
            body = resp.split(b"\r\n\r\n", 1)[1]
            err = json.loads(body)["error"]
            if not err["message"] or err["type"] != "invalid_request_error":
                fail("%s: error body %r" % (name, body[:200]))
        if request(url, "GET", "/health")[0] != 200:
            fail("server stopped serving after: %s" % name)
    # Truncated bodies: the client promises more than it sends, then leaves (or stalls, then leaves).
    for name, data in [("truncated body, then close", post_raw(b'{"prompt": "x"}')[:-5]),
                       ("headers only, then close", post_raw(b'{"prompt": "x"}').split(b"\r\n\r\n")[0] + b"\r\n\r\n"),
                       ("half a request line", b"POST /v1/comp")]:
        send_raw(url, data, read=False)
        if request(url, "GET", "/health")[0] != 200:
            fail("server stopped serving after: %s" % name)
    # Many half-open connections at once, then a normal request.
    socks = []
    u = urllib.parse.urlparse(url)
    for i in range(50):
        s = socket.create_connection((u.hostname, u.port), timeout=5)
        s.sendall(post_raw(b'{"prompt": "x", "max_tokens": 2}')[:40 + i])
        socks.append(s)
    if completion(url, "still fine", max_tokens=3) is None:
        fail("no completion with half-open connections around")
    for s in socks:
        s.close()
    if request(url, "GET", "/health")[0] != 200:
        fail("server stopped serving after half-open connections")
    wait_idle(url)
    print("%d malformed inputs answered; the server still serves" % (len(cases) + 4))


def cmd_errors(url):
    """400s that name the offending field, for wrong types and values."""
    C, H = "/v1/completions", "/v1/chat/completions"
    msg = [{"role": "user", "content": "hi"}]
    cases = [
        (C, {"prompt": "x", "temperature": "hot"}, "temperature"),
        (C, {"prompt": "x", "temperature": 3}, "temperature"),
        (C, {"prompt": "x", "top_p": 1.5}, "top_p"),
        (C, {"prompt": "x", "top_k": "5"}, "top_k"),
        (C, {"prompt": "x", "min_p": -0.1}, "min_p"),
        (C, {"prompt": "x", "presence_penalty": 9}, "presence_penalty"),
        (C, {"prompt": "x", "frequency_penalty": []}, "frequency_penalty"),
        (C, {"prompt": "x", "repetition_penalty": 0}, "repetition_penalty"),
        (C, {"prompt": "x", "n": 0}, "n"),
        (C, {"prompt": "x", "n": 1.5}, "n"),
        (C, {"prompt": "x", "max_tokens": -1}, "max_tokens"),
        (C, {"prompt": "x", "max_tokens": "10"}, "max_tokens"),
        (C, {"prompt": "x", "max_tokens": 100000000}, "max_tokens"),
        (C, {"prompt": "x", "seed": "abc"}, "seed"),
        (C, {"prompt": "x", "stop": 5}, "stop"),
        (C, {"prompt": "x", "stop": ["a", 1]}, "stop"),
        (C, {"prompt": "x", "stop": ["s%d" % i for i in range(40)]}, "stop"),
        (C, {"prompt": "x", "logprobs": 50}, "logprobs"),
        (C, {"prompt": "x", "logprobs": True}, "logprobs"),
        (C, {"prompt": "x", "echo": "yes"}, "echo"),
        (C, {"prompt": "x", "stream": 1}, "stream"),
        (C, {"prompt": "x", "stream_options": "usage"}, "stream_options"),
        (C, {"prompt": "x", "stream_options": {"include_usage": "yes"}}, "stream_options.include_usage"),
        (C, {"prompt": "x", "logit_bias": {"abc": 1}}, "logit_bias"),
        (C, {"prompt": "x", "logit_bias": {"5": 500}}, "logit_bias"),
        (C, {"prompt": "x", "logit_bias": [1, 2]}, "logit_bias"),
        (C, {"prompt": "x", "user": 7}, "user"),
        (C, {"prompt": "x", "model": 7}, "model"),
        (C, {}, "prompt"),
        (C, {"prompt": []}, "prompt"),
        (C, {"prompt": 5}, "prompt"),
        (C, {"prompt": ["a", 5]}, "prompt"),
        (C, {"prompt": [1, "a"]}, "prompt"),
        (C, {"prompt": [1, 2, 99999999]}, "prompt"),
        (C, {"prompt": [[1, 2], [-1]]}, "prompt"),
        (C, {"prompt": "x " * 5000, "max_tokens": 10}, "prompt"),
        (C, {"prompt": "x", "max_tokens": 2048}, "max_tokens"),
        (H, {}, "messages"),
        (H, {"messages": []}, "messages"),
        (H, {"messages": "hi"}, "messages"),
        (H, {"messages": [{"role": "wizard", "content": "hi"}]}, "messages[0].role"),
        (H, {"messages": [{"content": "hi"}]}, "messages[0].role"),
        (H, {"messages": [{"role": "user", "content": 5}]}, "messages[0].content"),
        (H, {"messages": [{"role": "user", "content": [{"type": "image_url", "image_url": {"url": "x"}}]}]},
         "messages[0].content"),
        (H, {"messages": msg, "top_logprobs": 3}, "top_logprobs"),
        (H, {"messages": msg, "logprobs": 1}, "logprobs"),
        (H, {"messages": msg, "max_completion_tokens": -5}, "max_completion_tokens"),
        (H, {"messages": msg, "n": 1000}, "n"),
    ]
    for path, body, param in cases:
        st, hd, raw = post(url, path, body)
        try:
            err = json.loads(raw)["error"]
        except (ValueError, KeyError):
            fail("%s %s: not an error body: %r" % (path, body, raw[:200]))
        if st != 400 or err.get("param") != param or not err.get("message") or err.get("type") != "invalid_request_error" \
                or "code" not in err:
            fail("%s %s: want 400 naming %s, got %d %r" % (path, json.dumps(body)[:80], param, st, raw[:300]))
    # unknown fields are ignored
    st, _, raw = post(url, C, {"prompt": "x", "max_tokens": 2, "frobnicate": {"deep": [1, 2]}, "suffix": None})
    if st != 200:
        fail("unknown fields: %d %r" % (st, raw[:200]))
    print("%d invalid bodies answered 400 naming the field; unknown fields ignored" % len(cases))


def cmd_prefix(url_cached, url_cold):
    """A prompt that shares a long prefix with an earlier one reuses its pages (and the
    recurrent state at the last shared page boundary) and gives the cold-start tokens."""
    base = "Once upon a time in a land far away there lived a small robot who loved to count the stars every night " * 2
    before = get_metric(url_cached, "latentd_prefix_reused_tokens_total")
    a1 = completion(url_cached, base + "and then", max_tokens=24, ignore_eos=True)
    mid = get_metric(url_cached, "latentd_prefix_reused_tokens_total")
    texts = []
    for tail in ["but one day", "until the morning when", "and then"]:
        warm = completion(url_cached, base + tail, max_tokens=24, ignore_eos=True)
        cold = completion(url_cold, base + tail, max_tokens=24, ignore_eos=True)
        if warm != cold:
            fail("prefix reuse changed the output for %r: warm %r cold %r" % (tail, warm, cold))
        texts.append(warm)
    if texts[2] != a1:
        fail("the same prompt again differs: %r vs %r" % (texts[2], a1))
    # a chat continuation: the previous turn (prompt + answer) is a prefix of the next prompt
    after = get_metric(url_cached, "latentd_prefix_reused_tokens_total")
    if after - mid < 32:
        fail("no prefix reuse measured (reused tokens %g -> %g -> %g)" % (before, mid, after))
    if get_metric(url_cold, "latentd_prefix_reused_tokens_total") != 0:
        fail("the cold server reused a prefix")
    print("prefix reuse: %g prompt tokens reused, outputs equal to a cold start" % (after - mid))


def cmd_drain(url, pid, grace_case="finish", n_tok="3000"):
    """SIGTERM: running requests finish (or end at the grace period), a kept-alive connection
    gets 503 for new work and from /health, the listener closes, the process exits 0."""
    pid = int(pid)
    keep = conn(url)
    if request(url, "GET", "/health", c=keep)[0] != 200:
        fail("health before drain")
    n_tok = int(n_tok)
    result = {}
    started = threading.Event()

    def long_stream():
        c = conn(url)
        c.request("POST", "/v1/completions", json.dumps({"prompt": "drain me", "max_tokens": n_tok, "ignore_eos": True,
                                                         "stream": True}), {"Content-Type": "application/json"})
        r = c.getresponse()
        raw = r.read1(65536)
        started.set()
        raw += r.read()
        result["status"], result["raw"] = r.status, raw
    t = threading.Thread(target=long_stream)
    t.start()
    if not started.wait(30):
        fail("the long request did not start streaming")
    os.kill(pid, signal.SIGTERM)
    for _ in range(200):  # until the loop has taken the signal
        st, hd, raw = request(url, "GET", "/health", c=keep)
        if st != 200:
            break
        time.sleep(0.01)
    if st != 503 or "error" not in json.loads(raw):
        fail("health while draining: %d %r" % (st, raw[:200]))
    st, hd, raw = post(url, "/v1/completions", {"prompt": "new work", "max_tokens": 2}, c=keep)
    if st != 503 or "retry-after" not in hd:
        fail("new work while draining: %d %r" % (st, raw[:200]))
    try:
        request(url, "GET", "/health", timeout=2)
        fail("a new connection was accepted while draining")
    except OSError:
        pass
    keep.close()
    t.join()
    evs, _ = events(result["raw"])
    if grace_case == "finish":
        last = [e for e in evs if e != "[DONE]"][-1]
        if result["status"] != 200 or evs[-1] != "[DONE]" or last["choices"][0]["finish_reason"] != "length":
            fail("the running request did not finish: %r" % result["raw"][-300:])
    else:
        errs = [e for e in evs if e != "[DONE]" and "error" in e]
        if not errs or evs[-1] != "[DONE]":
            fail("the request cut at the grace period has no error event: %r" % result["raw"][-300:])
    print("drain: running request %s, 503 for new work, listener closed" %
          ("finished" if grace_case == "finish" else "ended with an error event at the grace period"))


def cmd_events_per_token(url, clients="8", chat="0"):
    """Concurrent streams with logprobs: every generated token arrives in an
    event of its own carrying exactly its logprob entry (text held back for
    UTF-8 or a stop string goes with the token that releases it)."""
    clients, chat = int(clients), chat == "1"
    errors, counts = [], []

    def run(i):
        try:
            body = {"stream": True, "max_tokens": 24, "temperature": 0.8, "seed": i,
                    "stream_options": {"include_usage": True}}
            if chat:
                body.update(messages=[{"role": "user", "content": "word %d" % i}], logprobs=True, top_logprobs=1)
            else:
                body.update(prompt="word %d" % i, logprobs=1)
            st, _, raw = post(url, "/v1/chat/completions" if chat else "/v1/completions", body, timeout=120)
            if st != 200:
                errors.append("status %d" % st)
                return
            evs, _ = events(raw)
            usage = [e["usage"] for e in evs if e != "[DONE]" and e.get("usage")]
            token_events, finish = 0, None
            for e in evs:
                if e == "[DONE]" or not e.get("choices"):
                    continue
                c = e["choices"][0]
                finish = c.get("finish_reason") or finish
                lp = c.get("logprobs")
                n_lp = len((lp or {}).get("content" if chat else "tokens") or [])
                if n_lp > 1:
                    errors.append("an event carries %d tokens' logprobs" % n_lp)
                token_events += n_lp
            # the end-of-sequence token counts in usage but has no text or event
            eos = 1 if finish == "stop" else 0
            if not usage or token_events != usage[0]["completion_tokens"] - eos:
                errors.append("%d token events for %s tokens" % (token_events, usage and usage[0]["completion_tokens"]))
            counts.append(token_events)
        except Exception as e:  # noqa: BLE001
            errors.append(repr(e))

    ts = [threading.Thread(target=run, args=(i,)) for i in range(clients)]
    for t in ts:
        t.start()
    for t in ts:
        t.join()
    if errors:
        fail("; ".join(errors[:5]))
    print("%d %s streams: %d tokens, one event each" % (clients, "chat" if chat else "completion", sum(counts)))


def cmd_backpressure(url, n="8", max_tokens="1900"):
    """A stream whose client stops reading: its decoding pauses (bounded
    buffers, latentd_stream_pauses_total grows, the sampled-token count stops
    well short of the total), then, once the client reads, it finishes whole."""
    n, max_tokens = int(n), int(max_tokens)
    u = urllib.parse.urlparse(url)
    s = socket.socket()
    s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
    s.connect((u.hostname, u.port))
    body = json.dumps({"prompt": "a", "n": n, "max_tokens": max_tokens, "ignore_eos": True, "stream": True,
                       "logprobs": 5, "temperature": 1.0, "seed": 3}).encode()
    s.sendall(b"POST /v1/completions HTTP/1.1\r\nHost: t\r\nContent-Type: application/json\r\n"
              b"Content-Length: %d\r\n\r\n" % len(body) + body)
    sampled0 = get_metric(url, "latentd_sampled_tokens_total") or 0
    time.sleep(3)  # not reading
    sampled = (get_metric(url, "latentd_sampled_tokens_total") or 0) - sampled0
    pauses = get_metric(url, "latentd_stream_pauses_total") or 0
    if pauses < 1:
        fail("no pause while the client did not read (%d tokens sampled)" % sampled)
    if sampled >= n * max_tokens * 0.9:
        fail("%d of %d tokens sampled while the client did not read" % (sampled, n * max_tokens))
    s.settimeout(120)
    data = b""
    while not data.endswith(b"0\r\n\r\n"):
        chunk = s.recv(1 << 20)
        if not chunk:
            break
        data += chunk
    s.close()
    finished = data.count(b'"finish_reason":"length"')
    if finished != n:
        fail("after reading, %d of %d choices finished" % (finished, n))
    print("paused %d time(s) with %d of %d tokens sampled; all %d choices finished once read" % (
        pauses, sampled, n * max_tokens, n))


# The constrained request of `determinism ... structured`: bounded fields, so
# a document usually ends inside its 160 tokens (a cut one compares as well).
DETERMINISM_SCHEMA = {
    "type": "object",
    "properties": {"name": {"type": "string", "maxLength": 12},
                   "tags": {"type": "array", "items": {"enum": ["red", "green", "blue", 7, None]}, "minItems": 1, "maxItems": 4},
                   "size": {"type": ["integer", "null"]},
                   "next": {"anyOf": [{"type": "null"}, {"$ref": "#"}]}},
    "required": ["name", "tags", "next"], "additionalProperties": False}


def cmd_determinism(url, others="32", structured="0"):
    """A greedy completion with logprobs, and a seeded sampled one, give the
    same text and the same logprob bits sent alone and while `others`
    streams of random lengths run (docs/api.md, "Determinism").
    structured=1: also a json_schema request (seeded, temperature 1,
    logprobs 5), and half the streams of the load are constrained (random
    schemas of tests/server/structured.py, json_object every fourth), so
    constrained and free sequences share the steps it runs in."""
    import random
    rnd = random.Random(11)
    structured = structured == "1"
    prompt = "Determinism: the same request gives the same bits, " * 6
    asks = [dict(max_tokens=64, temperature=0, logprobs=5, ignore_eos=True),
            dict(max_tokens=64, temperature=1, seed=1234, logprobs=5, ignore_eos=True)]
    names = ["greedy", "seeded temperature 1"]
    schemas = []
    if structured:
        sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
        import structured as st_gen
        schemas = st_gen.rand_schemas(7, int(others))
        asks.append(dict(max_tokens=160, temperature=1, seed=4321, logprobs=5, response_format={
            "type": "json_schema", "json_schema": {"name": "det", "schema": DETERMINISM_SCHEMA, "strict": True}}))
        names.append("json_schema, seeded temperature 1")

    def ask(fields):
        body = {"prompt": prompt}
        body.update(fields)
        st, _, raw = post(url, "/v1/completions", body)
        if st != 200:
            raise SystemExit("HTTP %d: %s" % (st, raw[:300]))
        resp = json.loads(raw)
        fps.append(resp["system_fingerprint"])
        ch = resp["choices"][0]
        return ch["text"], ch["logprobs"], ch["finish_reason"]

    fps = []
    alone = [ask(a) for a in asks]
    stop = threading.Event()
    errors = []
    inflight = {"constrained": 0, "free": 0}
    lock = threading.Lock()

    def load(i):
        p = "Load %d: %s" % (i, "words " * rnd.randint(1, 120))
        n = rnd.randint(40, 400)
        kind, extra = "free", {}
        if structured and i % 2 == 0:
            kind = "constrained"
            extra["response_format"] = ({"type": "json_object"} if i % 4 == 2 else
                                        {"type": "json_schema", "json_schema": {"name": "l%d" % i, "schema": schemas[i]}})
        try:
            while not stop.is_set():
                with lock:
                    inflight[kind] += 1
                try:
                    completion(url, p, stream=True, max_tokens=n, ignore_eos=True, temperature=0.7, **extra)
                finally:
                    with lock:
                        inflight[kind] -= 1
        except BaseException as e:  # noqa
            errors.append(str(e))
    ts = [threading.Thread(target=load, args=(i,)) for i in range(int(others))]
    for t in ts:
        t.start()
    end = time.time() + 20
    while get_metric(url, "latentd_running_sessions") < int(others) // 2 and time.time() < end:
        time.sleep(0.02)
    busy = get_metric(url, "latentd_running_sessions")
    with lock:
        mix = dict(inflight)
    loaded = [None] * len(asks)

    def run(k):
        loaded[k] = ask(asks[k])
    rs = [threading.Thread(target=run, args=(k,)) for k in range(len(asks))]
    for t in rs:
        t.start()
    for t in rs:
        t.join()
    with lock:
        mix_end = dict(inflight)
    stop.set()
    for t in ts:
        t.join()
    if errors:
        fail("load errors: %s" % errors[:3])
    if structured and min(mix["constrained"], mix["free"], mix_end["constrained"], mix_end["free"]) < int(others) // 4:
        fail("the load should mix constrained and free streams: %r when sent, %r when done" % (mix, mix_end))
    for k, what in enumerate(names):
        (ta, la, fa), (tb, lb, fb) = alone[k], loaded[k]
        if ta != tb or fa != fb:
            fail("%s: text differs under load: alone %r (%s), loaded %r (%s)" % (what, ta, fa, tb, fb))
        for i, (x, y) in enumerate(zip(la["token_logprobs"], lb["token_logprobs"])):
            if x != y or la["top_logprobs"][i] != lb["top_logprobs"][i]:
                fail("%s: token %d (%r) logprob %r alone, %r under load; top %r vs %r" %
                     (what, i, la["tokens"][i], x, y, la["top_logprobs"][i], lb["top_logprobs"][i]))
        if la["tokens"] != lb["tokens"] or len(la["token_logprobs"]) != len(lb["token_logprobs"]):
            fail("%s: tokens differ" % what)
        if "response_format" not in asks[k] and len(la["token_logprobs"]) != 64:
            fail("%s: %d tokens, not 64" % (what, len(la["token_logprobs"])))
    if structured:
        ta, la, fa = alone[-1]
        if len(la["tokens"]) < 16:
            fail("json_schema: a document of %d tokens is too short to tell: %r" % (len(la["tokens"]), ta))
    if len(set(fps)) != 1 or not str(fps[0]).startswith("fp_"):
        fail("system_fingerprint should be one fp_ value for every response: %r" % sorted(set(map(str, fps))))
    wait_idle(url)
    if structured:
        ta, la, fa = alone[-1]
        print("greedy, seeded and json_schema (%d tokens, %s) completions and their top-5 logprobs identical alone and "
              "beside %d streams (%d running when sent; constrained/free streams %d/%d when sent, %d/%d when done; %s)" %
              (len(la["tokens"]), fa, int(others), busy, mix["constrained"], mix["free"],
               mix_end["constrained"], mix_end["free"], fps[0]))
        return
    print("64 tokens and their top-5 logprobs identical alone and beside %d streams (%d running when sent; %s)" %
          (int(others), busy, fps[0]))


def cmd_wait_idle(url):
    wait_idle(url)
    print("no session alive")


def cmd_sdnotify(sock_path, seconds):
    s = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    s.bind(sock_path)
    s.settimeout(0.2)
    end, msgs = time.time() + float(seconds), []
    while time.time() < end:
        try:
            msgs.append(s.recv(4096).decode())
        except socket.timeout:
            pass
        if any("READY=1" in m for m in msgs) and sum("WATCHDOG=1" in m for m in msgs) >= 2:
            break
    print(" | ".join(m.replace("\n", ";") for m in msgs))


if __name__ == "__main__":
    cmd = sys.argv[1].replace("-", "_")
    globals()["cmd_" + cmd](*sys.argv[2:])
