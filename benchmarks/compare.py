"""One workload, several systems, one run: sprig vs llama.cpp's llama-server vs transformers, radix cache on/off.

    python benchmarks/compare.py                      # the full report in benchmarks/report/ (see README.md)
    python benchmarks/compare.py --workloads random --systems sprig llama.cpp --rounds 1 --num-prompts 16
    python benchmarks/compare.py --report-only        # redraw plots and report.md from compare.json

Each round builds fresh prompts (seed + round) and runs them on every system in turn, alternating the order from
round to round, so slow drifts in machine load hit every system alike. Servers stay up, idle, between runs.
Systems that cannot run here (llama-server not installed) are skipped with the reason in the report.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import sys
import time
from dataclasses import replace
from pathlib import Path
from typing import Any

from sprig.runtime.bench.cli import BenchResult
from sprig.runtime.bench.client import Arrival, LoadSpec
from sprig.runtime.bench.datasets import DatasetKind, WorkloadSpec, build_workload
from sprig.runtime.bench.metrics import format_summary, load_average
from sprig.runtime.bench.report import TARGETS, medians, ratio, render
from sprig.runtime.bench.systems import Setup, System, SystemKind, SystemUnavailable, make_system
from sprig.runtime.model.tokenizer import Tokenizer

DEFAULT_SYSTEMS = [SystemKind.SPRIG, SystemKind.SPRIG_NO_CACHE, SystemKind.LLAMA_CPP, SystemKind.TRANSFORMERS]
DEFAULT_WORKLOADS = [DatasetKind.RANDOM, DatasetKind.SHARED_PREFIX, DatasetKind.JSON_SCHEMA]


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--model", default="llama-100m", help="sprig recipe name or HF checkpoint folder")
    p.add_argument("--dtype", default="bfloat16", choices=["bfloat16", "float16", "float32"])
    p.add_argument("--threads", type=int, default=2, help="CPU threads for every system")
    p.add_argument("--systems", nargs="+", type=SystemKind, default=DEFAULT_SYSTEMS,
                   choices=[k.value for k in SystemKind])
    p.add_argument("--workloads", nargs="+", type=DatasetKind, default=DEFAULT_WORKLOADS,
                   choices=[k.value for k in DatasetKind if k is not DatasetKind.FILE])
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--num-prompts", type=int, default=32)
    p.add_argument("--max-concurrency", type=int, default=16)
    p.add_argument("--input-len", type=int, default=128)
    p.add_argument("--output-len", type=int, default=64)
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


def machine() -> str:
    """CPU model, cores and memory in one line."""
    cpu = platform.processor() or platform.machine()
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
        mem = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") / 2**30
    except (OSError, ValueError):
        mem = float("nan")
    return f"{cpu}, {os.cpu_count()} cores, {mem:.0f} GiB RAM, {platform.system()} {platform.release()}"


def model_dir(name: str) -> Path:
    from sprig.runtime.model.checkpoints import RECIPES, checkpoint_path

    return checkpoint_path(name) if name in RECIPES else Path(name)


def workload_spec(args: argparse.Namespace, kind: DatasetKind, seed: int) -> WorkloadSpec:
    return WorkloadSpec(kind=kind, num_prompts=args.num_prompts, input_len=args.input_len,
                        output_len=args.output_len, range_ratio=args.range_ratio, seed=seed,
                        prefix_len=args.prefix_len,
                        num_groups=args.num_groups, num_turns=args.num_turns)


def ctx_per_slot(args: argparse.Namespace) -> int:
    """Context each llama-server slot needs: the longest prompt plus output plus template slack."""
    longest = max(args.prefix_len + args.input_len, args.num_turns * (args.input_len + args.output_len) + 64)
    need = longest + args.output_len + 64
    return -(-need // 256) * 256


def start_systems(kinds: list[SystemKind], setup: Setup, skipped: dict[str, str]) -> list[System]:
    """Build and start every system that can run here; the others go to `skipped` with the reason."""
    systems: list[System] = []
    for i, kind in enumerate(kinds):
        try:
            system = make_system(kind, setup, i)
            print(f"starting {kind.value} ...", file=sys.stderr, flush=True)
            system.start()
            systems.append(system)
        except SystemUnavailable as e:
            skipped[kind.value] = str(e)
            print(f"skipping {kind.value}: {e}", file=sys.stderr, flush=True)
    return systems


def compact(result: BenchResult) -> dict[str, list[Any]]:
    """Per-request figures the plots need, column by column (small JSON: no texts, no chunk times)."""
    recs = [r for r in result.records if r.ok]

    def col(values: list[float | None], digits: int = 4) -> list[float | None]:
        return [None if v is None else round(v, digits) for v in values]

    return {"end": col([r.end for r in recs], 3), "ttft": col([r.ttft for r in recs]),
            "tpot": col([r.tpot for r in recs], 5), "prompt_tokens": [r.prompt_tokens for r in recs],
            "cached_tokens": [r.cached_tokens for r in recs]}


def run_rounds(args: argparse.Namespace, systems: list[System], tok: Tokenizer, data: dict[str, Any]) -> None:
    """Interleaved rounds: every workload, every system, order reversed on odd rounds."""
    load = LoadSpec(max_concurrency=args.max_concurrency)
    for kind in args.workloads:
        for rnd in range(args.rounds):
            spec = workload_spec(args, kind, args.seed + rnd)
            sessions = build_workload(spec, tok)
            for system in systems if rnd % 2 == 0 else systems[::-1]:
                mine = sessions[: args.baseline_prompts] if system.name == SystemKind.TRANSFORMERS.value else sessions
                try:
                    result = system.run(spec, mine, load, tok)
                except SystemUnavailable as e:
                    data["skipped"][f"{system.name} on {kind.value}"] = str(e)
                    continue
                print(format_summary(result.summary), flush=True)
                data["runs"].append({"workload": kind.value, "round": rnd, "system": system.name,
                                     "summary": result.summary.to_dict(), "profile": result.engine_stats,
                                     "requests": compact(result)})


def run_sweep(args: argparse.Namespace, systems: list[System], tok: Tokenizer, data: dict[str, Any]) -> None:
    """Throughput at each offered request rate on `random` (HTTP systems only: static batches have no rate)."""
    served = [s for s in systems if s.name != SystemKind.TRANSFORMERS.value]
    for i, rate in enumerate(args.sweep_rates):
        spec = workload_spec(args, DatasetKind.RANDOM, args.seed + 100 + i)
        sessions = build_workload(spec, tok)
        load = LoadSpec(rate, Arrival.POISSON, args.max_concurrency, args.seed)
        for system in served if i % 2 == 0 else served[::-1]:
            result = system.run(spec, sessions, load, tok)
            print(f"sweep {system.name} @ {rate:g} req/s: {result.summary.output_tok_s:.1f} output tok/s",
                  flush=True)
            data["sweep"].append({"workload": "random", "rate": rate, "system": system.name,
                                  "summary": result.summary.to_dict()})


def print_ratios(data: dict[str, Any]) -> None:
    med = medians(data)
    for t in TARGETS:
        r = ratio(med, t)
        if r is not None:
            verdict = "met" if r >= t.at_least else "MISSED"
            print(f"{t.workload:>14}: {t.system} / {t.baseline} = {r:.2f}x ({t.metric}; target {t.at_least:g}x, "
                  f"{verdict})")


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
        "started": time.strftime("%Y-%m-%d %H:%M"), "machine": machine(), "load_before": load_average(),
        "setup": {"model": args.model, "dtype": args.dtype, "threads": args.threads, "rounds": args.rounds,
                  "num_prompts": args.num_prompts, "concurrency": args.max_concurrency, "input_len": args.input_len,
                  "output_len": args.output_len, "prefix_len": args.prefix_len, "num_groups": args.num_groups,
                  "baseline_prompts": args.baseline_prompts, "range_ratio": args.range_ratio,
                  "llama_args": args.llama_args},
        "skipped": {}, "runs": [], "sweep": [], "commands": {},
    }
    tok = Tokenizer(path)
    systems = start_systems(list(args.systems), replace(setup), data["skipped"])
    data["commands"] = {s.name: getattr(s, "command", None) for s in systems}
    try:
        run_rounds(args, systems, tok, data)
        if args.sweep_rates:
            run_sweep(args, systems, tok, data)
    finally:
        for system in systems:
            system.stop()
    data["load_after"] = load_average()
    out_dir.mkdir(parents=True, exist_ok=True)
    (out_dir / "compare.json").write_text(json.dumps(data, separators=(",", ":")))  # compact: it is committed
    print_ratios(data)
    print(f"report: {render(data, out_dir)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
