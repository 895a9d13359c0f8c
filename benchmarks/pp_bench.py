"""Pipeline parallelism on this machine: throughput and TPOT at pp = 1 and pp = 2, and the time spent in the messages
between stages.

    python benchmarks/pp_bench.py [--model demo] [--requests 32] [--concurrency 16] [--new-tokens 64] [--runs 1]

Each rank runs one torch thread (pp = 2 is two processes, one core each); pp = 1 runs with its decode graphs
(where the model allows them) and without, since pipeline stages run eagerly. Requests are random token prompts of
32-128 tokens, greedy, `ignore_eos`, `--concurrency` in flight at once (streamed, so TTFT and TPOT are measured per
request). The communication time is what the ranks spend in point-to-point messages: posting sends, and receiving
a message's payload and hidden states once its header arrived (`pp_protocol.LinkStats`; each worker writes its own
at shutdown). Rank 0's wait for a step's logits also covers the later stages' compute and is shown apart.
Results go to results/pp_bench.json.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import random
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

RESULTS = Path(__file__).resolve().parent.parent / "results"


def workload(n: int, new_tokens: int, vocab: int, seed: int = 0) -> list[list[int]]:
    rng = random.Random(seed)
    return [[rng.randrange(3, vocab) for _ in range(rng.randint(32, 128))] for _ in range(n)]


async def _one(engine: Any, ids: list[int], new_tokens: int, gate: asyncio.Semaphore) -> tuple[float, float, int]:
    """(TTFT, TPOT, output tokens) of one streamed request."""
    async with gate:
        start = time.perf_counter()
        first = None
        tokens = 0
        stream = await engine.async_generate(input_ids=ids, stream=True, sampling_params={
            "max_new_tokens": new_tokens, "temperature": 0.0, "ignore_eos": True})
        async for chunk in stream:
            tokens = len(chunk["output_ids"])
            if first is None and tokens:
                first = time.perf_counter()
        end = time.perf_counter()
    assert first is not None
    return first - start, (end - first) / max(tokens - 1, 1), tokens


async def _drive(engine: Any, prompts: list[list[int]], new_tokens: int, concurrency: int) -> tuple[float, list]:
    gate = asyncio.Semaphore(concurrency)
    start = time.perf_counter()
    rows = await asyncio.gather(*(_one(engine, p, new_tokens, gate) for p in prompts))
    return time.perf_counter() - start, rows


def run(model: str, pp: int, graphs: bool, args: argparse.Namespace, device: str = "cpu") -> dict[str, Any]:
    """One engine (pp ranks): a warm-up, then the workload; throughput, latencies and message times."""
    from sprig import Engine
    from sprig.runtime.model.checkpoints import checkpoint_path

    stats_dir = tempfile.mkdtemp(prefix="pp_bench_")
    os.environ["SPRIG_PP_STATS_DIR"] = stats_dir  # the spawned ranks inherit it
    engine = Engine(str(checkpoint_path(model)), pp_size=pp, num_threads=1, max_total_tokens=32768,
                    random_seed=0, dtype=args.dtype, disable_cuda_graph=not graphs, device=device)
    try:
        vocab = engine.model_config.vocab_size
        asyncio.run(_drive(engine, workload(4, 8, vocab, seed=1), 8, 4))  # warm-up
        steps0 = engine.core.counters.steps
        link = engine.core.tp.link if engine.core.tp is not None else None
        before = (link.stats.send_s, link.stats.logits_wait_s) if link is not None else (0.0, 0.0)
        wall, rows = asyncio.run(_drive(engine, workload(args.requests, args.new_tokens, vocab), args.new_tokens,
                                        args.concurrency))
        steps = engine.core.counters.steps - steps0
        rank0 = (link.stats.send_s - before[0], link.stats.logits_wait_s - before[1]) if link is not None \
            else (0.0, 0.0)
    finally:
        engine.shutdown()
    workers = [json.loads(p.read_text()) for p in sorted(Path(stats_dir).glob("rank*.json"))]
    tokens = sum(r[2] for r in rows)
    # The workers' figures cover the warm-up too (they are written once, at shutdown): a few steps out of hundreds.
    comm = rank0[0] + sum(w["send_s"] + w["recv_s"] for w in workers)
    return {"model": model, "pp": pp, "decode_graphs": engine.core.runner.graph_runner is not None,
            "requests": args.requests, "concurrency": args.concurrency,
            "wall_s": wall, "steps": steps, "output_tok_s": tokens / wall,
            "tpot_ms_median": 1000 * statistics.median(r[1] for r in rows),
            "ttft_ms_median": 1000 * statistics.median(r[0] for r in rows),
            "comm_ms_per_step": 1000 * comm / max(steps, 1),
            "logits_wait_ms_per_step": 1000 * rank0[1] / max(steps, 1),
            "rank0_send_ms_per_step": 1000 * rank0[0] / max(steps, 1),
            "workers": [{k: v / max(steps, 1) * (1000 if k.endswith("_s") else 1) for k, v in w.items()}
                        for w in workers]}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", default="demo", help="a checkpoint recipe of sprig.runtime.model.checkpoints")
    parser.add_argument("--dtype", default="auto", help="the model dtype (auto: the checkpoint's)")
    parser.add_argument("--requests", type=int, default=32)
    parser.add_argument("--concurrency", type=int, default=16)
    parser.add_argument("--new-tokens", type=int, default=64)
    parser.add_argument("--runs", type=int, default=1, help="rounds; each runs pp = 1 then pp = 2")
    args = parser.parse_args()
    # pp = 1 runs with and without decode graphs (CPU graphs replay C kernels; a pipeline stage runs eagerly).
    configs = [(1, True), (1, False), (2, False)]
    results = [run(args.model, pp, graphs, args) for _ in range(args.runs) for pp, graphs in configs]
    print(f"{args.model}, {args.requests} requests at concurrency {args.concurrency}, {args.new_tokens} new tokens, "
          "1 thread per rank")
    print("| pp | decode graphs | output tok/s | TPOT median (ms) | TTFT median (ms) | steps | p2p comm per step (ms) | "
          "rank 0 wait for logits per step (ms) |")
    print("|---|---|---|---|---|---|---|---|")
    for r in results:
        graphs = "on" if r["decode_graphs"] else "off"
        print(f"| {r['pp']} | {graphs} | {r['output_tok_s']:.0f} | {r['tpot_ms_median']:.1f} | {r['ttft_ms_median']:.0f} | "
              f"{r['steps']} | {r['comm_ms_per_step']:.3f} | {r['logits_wait_ms_per_step']:.2f} |")
    RESULTS.mkdir(exist_ok=True)
    (RESULTS / "pp_bench.json").write_text(json.dumps(results, indent=2))


if __name__ == "__main__":
    main()
