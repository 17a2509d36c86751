#!/usr/bin/env python3
"""Hostile-client probes against a running `kvserve serve` (loopback only, bounded loops).

Prints one line per probe: PASS/FAIL, the probe's name, what was measured. Exit status 1 when
any probe failed. Standard library only. Used by bench/abuse_serve.sh (which starts the server).

  abuse_probe.py --url http://127.0.0.1:PORT --pid PID [--api-key K] [--short]
"""
import argparse
import asyncio
import json
import os
import select
import socket
import statistics
import sys
import threading
import time
import urllib.parse

RESULTS = []


def report(ok, name, detail):
    RESULTS.append(ok)
    print(f"{'PASS' if ok else 'FAIL'} {name}: {detail}", flush=True)


def rss_bytes(pid):
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024
    return 0


class RssSampler:
    """The largest RSS of the server seen while a probe runs (sampled every 5 ms)."""

    def __init__(self, pid):
        self.pid, self.peak, self.stop = pid, 0, threading.Event()
        self.base = rss_bytes(pid)
        self.thread = threading.Thread(target=self.run, daemon=True)
        self.thread.start()

    def run(self):
        while not self.stop.is_set():
            self.peak = max(self.peak, rss_bytes(self.pid))
            time.sleep(0.005)

    def growth(self):
        self.stop.set()
        self.thread.join()
        return max(0, self.peak - self.base)


class Conn:
    """A blocking HTTP/1.1 client connection that reads Content-Length responses."""

    def __init__(self, host, port, timeout=30.0):
        self.sock = socket.create_connection((host, port), timeout=timeout)
        self.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self.buf = b""

    def send(self, data):
        self.sock.sendall(data)

    def read_response(self):
        """(status, headers dict, body) of the next response; None when the peer closed."""
        while b"\r\n\r\n" not in self.buf:
            chunk = self.sock.recv(65536)
            if not chunk:
                return None
            self.buf += chunk
        head, _, rest = self.buf.partition(b"\r\n\r\n")
        lines = head.decode("latin-1").split("\r\n")
        status = int(lines[0].split()[1])
        headers = {}
        for line in lines[1:]:
            k, _, v = line.partition(":")
            headers[k.strip().lower()] = v.strip()
        length = int(headers.get("content-length", "0"))
        while len(rest) < length:
            chunk = self.sock.recv(65536)
            if not chunk:
                return None
            rest += chunk
        self.buf = rest[length:]
        return status, headers, rest[:length]

    def closed_within(self, seconds):
        self.sock.settimeout(seconds)
        try:
            while True:
                chunk = self.sock.recv(65536)
                if not chunk:
                    return True
        except (socket.timeout, TimeoutError):
            return False
        except OSError:
            return True

    def close(self):
        self.sock.close()


class Target:
    def __init__(self, url, api_key):
        u = urllib.parse.urlparse(url)
        self.host, self.port = u.hostname, u.port
        self.api_key = api_key

    def request(self, method, path, body=None, extra=""):
        data = b"" if body is None else (body if isinstance(body, bytes) else json.dumps(body).encode())
        auth = f"Authorization: Bearer {self.api_key}\r\n" if self.api_key else ""
        ctype = "Content-Type: application/json\r\n" if body is not None else ""
        head = (f"{method} {path} HTTP/1.1\r\nHost: {self.host}\r\n{auth}{ctype}{extra}"
                f"Content-Length: {len(data)}\r\n\r\n")
        return head.encode() + data

    def conn(self, timeout=10.0):
        return Conn(self.host, self.port, timeout)

    def once(self, method, path, body=None, extra=""):
        c = self.conn()
        try:
            c.send(self.request(method, path, body, extra))
            return c.read_response()
        finally:
            c.close()


def percentile(values, p):
    """Linear interpolation between closest ranks (NumPy's default), the definition of
    src/base/percentile.h that every figure in docs/benchmarks.md uses."""
    s = sorted(values)
    if not s:
        return float("nan")
    rank = p / 100.0 * (len(s) - 1)
    lo = int(rank)
    hi = min(lo + 1, len(s) - 1)
    if s[hi] == float("inf"):
        return s[hi] if rank > lo else s[lo]
    return s[lo] + (s[hi] - s[lo]) * (rank - lo)


def timed_ms(fn):
    """Milliseconds `fn` took to get a 200; infinity for an error or a timeout."""
    s = time.perf_counter()
    try:
        r = fn()
    except OSError:
        return float("inf")
    return (time.perf_counter() - s) * 1000 if r and r[0] == 200 else float("inf")


def completion(prompt_tokens=4, salt=0):
    return {"prompt": [1 + (salt + i) % 200 for i in range(prompt_tokens)], "max_tokens": 1,
            "temperature": 0}


# --- slow connections -------------------------------------------------------------------

async def hold(t, kind, stop, counters):
    """One slow client: sends part of a request and keeps the socket open; when the server
    closes it (its deadline), opens another, until `stop`."""
    partial = {
        "header": f"POST /v1/completions HTTP/1.1\r\nHost: {t.host}\r\nContent-Type: app",
        "body": (f"POST /v1/completions HTTP/1.1\r\nHost: {t.host}\r\nContent-Type: "
                 f"application/json\r\nContent-Length: 100000\r\n\r\n{{\"prompt\": \"abc"),
    }[kind].encode()
    while not stop.is_set():
        try:
            reader, writer = await asyncio.open_connection(t.host, t.port)
        except OSError:
            counters["connect_errors"] += 1
            await asyncio.sleep(0.1)
            continue
        counters[kind] += 1
        counters["open_" + kind] += 1
        try:
            writer.write(partial)
            await writer.drain()
            stop_wait = asyncio.ensure_future(stop.wait())
            read = asyncio.ensure_future(reader.read(65536))
            while True:
                done, _ = await asyncio.wait({stop_wait, read}, return_when=asyncio.FIRST_COMPLETED)
                if stop_wait in done:
                    read.cancel()
                    break
                data = read.result()
                if not data:
                    counters["closed_by_server"] += 1
                    stop_wait.cancel()
                    break
                read = asyncio.ensure_future(reader.read(65536))
        except OSError:
            pass
        finally:
            counters["open_" + kind] -= 1
            writer.close()


def probe_slow_connections(t, pid, num_header, num_body, samples, min_seconds):
    counters = {"header": 0, "body": 0, "open_header": 0, "open_body": 0, "connect_errors": 0,
                "closed_by_server": 0}
    result = {"rss_before": rss_bytes(pid)}

    async def main():
        stop = asyncio.Event()
        tasks = []
        for i in range(num_header + num_body):
            tasks.append(asyncio.ensure_future(hold(t, "header" if i < num_header else "body", stop, counters)))
            if i % 200 == 199:
                await asyncio.sleep(0.05)
        deadline = time.monotonic() + 60
        while (counters["open_header"] < num_header or counters["open_body"] < num_body) and \
                time.monotonic() < deadline:
            await asyncio.sleep(0.1)
        result["held_header"], result["held_body"] = counters["open_header"], counters["open_body"]
        await asyncio.sleep(0.5)
        result["rss_held"] = rss_bytes(pid)
        # Measure on a thread with blocking sockets while this loop keeps the slow ones open.
        health, comp = [], []

        def measure():
            # At least `samples` of each, over at least min_seconds: long enough for the
            # server's header deadline to close (and the clients to reopen) the slow ones.
            end = time.monotonic() + min_seconds
            i = 0
            while i < samples or time.monotonic() < end:
                i += 1
                health.append(timed_ms(lambda: t.once("GET", "/health")))
                comp.append(timed_ms(lambda: t.once("POST", "/v1/completions", completion(salt=i))))
                time.sleep(0.02)

        await asyncio.get_running_loop().run_in_executor(None, measure)
        result["min_held_header"], result["min_held_body"] = counters["open_header"], counters["open_body"]
        stop.set()
        await asyncio.gather(*tasks, return_exceptions=True)
        result["health"], result["comp"] = health, comp

    asyncio.run(main())
    h99, c99 = percentile(result["health"], 99), percentile(result["comp"], 99)
    ok = (result["held_header"] >= num_header and result["held_body"] >= num_body and
          h99 < 200 and c99 < 200)
    report(ok, "slow-connections",
           f"{result['held_header']} header-phase + {result['held_body']} body-phase connections held "
           f"({counters['header'] + counters['body']} opened, {counters['closed_by_server']} closed by "
           f"the server's deadlines, {counters['connect_errors']} connect errors; server RSS "
           f"{(result['rss_held'] - result['rss_before']) / 2**20:+.1f} MB while held); /health p50 "
           f"{percentile(result['health'], 50):.1f} ms p99 {h99:.1f} ms; 1-token completion p50 "
           f"{percentile(result['comp'], 50):.1f} ms p99 {c99:.1f} ms (limit 200 ms, {len(result['health'])} "
           f"each)")


# --- keep-alive, pipelining ---------------------------------------------------------------

def probe_keep_alive(t, n):
    fresh, reused = [], []
    c = t.conn()
    for i in range(n):  # alternate, so both see the same machine
        s = time.perf_counter()
        r = t.once("POST", "/v1/completions", completion(salt=i))
        fresh.append((time.perf_counter() - s) * 1000)
        assert r and r[0] == 200, r
        s = time.perf_counter()
        c.send(t.request("POST", "/v1/completions", completion(salt=i)))
        r = c.read_response()
        reused.append((time.perf_counter() - s) * 1000)
        assert r and r[0] == 200, r
    c.close()
    mf, mr = statistics.median(fresh), statistics.median(reused)
    report(mr <= mf + 2.0, "keep-alive",
           f"median of {n} one-token completions: {mr:.2f} ms on one connection, {mf:.2f} ms on "
           f"fresh connections (limit: within 2 ms)")


def probe_pipelining(t, n):
    c = t.conn(timeout=10)
    c.send(b"".join(t.request("POST", "/v1/completions", completion(prompt_tokens=2 + i))
                    for i in range(n)))
    got = []
    try:
        for _ in range(n):
            r = c.read_response()
            if r is None:
                break
            got.append(json.loads(r[2])["usage"]["prompt_tokens"] if r[0] == 200 else -r[0])
    except (socket.timeout, TimeoutError):
        pass
    c.close()
    want = [2 + i for i in range(n)]
    report(got == want, "pipelining",
           f"{len(got)} of {n} pipelined requests answered, in order: {got == want} "
           f"(prompt_tokens {got})")


# --- bodies that must not be held in memory ---------------------------------------------

def probe_chunked_body(t, pid, total_bytes):
    sampler = RssSampler(pid)
    c = t.conn(timeout=30)
    auth = f"Authorization: Bearer {t.api_key}\r\n" if t.api_key else ""
    c.send(f"POST /v1/completions HTTP/1.1\r\nHost: {t.host}\r\n{auth}Content-Type: "
           f"application/json\r\nTransfer-Encoding: chunked\r\n\r\n".encode())
    chunk = b"%x\r\n" % (1 << 20) + b" " * (1 << 20) + b"\r\n"
    sent, status, start = 0, None, time.perf_counter()
    try:
        while sent < total_bytes:
            readable, _, _ = select.select([c.sock], [], [], 0)
            if readable:  # answered already
                break
            c.sock.sendall(chunk)
            sent += 1 << 20
    except OSError:
        pass
    c.sock.setblocking(True)
    c.sock.settimeout(10)
    try:
        r = c.read_response()
        status = r[0] if r else None
    except OSError:
        pass
    elapsed = time.perf_counter() - start
    c.close()
    growth = sampler.growth()
    report(status == 413 and growth < 64 << 20, "chunked-body",
           f"a {total_bytes >> 20} MB chunked body: HTTP {status} after {sent >> 20} MB sent "
           f"({elapsed:.2f} s); server RSS grew {growth / 2**20:.1f} MB (limit 64 MB)")


def probe_deep_json(t, pid, depth):
    sampler = RssSampler(pid)
    body = b'{"prompt": "x", "junk": ' + b"[" * depth + b"]" * depth + b"}"
    start = time.perf_counter()
    r = t.once("POST", "/v1/completions", body)
    elapsed = time.perf_counter() - start
    growth = sampler.growth()
    status = r[0] if r else None
    report(status == 400 and growth < 64 << 20, "deep-json",
           f"{depth:,} nested arrays ({len(body) >> 20} MB): HTTP {status} in {elapsed:.2f} s; server "
           f"RSS grew {growth / 2**20:.1f} MB (limit 64 MB)")


# --- framing ------------------------------------------------------------------------------

def probe_bad_framing(t):
    cases = {
        "Content-Length: -1": "Content-Length: -1\r\n\r\n",
        "Content-Length: 10^23": "Content-Length: 100000000000000000000000\r\n\r\n",
        "Content-Length: 10^12 + 1 byte": "Content-Length: 1000000000000\r\n\r\nx",
        "two conflicting Content-Length": "Content-Length: 5\r\nContent-Length: 50\r\n\r\nhello",
        "Content-Length with chunked": "Content-Length: 5\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n",
        "bad chunk size": "Transfer-Encoding: chunked\r\n\r\nzz\r\n",
        "header of 1 MB": "X-Big: " + "b" * (1 << 20) + "\r\n\r\n",
    }
    for name, tail in cases.items():
        c = t.conn(timeout=5)
        start = time.perf_counter()
        status = None
        try:
            c.send(f"POST /v1/completions HTTP/1.1\r\nHost: {t.host}\r\n{tail}".encode())
            r = c.read_response()
            status = r[0] if r else None
        except OSError:
            pass
        answered = (time.perf_counter() - start) * 1000
        closed = c.closed_within(3.0)
        c.close()
        ok = status in (400, 413, 431) and closed and answered < 1000
        report(ok, "framing", f"{name}: HTTP {status} in {answered:.1f} ms, connection closed: {closed}")


# --- the smaller items --------------------------------------------------------------------

def probe_small_items(t):
    r = t.once("POST", "/v1/completions", {"prompt": "x", "max_tokens": 1, "n": 100000})
    report(r[0] == 400, "n-too-large", f"n = 100000: HTTP {r[0]}")
    if t.api_key:
        c = t.conn()
        c.send(t.request("GET", "/v1/models").replace(b"Bearer", b"bearer"))
        r = c.read_response()
        c.close()
        report(r[0] == 200, "bearer-case", f"'Authorization: bearer KEY': HTTP {r[0]}")
    r = t.once("POST", "/v1/chat/completions",
               {"messages": [{"role": "user", "content": None}], "max_tokens": 1})
    msg = json.loads(r[2]).get("error", {}).get("message", "")
    report(r[0] == 400 and "content" in msg, "null-content", f"HTTP {r[0]}: {msg}")
    big = "hello " * ((28 << 20) // 6)
    start = time.perf_counter()
    r = t.once("POST", "/v1/completions", {"prompt": big, "max_tokens": 1})
    elapsed = time.perf_counter() - start
    # Refused before tokenizing: sending and parsing 28 MB takes 0.4-0.7 s in a Release build
    # and 2-3 s under ASan on a loaded 2-core machine; tokenizing it would take 15-20 s (Release).
    report(r[0] in (400, 413) and elapsed < 6.0, "huge-prompt",
           f"a {len(big) >> 20} MB prompt: HTTP {r[0]} in {elapsed:.2f} s (limit 6 s)")


def probe_connection_cap(t, cap):
    conns, refused = [], 0
    try:
        for _ in range(cap + 20):
            c = t.conn(timeout=5)
            conns.append(c)
        time.sleep(0.2)
        for c in conns[-20:]:
            try:
                c.send(t.request("GET", "/health"))
                r = c.read_response()
            except OSError:  # closed or never answered: not a clear refusal
                r = None
            refused += 1 if r and r[0] == 503 else 0
    finally:
        for c in conns:
            c.close()
    time.sleep(0.3)
    r = t.once("GET", "/health")
    report(refused == 20 and r[0] == 200, "connection-cap",
           f"{cap + 20} connections against --max-connections {cap}: {refused} of the last 20 got "
           f"503; afterwards /health {r[0]}")


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--url", required=True)
    ap.add_argument("--pid", type=int, required=True)
    ap.add_argument("--api-key", default="")
    ap.add_argument("--max-connections", type=int, default=0, help="the server's cap (0: skip)")
    ap.add_argument("--short", action="store_true", help="the CI form: fewer connections, samples")
    ap.add_argument("--slow", default="", help="HEADER,BODY slow connections (default 5000,1000; "
                    "short 500,100)")
    ap.add_argument("--http-only", action="store_true",
                    help="only the HTTP-layer probes (for bench/http_layer_compare.sh's stubs)")
    ap.add_argument("--samples", type=int, default=0, help="timed requests (default 200; short 50)")
    a = ap.parse_args()
    t = Target(a.url, a.api_key)
    header, body = (500, 100) if a.short else (5000, 1000)
    if a.slow:
        header, body = (int(x) for x in a.slow.split(","))
    samples = a.samples or (50 if a.short else 200)
    probe_slow_connections(t, a.pid, header, body, samples, 0 if a.short or a.samples else 15)
    probe_keep_alive(t, 40 if a.short else 200)
    probe_pipelining(t, 10)
    probe_chunked_body(t, a.pid, (60 if a.short else 300) << 20)
    if not a.http_only:
        probe_deep_json(t, a.pid, 15_000_000)
    probe_bad_framing(t)
    if not a.http_only:
        probe_small_items(t)
    if a.max_connections:
        probe_connection_cap(t, a.max_connections)
    failed = RESULTS.count(False)
    print(f"abuse: {len(RESULTS) - failed} of {len(RESULTS)} probes passed", flush=True)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
