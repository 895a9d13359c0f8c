"""Speculative decoding (n-gram) on the real SmolLM2-135M-Instruct (the GGUF's Q4_1 blocks as stored), greedy, 96
new tokens: a copy-heavy prompt (reformat a JSON record given in the prompt) and a plain chat prompt, with
speculation off and on. Each engine runs one unmeasured warm-up generation, then `--runs` measured ones; prints
the median tokens/s, the speed-up and the mean accepted length (`spec_accept_length`: tokens added per verify
forward).

    python benchmarks/spec_real.py                       # bf16 activations (the default), 2 threads
    python benchmarks/spec_real.py --dtype float32 --threads 1
"""

from __future__ import annotations

import argparse
import json
import statistics
import time

import torch
from quality import smollm2_gguf

from sprig import Engine

RECORD = {"id": 1042, "name": "Ada Lovelace", "email": "ada@example.org", "roles": ["admin", "editor"],
          "address": {"street": "12 St James's Square", "city": "London", "postcode": "SW1Y 4JH"}, "active": True}
COPY = [{"role": "user", "content": "Reformat this JSON with 4-space indentation and keys in the same order:\n"
         + json.dumps(RECORD)}]
CHAT = [{"role": "user", "content": "Explain in a few sentences why the sky is blue."}]
WORKLOADS = {"copy": COPY, "chat": CHAT}


def measure(spec: str | None, args: argparse.Namespace) -> dict[str, tuple[int, float, float | None, int | None]]:
    """Per workload: output tokens, median tok/s, mean accepted length, verify forwards."""
    opts = {"speculative_algorithm": spec} if spec else {}
    found = {}
    with Engine(str(smollm2_gguf()), dtype=args.dtype, num_threads=args.threads, max_total_tokens=4096,
                **opts) as e:
        tok = e.core.tokenizer
        params = {"max_new_tokens": args.max_new_tokens, "temperature": 0}
        for name, msgs in WORKLOADS.items():
            ids = tok.encode(tok.apply_chat_template(msgs), add_special_tokens=False)
            e.generate(input_ids=ids, sampling_params=params)  # warm-up: graphs, caches
            speeds = []
            for _ in range(args.runs):
                e.flush_cache()  # why: each run prefills the prompt again, as a fresh request would
                t = time.perf_counter()
                out = e.generate(input_ids=ids, sampling_params=params)
                speeds.append(len(out["output_ids"]) / (time.perf_counter() - t))
            m = out["meta_info"]
            found[name] = (len(out["output_ids"]), statistics.median(speeds), m.get("spec_accept_length"),
                           m.get("spec_verify_ct"))
    return found


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--dtype", default="bfloat16", choices=["bfloat16", "float32"])
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--runs", type=int, default=3)
    p.add_argument("--max-new-tokens", type=int, default=96)
    args = p.parse_args()
    torch.set_num_threads(args.threads)
    off, on = measure(None, args), measure("ngram", args)
    print("| workload | tokens off / on | tok/s off | tok/s on | speed-up | mean accepted length | verify forwards |")
    print("|---|---|---|---|---|---|---|")
    for name in WORKLOADS:
        (n_off, s_off, _, _), (n_on, s_on, accept, verifies) = off[name], on[name]
        print(f"| {name} | {n_off} / {n_on} | {s_off:.1f} | {s_on:.1f} | {s_on / s_off:.2f}x | {accept or 0:.2f} "
              f"| {verifies} |", flush=True)


if __name__ == "__main__":
    main()
