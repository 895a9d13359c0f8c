"""Quantized KV cache vs bf16 on the ~100M-parameter random Llama (bf16 weights), JSON saved under results/.

    python benchmarks/kv_cache_dtype.py [--threads 2] [--runs 7] [--e2e-runs 2] [--kv int8 fp8_e4m3 fp8_e5m2]

1. capacity: the pool's tokens at the same --mem-fraction (choose_pool_size on this machine's free memory; a
   fraction small enough that the 64 x context cap does not bind);
2. decode step at batch 128, contexts of 330-370 tokens: the whole model step (ModelRunner.forward) and the
   attention alone (the backend's paged_attention over every layer's pool), medians of --runs calls alternating
   between the KV dtypes (the machine's speed drifts);
3. end to end: output tokens/s on a shared-prefix workload (8 groups x 16 requests, 512 shared + 64 own prompt
   tokens, 64 output tokens), radix cache on, medians of --e2e-runs alternating runs.
"""

from __future__ import annotations

import argparse
import json
import random
import statistics
import time
from pathlib import Path
from typing import Any

import torch

MODEL = "llama-100m"
DTYPE = "bfloat16"
BATCH = 128
CONTEXT = (330, 370)


def _median_ms(samples: list[float]) -> float:
    return 1000 * statistics.median(samples)


def bench_capacity(cfg, kinds: list[str], mem_fraction: float) -> dict[str, Any]:
    from sprig.kernels.kv_quant import KVCacheDtype
    from sprig.runtime.model.kv_pool import choose_pool_size

    tokens = {k: choose_pool_size(cfg, torch.bfloat16, 16, None, mem_fraction, "cpu",
                                  KVCacheDtype.parse(k)).num_tokens for k in ["auto", *kinds]}
    res = {"mem_fraction": mem_fraction, "tokens": tokens,
           "ratio": {k: tokens[k] / tokens["auto"] for k in kinds}}
    print(f"capacity at --mem-fraction {mem_fraction}: " + ", ".join(
        f"{k} {t} tokens" + (f" ({res['ratio'][k]:.3f}x)" if k != "auto" else "") for k, t in tokens.items()))
    return res


def _decode_setup(model, kind: str, lens: list[int]):
    """A pool of `kind` holding random K/V for BATCH sequences of `lens` tokens, and their decode inputs."""
    from sprig.kernels.kv_quant import KVCacheDtype
    from sprig.runtime.model.kv_pool import KVPool, PoolSize
    from sprig.runtime.model.runner import ModelRunner, SeqInput

    page = 16
    pages_per = [-(-(n + 1) // page) for n in lens]
    pool = KVPool(model.cfg, PoolSize(sum(pages_per) + 1, page), model.dtype, "cpu", KVCacheDtype.parse(kind))
    g = torch.Generator().manual_seed(0)
    slots = torch.arange(pool.buffer.shape[2])
    shape = (len(slots), model.cfg.num_kv_heads, model.cfg.head_dim)
    scales = pool.k_scales or [None] * len(pool.k_caches)
    v_scales = pool.v_scales or [None] * len(pool.v_caches)
    for k_cache, v_cache, ks, vs in zip(pool.k_caches, pool.v_caches, scales, v_scales, strict=True):
        extra = {} if ks is None else {"k_scale": ks, "v_scale": vs}
        k = torch.randn(shape, generator=g).to(model.dtype)
        model.ops.store_kv(k_cache, v_cache, slots, k, torch.randn(shape, generator=g).to(model.dtype), **extra)
    seqs = []
    for n, p in zip(lens, pages_per, strict=True):
        seqs.append(SeqInput([7], n, pool.alloc(p)))
    return ModelRunner(model, pool), seqs


def bench_decode(model, kinds: list[str], runs: int) -> dict[str, Any]:
    rng = random.Random(0)
    lens = [rng.randint(*CONTEXT) for _ in range(BATCH)]
    setups = {k: _decode_setup(model, k, lens) for k in ["auto", *kinds]}
    step: dict[str, list[float]] = {k: [] for k in setups}
    attn: dict[str, list[float]] = {k: [] for k in setups}
    for runner, seqs in setups.values():  # warm-up (builds, first-touch)
        runner.forward(seqs)
    for _ in range(runs):
        for label, (runner, seqs) in setups.items():
            t0 = time.perf_counter()
            runner.forward(seqs)
            step[label].append(time.perf_counter() - t0)
            attn[label].append(_attention_only(runner, seqs))
    res: dict[str, Any] = {"batch": BATCH, "context": list(CONTEXT), "mean_context": statistics.mean(lens)}
    for label in setups:
        res[label] = {"step_ms": _median_ms(step[label]), "attention_ms": _median_ms(attn[label]),
                      "step_runs_ms": [1000 * s for s in step[label]]}
    for label in kinds:
        res[label]["step_vs_auto"] = res[label]["step_ms"] / res["auto"]["step_ms"]
        res[label]["attention_vs_auto"] = res[label]["attention_ms"] / res["auto"]["attention_ms"]
    for label in setups:
        r = res[label]
        ratios = "" if label == "auto" else f" ({r['step_vs_auto']:.3f}x, attention {r['attention_vs_auto']:.3f}x)"
        print(f"decode step, batch {BATCH}, ~{res['mean_context']:.0f}-token contexts, {label}: "
              f"{r['step_ms']:.1f} ms per step, attention {r['attention_ms']:.1f} ms over all layers{ratios}")
    return res


def _attention_only(runner, seqs) -> float:
    """Seconds for the decode attention of every layer over the pool (random queries; no projections)."""
    model, pool = runner.model, runner.pool
    batch, _, _ = runner.build_batch(seqs)
    cfg = model.cfg
    q = torch.randn(len(seqs), cfg.num_heads, cfg.head_dim).to(model.dtype)
    scales = pool.k_scales or [None] * len(pool.k_caches)
    v_scales = pool.v_scales or [None] * len(pool.v_caches)
    t0 = time.perf_counter()
    for k_cache, v_cache, ks, vs in zip(pool.k_caches, pool.v_caches, scales, v_scales, strict=True):
        extra = {} if ks is None else {"k_scale": ks, "v_scale": vs}
        model.ops.paged_attention(q, q[:, : cfg.num_kv_heads], q[:, : cfg.num_kv_heads], k_cache, v_cache,
                                  batch.attn, cfg.head_dim**-0.5, **extra)
    return time.perf_counter() - t0


def shared_prefix_workload(groups: int = 8, per_group: int = 16) -> list[tuple[list[int], int]]:
    rng = random.Random(0)
    work = []
    for _ in range(groups):
        prefix = [rng.randrange(3, 4000) for _ in range(512)]
        work += [(prefix + [rng.randrange(3, 4000) for _ in range(64)], 64) for _ in range(per_group)]
    return work


def bench_e2e(path: str, kinds: list[str], threads: int, runs: int) -> dict[str, Any]:
    from sprig import Engine

    work = shared_prefix_workload()
    params = [{"max_new_tokens": m, "temperature": 0, "ignore_eos": True} for _, m in work]
    out_tokens = sum(m for _, m in work)
    rates: dict[str, list[float]] = {k: [] for k in ["auto", *kinds]}
    engines = {k: Engine(path, dtype=DTYPE, num_threads=threads, max_total_tokens=65536, kv_cache_dtype=k)
               for k in rates}
    try:
        for engine in engines.values():
            engine.generate(input_ids=[p for p, _ in work[:2]], sampling_params=params[:2])
        for _ in range(runs):
            for label, engine in engines.items():
                engine.flush_cache()
                t0 = time.perf_counter()
                engine.generate(input_ids=[p for p, _ in work], sampling_params=params)
                rates[label].append(out_tokens / (time.perf_counter() - t0))
                print(f"  shared prefix, {label}: {rates[label][-1]:.1f} output tok/s", flush=True)
    finally:
        for engine in engines.values():
            engine.shutdown()
    res: dict[str, Any] = {k: {"out_tok_s": statistics.median(v), "runs": v} for k, v in rates.items()}
    print("shared-prefix throughput: " + ", ".join(f"{k} {v['out_tok_s']:.1f} tok/s" for k, v in res.items()))
    return res


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--runs", type=int, default=7)
    parser.add_argument("--e2e-runs", type=int, default=2, help="0 skips the end-to-end run")
    parser.add_argument("--mem-fraction", type=float, default=0.05)
    parser.add_argument("--kv", nargs="+", default=["int8", "fp8_e4m3", "fp8_e5m2"])
    parser.add_argument("--output", default="results/kv_cache_dtype.json")
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    from sprig.runtime.model.checkpoints import checkpoint_path
    from sprig.runtime.model.loader import load_model

    path = str(checkpoint_path(MODEL))
    model = load_model(path, DTYPE)
    res: dict[str, Any] = {"model": MODEL, "dtype": DTYPE, "threads": args.threads, "backend": model.ops.name}
    res["capacity"] = bench_capacity(model.cfg, args.kv, args.mem_fraction)
    res["decode"] = bench_decode(model, args.kv, args.runs)
    del model
    if args.e2e_runs:
        res["shared_prefix"] = bench_e2e(path, args.kv, args.threads, args.e2e_runs)
    out = Path(args.output)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(res, indent=2))
    print(f"saved {out}")


if __name__ == "__main__":
    main()
