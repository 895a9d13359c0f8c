"""The overlap schedule on and off: the time between forwards and throughput at concurrency 16 and 64.

    python benchmarks/overlap_bench.py [--model llama-100m] [--rounds 2] [--threads 2 1]

For each thread count and concurrency C, one engine per mode (overlap off, then on; rebuilt each round so both
start warm and equal) serves 2C streaming requests through `async_generate`, C at a time, each a fresh random
128-token prompt with 64 greedy output tokens (ignore_eos), after one warm-up round. Reported per mode: output
tokens/s, the mean time from the end of one forward to the start of the next (the engine thread's gap: with
overlap the stop checks and the next step's scheduling run beside the forward instead), and the forward's time per
step. Medians over --rounds, modes alternating so drift of the machine's speed hits both.
"""

from __future__ import annotations

import argparse
import asyncio
import random
import statistics
import time
from typing import Any

PROMPT_TOKENS = 128
OUTPUT_TOKENS = 64


def _model_path(name: str) -> str:
    from sprig.runtime.model.checkpoints import checkpoint_path

    return str(checkpoint_path(name))


async def _serve(engine: Any, prompts: list[list[int]], concurrency: int) -> float:
    """Run every prompt, `concurrency` at a time; returns the wall time."""
    slots = asyncio.Semaphore(concurrency)
    params = {"max_new_tokens": OUTPUT_TOKENS, "temperature": 0.0, "ignore_eos": True}

    async def one(ids: list[int]) -> None:
        async with slots:
            async for _ in await engine.async_generate(input_ids=ids, sampling_params=params, stream=True):
                pass

    start = time.perf_counter()
    await asyncio.gather(*(one(p) for p in prompts))
    return time.perf_counter() - start


def _prompts(seed: int, n: int, vocab: int) -> list[list[int]]:
    rng = random.Random(seed)
    return [[rng.randrange(3, vocab) for _ in range(PROMPT_TOKENS)] for _ in range(n)]


def measure(model: str, threads: int, concurrency: int, overlap: bool, seed: int,
            device: str = "cpu") -> dict[str, float]:
    """One engine, one mode: a warm-up round, then 2C fresh requests C at a time."""
    from sprig import Engine

    with Engine(_model_path(model), dtype="bfloat16", num_threads=threads, random_seed=0, device=device,
                max_total_tokens=32768, max_running_requests=concurrency,
                enable_overlap_schedule=overlap, disable_overlap_schedule=not overlap) as engine:
        vocab = engine.tokenizer.vocab_size
        asyncio.run(_serve(engine, _prompts(seed + 7919, concurrency, vocab), concurrency))  # warm-up
        c = engine.core.counters
        gaps0, gap0, model0, steps0 = c.forward_gaps, c.forward_gap_time, c.model_time, c.steps
        prompts = _prompts(seed, 2 * concurrency, vocab)
        wall = asyncio.run(_serve(engine, prompts, concurrency))
        steps = c.steps - steps0
        return {"tok_s": len(prompts) * OUTPUT_TOKENS / wall,
                "gap_us": 1e6 * (c.forward_gap_time - gap0) / max(c.forward_gaps - gaps0, 1),
                "forward_ms": 1e3 * (c.model_time - model0) / max(steps, 1), "steps": steps}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", default="llama-100m")
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--threads", type=int, nargs="+", default=[2, 1])
    parser.add_argument("--concurrency", type=int, nargs="+", default=[16, 64])
    args = parser.parse_args()
    print(f"{args.model} bf16, {PROMPT_TOKENS} -> {OUTPUT_TOKENS} tokens, 2C requests C at a time, "
          f"medians of {args.rounds} rounds")
    print(f"{'threads':>7} {'C':>4} {'mode':>8} {'tok/s':>8} {'gap us':>8} {'fwd ms':>8} {'steps':>6}")
    for threads in args.threads:
        for conc in args.concurrency:
            runs: dict[bool, list[dict[str, float]]] = {False: [], True: []}
            for r in range(args.rounds):
                for overlap in (False, True):
                    runs[overlap].append(measure(args.model, threads, conc, overlap, seed=1000 * r + conc))
            tok = {}
            for overlap in (False, True):
                med = {k: statistics.median(x[k] for x in runs[overlap]) for k in runs[overlap][0]}
                tok[overlap] = med["tok_s"]
                print(f"{threads:>7} {conc:>4} {'overlap' if overlap else 'serial':>8} {med['tok_s']:>8.1f} "
                      f"{med['gap_us']:>8.0f} {med['forward_ms']:>8.2f} {med['steps']:>6.0f}")
            print(f"{'':>7} {'':>4} {'ratio':>8} {tok[True] / tok[False]:>8.3f}")


if __name__ == "__main__":
    main()
