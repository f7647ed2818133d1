#!/usr/bin/env python3
"""Bounded load test of `lql serve` on 127.0.0.1 (standard library only).

Starts the server binary (or uses --url/--pid of a running one), measures one streaming
client alone, then CLIENTS concurrent streaming clients × REQUESTS requests each, stopping
new requests after --seconds (default 60) and every socket after --timeout. Reports p50/p95
request latency, time to first token, aggregate decode tokens/s against the single stream's
(measured back to back in the same run, with the load average before and after),
errors (deliberate 429s counted apart), and the server's RSS after warm-up and after the
run; then sends SIGTERM and reports the exit code. Prints one JSON object.

  python3 serve/bench/load.py --bin target/release/lql-serve --model PATH [--parallel 4]
"""

import argparse
import http.client
import json
import os
import signal
import statistics
import subprocess
import sys
import threading
import time

HOST = "127.0.0.1"


def rss_kib(pid):
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    return 0


def stream_request(port, body, timeout):
    """One streaming completion: (status, latency s, ttft s, completion tokens)."""
    t0 = time.monotonic()
    conn = http.client.HTTPConnection(HOST, port, timeout=timeout)
    try:
        conn.request("POST", "/v1/completions", body=json.dumps(body), headers={"Content-Type": "application/json"})
        resp = conn.getresponse()
        if resp.status != 200:
            resp.read()
            return resp.status, time.monotonic() - t0, None, 0
        ttft = None
        tokens = 0
        for raw in resp:
            line = raw.decode("utf-8", "replace").strip()
            if not line.startswith("data: "):
                continue
            data = line[6:]
            if data == "[DONE]":
                break
            chunk = json.loads(data)
            if chunk.get("usage"):
                tokens = chunk["usage"]["completion_tokens"]
            elif ttft is None and chunk["choices"] and chunk["choices"][0].get("text"):
                ttft = time.monotonic() - t0
        return 200, time.monotonic() - t0, ttft, tokens
    except Exception as e:  # a failed request is an error of the run
        return f"exception: {e}", time.monotonic() - t0, None, 0
    finally:
        conn.close()


def pct(xs, p):
    if not xs:
        return None
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(round(p / 100 * (len(xs) - 1))))]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--bin", help="the lql-serve binary to start")
    ap.add_argument("--model")
    ap.add_argument("--url", help="a running server (http://127.0.0.1:PORT)")
    ap.add_argument("--pid", type=int, help="its pid (for RSS)")
    ap.add_argument("--parallel", type=int, default=4)
    ap.add_argument("--threads", type=int, default=0, help="backend threads of the decoder (0: cores)")
    ap.add_argument("--queue", type=int, default=64)
    ap.add_argument("--clients", type=int, default=16)
    ap.add_argument("--requests", type=int, default=20)
    ap.add_argument("--max-tokens", type=int, default=32)
    ap.add_argument("--seconds", type=float, default=60)
    ap.add_argument("--timeout", type=float, default=120)
    ap.add_argument("--single", type=int, default=3, help="requests of the single-stream baseline")
    ap.add_argument("--patches", help="a --patches folder for the server (with --mix)")
    ap.add_argument("--patch", help="a .lqlpatch file name in it (with --mix)")
    ap.add_argument("--mix", action="store_true",
                    help="clients cycle plain, patched (--patch) and JSON-schema-constrained requests")
    a = ap.parse_args()

    proc = None
    if a.url:
        port = int(a.url.rsplit(":", 1)[1].strip("/"))
        assert a.url.startswith(f"http://{HOST}:"), "127.0.0.1 only"
        pid = a.pid
    else:
        cmd = [a.bin, a.model, "--host", HOST, "--port", "0", "--parallel", str(a.parallel),
               "--queue", str(a.queue), "--threads", str(a.threads), "--shutdown-grace", "10"]
        if a.patches:
            cmd += ["--patches", a.patches]
        proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
        url = proc.stdout.readline().strip()
        assert url.startswith(f"http://{HOST}:"), url
        port = int(url.rsplit(":", 1)[1])
        pid = proc.pid

    body = {"prompt": "1, 2, 3, 4, 5,", "max_tokens": a.max_tokens, "temperature": 0,
            "stream": True, "stream_options": {"include_usage": True}}
    out = {"clients": a.clients, "requests_per_client": a.requests, "max_tokens": a.max_tokens,
           "parallel": a.parallel, "deadline_s": a.seconds}
    try:
        # Warm-up: every slot decodes once (its executor, threads and cache grown), then
        # the single-stream baseline.
        warm = [threading.Thread(target=stream_request, args=(port, body, a.timeout)) for _ in range(a.parallel)]
        for t in warm:
            t.start()
        for t in warm:
            t.join()
        out["rss_after_warmup_kib"] = rss_kib(pid) if pid else None
        # The machine may be shared: its load average around the two measurements.
        out["loadavg_before"] = round(os.getloadavg()[0], 2)
        t0 = time.monotonic()
        toks = 0
        for _ in range(a.single):
            st, _, _, n = stream_request(port, body, a.timeout)
            assert st == 200, st
            toks += n
        single_tps = toks / (time.monotonic() - t0)
        out["single_stream_tokens_per_s"] = round(single_tps, 1)

        results = []
        lock = threading.Lock()
        deadline = time.monotonic() + a.seconds

        kinds = [body]
        if a.mix:
            assert a.patch, "--mix needs --patch (and --patches)"
            kinds = [
                body,
                dict(body, patches=[a.patch]),
                dict(body, json_schema={"type": "object", "properties": {
                    "numbers": {"type": "array", "items": {"type": "integer"}, "maxItems": 8}},
                    "required": ["numbers"]}),
            ]
        out["kinds"] = len(kinds)

        def client(i):
            for _ in range(a.requests):
                if time.monotonic() >= deadline:
                    return
                r = stream_request(port, kinds[i % len(kinds)], a.timeout)
                with lock:
                    results.append(r)

        t0 = time.monotonic()
        threads = [threading.Thread(target=client, args=(i,)) for i in range(a.clients)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(a.seconds + a.timeout)
        wall = time.monotonic() - t0
        ok = [r for r in results if r[0] == 200]
        busy = [r for r in results if r[0] == 429]
        errors = [r for r in results if r[0] not in (200, 429)]
        total = sum(r[3] for r in ok)
        lat = [r[1] for r in ok]
        ttft = [r[2] for r in ok if r[2] is not None]
        out.update({
            "completed": len(ok), "rejected_429": len(busy), "errors": len(errors),
            "error_samples": [str(r[0]) for r in errors[:3]],
            "wall_s": round(wall, 2),
            "aggregate_tokens_per_s": round(total / wall, 1),
            "speedup_vs_single": round(total / wall / single_tps, 2),
            "latency_p50_s": pct(lat, 50), "latency_p95_s": pct(lat, 95),
            "ttft_p50_s": pct(ttft, 50), "ttft_p95_s": pct(ttft, 95),
        })
        out["rss_after_kib"] = rss_kib(pid) if pid else None
        out["loadavg_after"] = round(os.getloadavg()[0], 2)
        if out.get("rss_after_warmup_kib"):
            out["rss_ratio"] = round(out["rss_after_kib"] / out["rss_after_warmup_kib"], 3)
    finally:
        if proc:
            proc.send_signal(signal.SIGTERM)
            try:
                out["exit_code"] = proc.wait(timeout=60)
            except subprocess.TimeoutExpired:
                proc.kill()
                out["exit_code"] = "killed after 60 s"
    print(json.dumps(out, indent=1))
    return 0 if out.get("errors", 1) == 0 and out.get("exit_code", 0) == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
