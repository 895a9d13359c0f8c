"""Cache-aware routing vs round robin over local `sprig serve` replicas, on a shared-prefix workload.

G groups of requests share a long system prompt each (a few hundred tokens) and differ in a short question; the
requests arrive shuffled. Each replica's KV pool holds only some of the G prefixes, so round robin, which sends
every group to every replica, keeps evicting them, while the cache-aware router keeps each group on one replica.
Prints, per policy: cache hit rate (cached / prompt tokens, from the replicas' own counts), throughput, latency.

    python benchmarks/router_bench.py                    # 2 replicas of the demo model, both policies
    python benchmarks/router_bench.py --replicas 2 --groups 8 --per-group 8 --concurrency 8
"""

from __future__ import annotations

import argparse
import asyncio
import json
import random
import socket
import statistics
import subprocess
import sys
import time
from dataclasses import asdict, dataclass
from pathlib import Path

import httpx

from sprig.runtime.model.checkpoints import DATA_DIR, checkpoint_path
from sprig.runtime.router.launch import launch_replicas, serve_command, stop_replicas


@dataclass(frozen=True)
class Result:
    policy: str
    requests: int
    failed: int
    seconds: float
    req_per_s: float
    output_tok_per_s: float
    cache_hit_rate: float
    mean_latency_s: float
    p99_latency_s: float
    decisions: dict[str, int]


def workload(groups: int, per_group: int, prefix_words: int, seed: int) -> list[str]:
    """Shuffled prompts: `groups` shared prefixes of `prefix_words` corpus words, each + a distinct question."""
    words = (DATA_DIR / "corpus.txt").read_text().split()
    rng = random.Random(seed)
    prompts = []
    for g in range(groups):
        start = rng.randrange(len(words) - prefix_words)
        system = f"System {g}: " + " ".join(words[start : start + prefix_words])
        for q in range(per_group):
            qs = rng.randrange(len(words) - 12)
            prompts.append(f"{system}\nQuestion {q}: {' '.join(words[qs : qs + 12])}?\nAnswer:")
    rng.shuffle(prompts)
    return prompts


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def start_router(workers: list[str], policy: str) -> tuple[subprocess.Popen[bytes], str]:
    port = _free_port()
    cmd = [sys.executable, "-m", "sprig.runtime.cli", "router", "--workers", *workers, "--port", str(port),
           "--policy", policy]
    proc = subprocess.Popen(cmd, stderr=subprocess.DEVNULL)
    url = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        try:
            if httpx.get(f"{url}/health", timeout=1).status_code == 200:
                return proc, url
        except httpx.HTTPError:
            pass
        time.sleep(0.2)
    proc.kill()
    raise RuntimeError("the router did not start")


async def run_load(url: str, prompts: list[str], concurrency: int, max_new_tokens: int) -> list[dict | None]:
    sem = asyncio.Semaphore(concurrency)
    params = {"max_new_tokens": max_new_tokens, "temperature": 0.0, "ignore_eos": True}

    async def one(client: httpx.AsyncClient, prompt: str) -> dict | None:
        async with sem:
            t0 = time.perf_counter()
            resp = await client.post(f"{url}/generate", json={"text": prompt, "sampling_params": params})
            if resp.status_code != 200:
                return None
            return {**resp.json()["meta_info"], "latency": time.perf_counter() - t0}

    async with httpx.AsyncClient(timeout=600) as client:
        return await asyncio.gather(*(one(client, p) for p in prompts))


def bench_policy(workers: list[str], policy: str, prompts: list[str], args: argparse.Namespace) -> Result:
    for w in workers:
        httpx.post(f"{w}/flush_cache", timeout=30).raise_for_status()
    router, url = start_router(workers, policy)
    try:
        t0 = time.perf_counter()
        metas = asyncio.run(run_load(url, prompts, args.concurrency, args.max_new_tokens))
        seconds = time.perf_counter() - t0
        decisions = httpx.get(f"{url}/server_info").json()["router"]["decisions"]
    finally:
        router.terminate()
        router.wait(10)
    ok = [m for m in metas if m is not None]
    prompt_tokens = sum(m["prompt_tokens"] for m in ok)
    latencies = sorted(m["latency"] for m in ok)
    return Result(policy, len(prompts), len(prompts) - len(ok), seconds, len(ok) / seconds,
                  sum(m["completion_tokens"] for m in ok) / seconds,
                  sum(m["cached_tokens"] for m in ok) / max(prompt_tokens, 1), statistics.fmean(latencies),
                  latencies[min(len(latencies) - 1, int(0.99 * len(latencies)))], decisions)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--model", default="demo", help="a built-in checkpoint name or a checkpoint folder")
    p.add_argument("--replicas", type=int, default=2)
    p.add_argument("--groups", type=int, default=8)
    p.add_argument("--per-group", type=int, default=8)
    p.add_argument("--prefix-words", type=int, default=600)
    p.add_argument("--concurrency", type=int, default=8)
    p.add_argument("--max-new-tokens", type=int, default=16)
    p.add_argument("--max-total-tokens", type=int, default=4096, help="each replica's KV pool (tokens)")
    p.add_argument("--policies", nargs="+", default=["round_robin", "cache_aware"])
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--json", type=Path, default=None, help="also write the figures here")
    args = p.parse_args()
    model = str(checkpoint_path(args.model)) if not Path(args.model).is_dir() else args.model
    serve_args = ["--model", model, "--num-threads", "1", "--max-total-tokens", str(args.max_total_tokens)]
    prompts = workload(args.groups, args.per_group, args.prefix_words, args.seed)
    replicas = launch_replicas([serve_command(serve_args) for _ in range(args.replicas)])
    try:
        workers = [r.url for r in replicas]
        warm = workload(2, args.concurrency, args.prefix_words, args.seed + 1)
        for w in workers:  # why: the first requests of a fresh replica are slower (allocator, lazy imports)
            asyncio.run(run_load(w, warm, args.concurrency, args.max_new_tokens))
        results = [bench_policy(workers, policy, prompts, args) for policy in args.policies]
    finally:
        stop_replicas(replicas)
    print(f"{args.replicas} replicas, {len(prompts)} requests ({args.groups} prefixes x {args.per_group}), "
          f"concurrency {args.concurrency}, KV pool {args.max_total_tokens} tokens per replica")
    print(f"{'policy':<13} {'hit rate':>8} {'req/s':>7} {'out tok/s':>9} {'mean lat':>8} {'p99 lat':>8} failed")
    for r in results:
        print(f"{r.policy:<13} {r.cache_hit_rate:>8.1%} {r.req_per_s:>7.2f} {r.output_tok_per_s:>9.1f} "
              f"{r.mean_latency_s:>7.2f}s {r.p99_latency_s:>7.2f}s {r.failed:>6}  {r.decisions}")
    if args.json is not None:
        args.json.write_text(json.dumps([asdict(r) for r in results], indent=2))


if __name__ == "__main__":
    main()
