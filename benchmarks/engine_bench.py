"""Engine benchmarks on the ~100M-parameter random Llama (bf16), medians of --runs, JSON saved under results/.

    python benchmarks/engine_bench.py throughput [--threads 2] [--runs 3]   # (a) sprig vs transformers static batches
    python benchmarks/engine_bench.py shared-prefix [--threads 2] [--runs 3] # (b) radix cache on vs off
    python benchmarks/engine_bench.py profile [--threads 2]                 # (c) model time vs the rest per step
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


def model_path() -> str:
    from sprig.runtime.model.checkpoints import checkpoint_path

    return str(checkpoint_path(MODEL))


def make_engine(threads: int, **options: Any):
    from sprig import Engine

    return Engine(model_path(), dtype=DTYPE, num_threads=threads, max_total_tokens=options.pop("tokens", 65536),
                  random_seed=0, **options)


def random_workload(n: int, seed: int, vocab: int) -> list[tuple[list[int], int]]:
    rng = random.Random(seed)
    return [([rng.randrange(3, vocab) for _ in range(rng.randint(32, 512))], rng.randint(16, 256)) for _ in range(n)]


def run_engine(engine, work: list[tuple[list[int], int]]) -> tuple[float, list[dict]]:
    params = [{"max_new_tokens": m, "temperature": 0, "ignore_eos": True} for _, m in work]
    start = time.perf_counter()
    results = engine.generate(input_ids=[p for p, _ in work], sampling_params=params)
    return time.perf_counter() - start, results


def run_hf_static(model, work: list[tuple[list[int], int]], batch: int) -> float:
    """transformers.generate in static batches (left-padded), each batch runs to its longest output."""
    start = time.perf_counter()
    for i in range(0, len(work), batch):
        chunk = work[i : i + batch]
        width = max(len(p) for p, _ in chunk)
        ids = torch.zeros(len(chunk), width, dtype=torch.long)
        mask = torch.zeros_like(ids)
        for j, (p, _) in enumerate(chunk):
            ids[j, width - len(p) :] = torch.tensor(p)
            mask[j, width - len(p) :] = 1
        n = max(m for _, m in chunk)
        with torch.inference_mode():
            model.generate(ids, attention_mask=mask, max_new_tokens=n, min_new_tokens=n, do_sample=False,
                           pad_token_id=0)
    return time.perf_counter() - start


def bench_throughput(args: argparse.Namespace) -> dict:
    from transformers import AutoModelForCausalLM

    work = random_workload(args.requests, seed=0, vocab=4000)
    out_tokens = sum(m for _, m in work)
    sprig_s, hf_s = [], []
    engine = make_engine(args.threads)
    run_engine(engine, work[:8])  # warm-up
    hf = AutoModelForCausalLM.from_pretrained(model_path(), dtype=torch.bfloat16).eval()
    hf_work = work[: args.hf_requests]  # static batches are independent: a subset gives the same tokens/s
    hf_tokens = sum(m for _, m in hf_work)
    # Rounds alternate the two systems: this machine's speed drifts by up to 2x over minutes, and back-to-back
    # blocks of runs would compare two different machines.
    for r in range(max(args.runs, args.hf_runs)):
        if r < args.runs:
            engine.flush_cache()
            elapsed, _ = run_engine(engine, work)
            sprig_s.append(out_tokens / elapsed)
            print(f"  sprig run: {out_tokens / elapsed:.1f} output tok/s", flush=True)
        if r < args.hf_runs:
            elapsed = run_hf_static(hf, hf_work, 16)
            hf_s.append(hf_tokens / elapsed)
            print(f"  transformers run ({len(hf_work)} requests): {hf_tokens / elapsed:.1f} output tok/s", flush=True)
    stats = engine.stats()
    engine.shutdown()
    res = {"requests": len(work), "output_tokens": out_tokens,
           "prompt_tokens": sum(len(p) for p, _ in work),
           "sprig_out_tok_s": statistics.median(sprig_s), "hf_out_tok_s": statistics.median(hf_s),
           "sprig_runs": sprig_s, "hf_runs": hf_s, "avg_decode_batch": stats["avg_decode_batch"]}
    res["ratio"] = res["sprig_out_tok_s"] / res["hf_out_tok_s"]
    print(f"(a) {len(work)} requests, {out_tokens} output tokens: sprig {res['sprig_out_tok_s']:.1f} tok/s, "
          f"transformers (static batches of 16) {res['hf_out_tok_s']:.1f} tok/s, ratio {res['ratio']:.2f}x")
    return res


def shared_prefix_workload(seed: int = 0) -> list[tuple[list[int], int]]:
    rng = random.Random(seed)
    work = []
    for _ in range(16):
        prefix = [rng.randrange(3, 4000) for _ in range(512)]
        work += [(prefix + [rng.randrange(3, 4000) for _ in range(64)], 64) for _ in range(16)]
    return work


def bench_shared_prefix(args: argparse.Namespace) -> dict:
    work = shared_prefix_workload()
    prompt_tokens = sum(len(p) for p, _ in work)
    best_cached = 16 * 15 * 512  # each group's first request must compute its prefix
    out_tokens = sum(m for _, m in work)
    res: dict[str, Any] = {"prompt_tokens": prompt_tokens, "best_possible_cached": best_cached}
    engines = {"cache_on": make_engine(args.threads), "cache_off": make_engine(args.threads, disable_radix_cache=True)}
    runs: dict[str, dict[str, list[float]]] = {label: {"rates": [], "hits": [], "computed": []} for label in engines}
    for engine in engines.values():
        run_engine(engine, work[:2])
    for _ in range(args.runs):  # alternating, like (a): the machine's speed drifts
        for label, engine in engines.items():
            engine.flush_cache()
            before = engine.stats()
            elapsed, results = run_engine(engine, work)
            after = engine.stats()
            cached = sum(r["meta_info"]["cached_tokens"] for r in results)
            prefill = after["computed_tokens"] - before["computed_tokens"] - (out_tokens - len(work))
            runs[label]["rates"].append(out_tokens / elapsed)
            runs[label]["hits"].append(cached / best_cached)
            runs[label]["computed"].append(prefill / prompt_tokens)
            print(f"  {label}: {out_tokens / elapsed:.1f} output tok/s, cached {cached}, "
                  f"prefill computed/prompt {prefill / prompt_tokens:.3f}", flush=True)
    for label, engine in engines.items():
        engine.shutdown()
        rates = runs[label]["rates"]
        res[label] = {"out_tok_s": statistics.median(rates), "hit_vs_best": statistics.median(runs[label]["hits"]),
                      "prefill_computed_over_prompt": statistics.median(runs[label]["computed"]), "runs": rates}
    res["throughput_ratio"] = res["cache_on"]["out_tok_s"] / res["cache_off"]["out_tok_s"]
    on = res["cache_on"]
    print(f"(b) prefill computed/prompt {on['prefill_computed_over_prompt']:.3f} (off: "
          f"{res['cache_off']['prefill_computed_over_prompt']:.3f}); hit rate vs best {on['hit_vs_best']:.3f}; "
          f"throughput cache on {on['out_tok_s']:.1f} vs off {res['cache_off']['out_tok_s']:.1f} tok/s = "
          f"{res['throughput_ratio']:.2f}x")
    return res


def bench_profile(args: argparse.Namespace) -> dict:
    rows = {}
    for batch in (1, 16, 64):
        engine = make_engine(args.threads)
        core = engine.core
        work = [([random.Random(i).randrange(3, 4000) for _ in range(128)], 64) for i in range(batch)]
        run_engine(engine, work[:1])
        engine.flush_cache()
        c0 = dict(vars(core.counters))
        run_engine(engine, work)
        c1 = vars(core.counters)
        steps = c1["decode_steps"] - c0["decode_steps"]
        # Prefill steps are excluded by counting decode-only steps' share via totals of the whole run.
        model = c1["model_time"] - c0["model_time"]
        total = c1["step_time"] - c0["step_time"]
        n_steps = c1["steps"] - c0["steps"]
        rows[batch] = {"steps": n_steps, "decode_steps": steps, "model_ms_per_step": 1e3 * model / n_steps,
                       "other_ms_per_step": 1e3 * (total - model) / n_steps,
                       "overhead_share": (total - model) / total}
        engine.shutdown()
    print("(c) step profile (128-token prompts, 64 output tokens each):")
    print(f"{'batch':>6} {'steps':>6} {'model ms/step':>14} {'other ms/step':>14} {'other share':>12}")
    for b, r in rows.items():
        print(f"{b:>6} {r['steps']:>6} {r['model_ms_per_step']:>14.2f} {r['other_ms_per_step']:>14.2f} "
              f"{r['overhead_share']:>12.1%}")
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("which", choices=["throughput", "shared-prefix", "profile"])
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--hf-runs", type=int, default=3)
    parser.add_argument("--requests", type=int, default=256)
    parser.add_argument("--hf-requests", type=int, default=256,
                        help="transformers runs the first N requests (whole static batches of 16)")
    parser.add_argument("--out-dir", default="results")
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    fn = {"throughput": bench_throughput, "shared-prefix": bench_shared_prefix, "profile": bench_profile}
    res = fn[args.which](args)
    out = Path(args.out_dir) / f"engine_{args.which}.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(res, indent=2))


if __name__ == "__main__":
    main()
