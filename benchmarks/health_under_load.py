"""How fast `/health` answers while `sprig serve` streams to many clients (sprig issue 30, item 7).

A Kubernetes probe's default timeout is 1 s. This starts `sprig serve` (default: SmolLM2-135M-Instruct, bf16,
2 threads), opens N concurrent streaming completions from one process and, from a second process, probes
`/health` every 100 ms on a fresh connection each time (as a kubelet does). It prints the probe latency
distribution (p50 / p99 / max, probes over 1 s) while the streams run, and the output tokens per second.

    python benchmarks/health_under_load.py                       # 1,000 streams x 64 tokens
    python benchmarks/health_under_load.py --streams 200 --max-tokens 32
    python benchmarks/health_under_load.py --url http://127.0.0.1:30000   # a server started elsewhere

A benchmark, not a test: it uses the CPU fully, so run it on an otherwise idle machine.
"""

from __future__ import annotations

import argparse
import asyncio
import http.client
import json
import multiprocessing as mp
import socket
import statistics
import subprocess
import sys
import time
import urllib.parse
from dataclasses import dataclass

PROMPT = "Write a short story about a lighthouse keeper who finds a message in a bottle. Story number {i}:"
PROBE_PERIOD_S = 0.1
PROBE_TIMEOUT_S = 10.0


@dataclass(frozen=True)
class LoadResult:
    """What the streaming clients saw."""

    ok: int
    failed: int
    output_tokens: int
    started: float  # time.time() when the streams were opened
    seconds: float
    first_error: str | None


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def probe_once(host: str, port: int) -> tuple[float, int]:
    """One `/health` GET on a new connection: (seconds, status; 0 when it failed)."""
    start = time.perf_counter()
    conn = http.client.HTTPConnection(host, port, timeout=PROBE_TIMEOUT_S)
    try:
        conn.request("GET", "/health")
        status = conn.getresponse().status
    except OSError:
        status = 0
    finally:
        conn.close()
    return time.perf_counter() - start, status


def prober(host: str, port: int, stop: mp.Event, out: mp.Queue) -> None:
    """Probe every PROBE_PERIOD_S until `stop`; send the (time.time() at the start, seconds, status) list back."""
    samples = []
    next_at = time.perf_counter()
    while not stop.is_set():
        samples.append((time.time(), *probe_once(host, port)))
        next_at += PROBE_PERIOD_S
        time.sleep(max(0.0, next_at - time.perf_counter()))
        next_at = max(next_at, time.perf_counter() - PROBE_PERIOD_S)  # why: a slow probe does not cause a burst
    out.put(samples)


async def one_stream(client, i: int, max_tokens: int) -> int:
    body = {"model": "default", "prompt": PROMPT.format(i=i), "max_tokens": max_tokens, "temperature": 0.8,
            "ignore_eos": True, "stream": True, "stream_options": {"include_usage": True}}
    tokens = 0
    async with client.stream("POST", "/v1/completions", json=body) as r:
        if r.status_code != 200:
            raise RuntimeError(f"HTTP {r.status_code}: {(await r.aread())[:200]!r}")
        async for line in r.aiter_lines():
            if line.startswith("data: {"):
                usage = json.loads(line[6:]).get("usage")
                if usage:
                    tokens = usage["completion_tokens"]
    return tokens


async def run_load(url: str, streams: int, max_tokens: int) -> LoadResult:
    import httpx

    limits = httpx.Limits(max_connections=streams + 8, max_keepalive_connections=streams + 8)
    async with httpx.AsyncClient(base_url=url, limits=limits, timeout=httpx.Timeout(1800.0)) as client:
        started, start = time.time(), time.perf_counter()
        results = await asyncio.gather(*(one_stream(client, i, max_tokens) for i in range(streams)),
                                       return_exceptions=True)
        seconds = time.perf_counter() - start
    errors = [r for r in results if isinstance(r, BaseException)]
    tokens = sum(r for r in results if isinstance(r, int))
    return LoadResult(streams - len(errors), len(errors), tokens, started, seconds,
                      repr(errors[0])[:200] if errors else None)


def loader(url: str, streams: int, max_tokens: int, out: mp.Queue) -> None:
    out.put(asyncio.run(run_load(url, streams, max_tokens)))


def start_server(port: int, streams: int, max_tokens: int, extra: list[str]) -> subprocess.Popen:
    # Room for every stream at once: no stream waits for KV or a batch slot (prompts are ~25 tokens).
    kv_tokens = streams * (max_tokens + 64)
    cmd = [sys.executable, "-m", "sprig.runtime.cli", "serve", "--port", str(port), "--dtype", "bfloat16",
           "--num-threads", "2", "--max-running-requests", str(streams), "--max-total-tokens", str(kv_tokens),
           "--max-queued-requests", str(streams * 2), *extra]
    print("server:", " ".join(cmd[2:]), flush=True)
    return subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=sys.stderr)


def wait_ready(host: str, port: int, server: subprocess.Popen | None, limit_s: float = 600.0) -> None:
    deadline = time.monotonic() + limit_s
    while time.monotonic() < deadline:
        if server is not None and server.poll() is not None:
            raise SystemExit(f"the server exited with status {server.returncode}")
        if probe_once(host, port)[1] == 200:
            return
        time.sleep(0.5)
    raise SystemExit("the server did not become ready")


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def report(samples: list[tuple[float, float, int]], load: LoadResult, streams: int, max_tokens: int) -> None:
    seconds = [s for _, s, _ in samples]
    bad = sum(1 for _, _, status in samples if status != 200)
    print(f"\n{streams} streams x {max_tokens} tokens: {load.ok} ok, {load.failed} failed"
          + (f" (first: {load.first_error})" if load.first_error else ""))
    print("| probes | p50 ms | p99 ms | max ms | > 1 s | not 200 | output tok/s | load s |")
    print("|---|---|---|---|---|---|---|---|")
    print(f"| {len(seconds)} | {1000 * statistics.median(seconds):.1f} | {1000 * percentile(seconds, 0.99):.1f} "
          f"| {1000 * max(seconds):.1f} | {sum(s > 1.0 for s in seconds)} | {bad} "
          f"| {load.output_tokens / load.seconds:.0f} | {load.seconds:.1f} |")
    slowest = sorted(samples, key=lambda s: -s[1])[:5]
    print("slowest probes (ms at seconds after the streams opened):",
          ", ".join(f"{1000 * s:.0f} at {at - load.started:.1f}" for at, s, _ in slowest))


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--streams", type=int, default=1000)
    p.add_argument("--max-tokens", type=int, default=64)
    p.add_argument("--url", default=None, help="probe a running server instead of starting one")
    p.add_argument("--server-arg", action="append", default=[], help="extra `sprig serve` argument (repeat)")
    args = p.parse_args()
    server = None
    if args.url is None:
        port = free_port()
        url = f"http://127.0.0.1:{port}"
        server = start_server(port, args.streams, args.max_tokens, args.server_arg)
    else:
        url = args.url.rstrip("/")
    parsed = urllib.parse.urlsplit(url)
    host, port = parsed.hostname or "127.0.0.1", parsed.port or 80
    try:
        wait_ready(host, port, server)
        print(f"ready at {url} (server pid {server.pid if server else '?'})", flush=True)
        ctx = mp.get_context("spawn")
        stop, probes, loads = ctx.Event(), ctx.Queue(), ctx.Queue()
        probe_proc = ctx.Process(target=prober, args=(host, port, stop, probes))
        load_proc = ctx.Process(target=loader, args=(url, args.streams, args.max_tokens, loads))
        probe_proc.start()
        load_proc.start()
        load = loads.get()
        stop.set()
        samples = probes.get()
        load_proc.join()
        probe_proc.join()
        report(samples, load, args.streams, args.max_tokens)
    finally:
        if server is not None:
            server.terminate()
            try:
                server.wait(timeout=60)
            except subprocess.TimeoutExpired:
                server.kill()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
