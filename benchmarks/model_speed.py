"""Batch-1 prefill and decode speed: sprig's Engine vs `transformers.generate` on the same checkpoint.

    python benchmarks/model_speed.py [--threads 2] [--models demo llama-100m] [--runs 3]

Prefill tokens/s = prompt tokens / time to the first token (512-token prompt, 1 new token). Decode tokens/s =
(N - 1) / (time for N tokens - time for 1 token), N = 128, EOS ignored. Medians of `--runs` runs, printed as a
table and saved as JSON under results/.
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from pathlib import Path

import torch

PROMPT_LEN = 512
DECODE_TOKENS = 128


def _timed(fn) -> float:
    start = time.perf_counter()
    fn()
    return time.perf_counter() - start


def bench_sprig(path: str, dtype: str, prompt: list[int], runs: int, threads: int) -> tuple[float, float]:
    from sprig import Engine

    engine = Engine(path, dtype=dtype, num_threads=threads, max_total_tokens=4096, chunked_prefill_size=1024)
    short = prompt[:16]

    def gen(ids: list[int], n: int) -> None:
        engine.generate(input_ids=ids, sampling_params={"max_new_tokens": n, "temperature": 0, "ignore_eos": True})

    try:
        gen(prompt, 2)  # warm-up
        engine.flush_cache()
        prefill, decode = [], []
        for _ in range(runs):
            prefill.append(PROMPT_LEN / _timed(lambda: gen(prompt, 1)))
            engine.flush_cache()  # no prefix reuse between runs: measure computation
            t1 = _timed(lambda: gen(short, 1))
            engine.flush_cache()
            tn = _timed(lambda: gen(short, DECODE_TOKENS))
            engine.flush_cache()
            decode.append((DECODE_TOKENS - 1) / (tn - t1))
    finally:
        engine.shutdown()
    return statistics.median(prefill), statistics.median(decode)


def bench_transformers(path: str, dtype: str, prompt: list[int], runs: int) -> tuple[float, float]:
    from transformers import AutoModelForCausalLM

    torch_dtype = {"float32": torch.float32, "bfloat16": torch.bfloat16}[dtype]
    model = AutoModelForCausalLM.from_pretrained(path, dtype=torch_dtype).eval()
    ids = torch.tensor([prompt])
    short = ids[:, :16]

    def gen(x: torch.Tensor, n: int) -> None:
        with torch.inference_mode():
            model.generate(x, max_new_tokens=n, min_new_tokens=n, do_sample=False, pad_token_id=0)

    gen(ids, 2)
    prefill, decode = [], []
    for _ in range(runs):
        prefill.append(PROMPT_LEN / _timed(lambda: gen(ids, 1)))
        t1 = _timed(lambda: gen(short, 1))
        tn = _timed(lambda: gen(short, DECODE_TOKENS))
        decode.append((DECODE_TOKENS - 1) / (tn - t1))
    return statistics.median(prefill), statistics.median(decode)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--models", nargs="+", default=["demo:float32", "demo:bfloat16", "llama-100m:bfloat16"],
                        help="recipe:dtype pairs (recipes from sprig.runtime.model.checkpoints)")
    parser.add_argument("--out", default="results/model_speed.json")
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    from sprig.runtime.model.checkpoints import checkpoint_path

    rows = []
    for spec in args.models:
        name, dtype = spec.split(":")
        path = str(checkpoint_path(name))
        prompt = torch.randint(3, 4000, (PROMPT_LEN,), generator=torch.Generator().manual_seed(0)).tolist()
        sp, sd = bench_sprig(path, dtype, prompt, args.runs, args.threads)
        hp, hd = bench_transformers(path, dtype, prompt, args.runs)
        rows.append({"model": name, "dtype": dtype, "threads": args.threads, "sprig_prefill_tok_s": sp,
                     "hf_prefill_tok_s": hp, "sprig_decode_tok_s": sd, "hf_decode_tok_s": hd})
    print(f"{'model':>12} {'dtype':>9} | {'prefill tok/s sprig':>19} {'hf':>8} {'ratio':>6} | "
          f"{'decode tok/s sprig':>18} {'hf':>8} {'ratio':>6}")
    for r in rows:
        print(f"{r['model']:>12} {r['dtype']:>9} | {r['sprig_prefill_tok_s']:>19.1f} {r['hf_prefill_tok_s']:>8.1f} "
              f"{r['sprig_prefill_tok_s'] / r['hf_prefill_tok_s']:>6.2f} | {r['sprig_decode_tok_s']:>18.1f} "
              f"{r['hf_decode_tok_s']:>8.1f} {r['sprig_decode_tok_s'] / r['hf_decode_tok_s']:>6.2f}")
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(rows, indent=2))


if __name__ == "__main__":
    main()
