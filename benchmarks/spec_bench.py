"""Speculative decoding against itself with speculation off, same process, calls interleaved (ABBA), medians of runs.

    python benchmarks/spec_bench.py [--threads 1] [--runs 3] [--new-tokens 96]

Workloads on the ~100M-parameter random Llama (bf16):
- `copy-b1`: the answer repeats text of the prompt. A random-weight model cannot quote, so each prompt is a random
  prompt followed by the model's own greedy continuation of it (which falls into a loop): the answer goes on with
  the loop already in the prompt, and prompt lookup finds it from the first token, as it finds a quoted span.
- `loop-b1`: random prompts, greedy, one request at a time. The random-weight model falls into loops within a few
  dozen tokens and n-gram lookup catches them; this is where the mean accepted length is high.
- `sampled-b1`: the same prompts at temperature 1. The model's distribution is nearly flat, so drafts are almost
  never kept: the adaptive back-off must keep the cost of trying near zero (target: >= 0.95x).
- `draft-other-b1`: greedy, with another random model (`demo`, same tokenizer) as the draft model: a proposal at
  every try and none kept, the back-off's worst case.
- `loop-b16`: the greedy prompts, 16 requests together: the ratio at batch 16.
Tokens/s are end to end (prompt processing included); at batch 1 the decode part alone is reported too: the tokens
after each request's first, over the time from its first token to its last (streamed), i.e. 1 / TPOT.
Results go to results/spec_bench.json.
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
DRAFT = "demo"
DTYPE = "bfloat16"
WORKLOADS = ("copy-b1", "loop-b1", "sampled-b1", "draft-other-b1", "loop-b16")


def engine(threads: int, **options: Any):
    from sprig import Engine
    from sprig.runtime.model.checkpoints import checkpoint_path

    return Engine(str(checkpoint_path(MODEL)), dtype=DTYPE, num_threads=threads, max_total_tokens=32768,
                  random_seed=0, **options)


def prompts(n: int, vocab: int, seed: int) -> list[list[int]]:
    rng = random.Random(seed)
    return [[rng.randrange(3, vocab) for _ in range(rng.randint(48, 256))] for _ in range(n)]


def run(eng: Any, work: list[list[int]], batch: int, params: dict) -> tuple[float, int, float, int]:
    """Seconds and generated tokens for `work`, `batch` requests per call; at batch 1 also the decode part (streamed:
    the seconds from each request's first token to its last, and the tokens after the first), else zeros."""
    start = time.perf_counter()
    tokens = decode_tokens = 0
    decode_s = 0.0
    for i in range(0, len(work), batch):
        if batch == 1:
            first: tuple[float, int] | None = None
            out: dict = {}
            for out in eng.generate(input_ids=work[i], sampling_params=params, stream=True):
                if first is None and out["output_ids"]:
                    first = (time.perf_counter(), len(out["output_ids"]))
            tokens += len(out["output_ids"])
            if first is not None:
                decode_s += time.perf_counter() - first[0]
                decode_tokens += len(out["output_ids"]) - first[1]
            continue
        results = eng.generate(input_ids=work[i : i + batch], sampling_params=params)
        tokens += sum(len(r["output_ids"]) for r in (results if isinstance(results, list) else [results]))
    return time.perf_counter() - start, tokens, decode_s, decode_tokens


def copy_prompts(eng: Any, base: list[list[int]], tokens: int) -> list[list[int]]:
    """Each prompt followed by the model's greedy continuation of it (see `copy-b1`)."""
    params = {"max_new_tokens": tokens, "temperature": 0.0, "ignore_eos": True}
    return [p + eng.generate(input_ids=p, sampling_params=params)["output_ids"] for p in base]


def spec_delta(before: dict, after: dict) -> dict[str, float]:
    verify = after["spec_verify_steps"] - before["spec_verify_steps"]
    proposed = after["spec_proposed_tokens"] - before["spec_proposed_tokens"]
    accepted = after["spec_accepted_tokens"] - before["spec_accepted_tokens"]
    emitted = after["spec_accept_length"] * after["spec_verify_steps"] - before["spec_accept_length"] * \
        before["spec_verify_steps"]
    return {"verify_steps": verify, "accept_rate": accepted / proposed if proposed else 0.0,
            "accept_length": emitted / verify if verify else 0.0}


def compare(off: Any, on: Any, work: list[list[int]], batch: int, params: dict, runs: int) -> dict[str, Any]:
    run(off, work[:1], 1, {**params, "max_new_tokens": 4})  # warm both
    run(on, work[:1], 1, {**params, "max_new_tokens": 4})
    rates: dict[str, list[float]] = {"off": [], "on": []}
    decode: dict[str, list[float]] = {"off": [], "on": []}
    before = on.stats()
    engines = {"off": off, "on": on}
    chunks = [work[i : i + batch] for i in range(0, len(work), batch)]
    for r in range(runs):
        totals = {name: [0.0, 0, 0.0, 0] for name in engines}  # seconds, tokens, decode seconds, decode tokens
        for i, chunk in enumerate(chunks):
            # why: the two modes alternate per call, in ABBA order, so the machine's drift hits both alike
            for name in (("off", "on") if (r + i) % 2 == 0 else ("on", "off")):
                engines[name].flush_cache()  # every call computes its prompts; only decoding differs
                for k, v in enumerate(run(engines[name], chunk, batch, params)):
                    totals[name][k] += v
        for name, (seconds, tokens, decode_s, decode_tokens) in totals.items():
            rates[name].append(tokens / seconds)
            decode[name].append(decode_tokens / decode_s if decode_s else 0.0)
    off_rate, on_rate = statistics.median(rates["off"]), statistics.median(rates["on"])
    off_dec, on_dec = statistics.median(decode["off"]), statistics.median(decode["on"])
    return {"batch": batch, "off_tok_s": off_rate, "on_tok_s": on_rate, "ratio": on_rate / off_rate,
            "off_decode_tok_s": off_dec, "on_decode_tok_s": on_dec,
            "decode_ratio": on_dec / off_dec if off_dec else 0.0,
            "runs_off": rates["off"], "runs_on": rates["on"], **spec_delta(before, on.stats())}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--new-tokens", type=int, default=96)
    parser.add_argument("--draft-tokens", type=int, default=4)
    parser.add_argument("--workloads", nargs="+", choices=WORKLOADS, default=list(WORKLOADS))
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    from sprig.runtime.model.checkpoints import checkpoint_path

    greedy = {"max_new_tokens": args.new_tokens, "temperature": 0.0, "ignore_eos": True}
    sampled = {**greedy, "temperature": 1.0}
    report: dict[str, Any] = {"model": MODEL, "dtype": DTYPE, "threads": args.threads, "runs": args.runs,
                              "draft_tokens": args.draft_tokens}
    spec = {"speculative_num_draft_tokens": args.draft_tokens}
    with engine(args.threads) as off, engine(args.threads, speculative_algorithm="ngram", **spec) as on:
        vocab = off.tokenizer.vocab_size
        b1, b16 = prompts(3, vocab, seed=1), prompts(16, vocab, seed=2)
        wanted = set(args.workloads)
        if "copy-b1" in wanted:
            report["copy-b1"] = compare(off, on, copy_prompts(off, prompts(3, vocab, seed=3), 64), 1, greedy,
                                        args.runs)
        if "loop-b1" in wanted:
            report["loop-b1"] = compare(off, on, b1, 1, greedy, args.runs)
        if "sampled-b1" in wanted:
            report["sampled-b1"] = compare(off, on, b1, 1, sampled, args.runs)
        if "loop-b16" in wanted:
            report["loop-b16"] = compare(off, on, b16, 16, {**greedy, "max_new_tokens": args.new_tokens // 2},
                                         args.runs)
        if "draft-other-b1" in wanted:
            with engine(args.threads, speculative_algorithm="draft", **spec,
                        speculative_draft_model_path=str(checkpoint_path(DRAFT))) as draft:
                report["draft-other-b1"] = compare(off, draft, b1, 1, greedy, args.runs)
    for name in [w for w in WORKLOADS if w in report]:
        r = report[name]
        decode = (f" (decode alone: {r['off_decode_tok_s']:.1f} -> {r['on_decode_tok_s']:.1f} tok/s, "
                  f"x{r['decode_ratio']:.2f})") if r["batch"] == 1 else ""
        print(f"{name:15s} batch {r['batch']:2d}: off {r['off_tok_s']:7.1f} tok/s, on {r['on_tok_s']:7.1f} tok/s, "
              f"x{r['ratio']:.2f}{decode}; accept rate {r['accept_rate']:.2f}, mean accepted length "
              f"{r['accept_length']:.2f} over {r['verify_steps']} verifications")
    out = Path(__file__).resolve().parents[1] / "results" / "spec_bench.json"
    out.parent.mkdir(exist_ok=True)
    out.write_text(json.dumps(report, indent=2))
    print(f"saved {out}")


if __name__ == "__main__":
    main()
