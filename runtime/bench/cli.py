"""`sprig bench serve` (any OpenAI-compatible server) and `sprig bench offline` (`sprig.Engine` in-process).

    sprig bench serve --base-url http://127.0.0.1:30000 --dataset shared-prefix --num-prompts 64 \
        --max-concurrency 16 --tokenizer llama-100m --output results/bench.json
    sprig bench offline --model llama-100m --dtype bfloat16 --num-threads 2 --dataset random --num-prompts 64

Both print a table and, with `--output`, write the summary, the options and every request's record as JSON.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import math
import sys
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from sprig.runtime.bench.client import Arrival, Backend, Driver, LoadSpec, OpenAIBackend
from sprig.runtime.bench.datasets import (
    DatasetKind,
    Session,
    WorkloadSpec,
    build_workload,
    load_tokenizer,
    parse_dataset,
)
from sprig.runtime.bench.metrics import BenchSummary, RequestRecord, format_summary, summarize
from sprig.runtime.model.tokenizer import Tokenizer


@dataclass(frozen=True)
class BenchResult:
    """One run: its summary, the options that produced it, the records and (in-process) engine stats."""

    summary: BenchSummary
    options: dict[str, Any]
    records: list[RequestRecord]
    engine_stats: dict[str, Any] | None = None

    def to_dict(self, with_text: bool = False) -> dict[str, Any]:
        return {"summary": self.summary.to_dict(), "options": self.options, "engine_stats": self.engine_stats,
                "records": [r.to_dict(with_text) for r in self.records]}

    def save(self, path: str | Path, with_text: bool = False) -> None:
        """Write the result as JSON (folders created)."""
        path = Path(path)
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(self.to_dict(with_text), indent=1, default=str))


def add_workload_args(p: argparse.ArgumentParser) -> None:
    """Workload and load flags shared by every benchmark command."""
    d, load = WorkloadSpec(), LoadSpec()
    p.add_argument("--dataset", default="random",
                   help="random | batch1 (one request at a time) | shared-prefix | multi-turn | json-schema | "
                        "path/to/file.jsonl")
    p.add_argument("--num-prompts", type=int, default=d.num_prompts, help="sessions (conversations for multi-turn)")
    p.add_argument("--input-len", type=int, default=d.input_len, help="prompt tokens (shared-prefix: the suffix)")
    p.add_argument("--output-len", type=int, default=d.output_len, help="max output tokens per request")
    p.add_argument("--range-ratio", type=float, default=d.range_ratio,
                   help="draw lengths uniformly from [ratio * len, len] (1: fixed lengths)")
    p.add_argument("--prefix-len", type=int, default=d.prefix_len, help="shared-prefix: tokens shared per group")
    p.add_argument("--num-groups", type=int, default=d.num_groups, help="shared-prefix: distinct prefixes")
    p.add_argument("--num-turns", type=int, default=d.num_turns, help="multi-turn: turns per conversation")
    p.add_argument("--seed", type=int, default=d.seed, help="seed of the dataset sampling and arrival times")
    p.add_argument("--request-rate", type=float, default=load.request_rate,
                   help="sessions per second (default inf: all at once)")
    p.add_argument("--arrival", type=Arrival, choices=[a.value for a in Arrival], default=load.arrival,
                   help="arrival process at a finite rate")
    p.add_argument("--max-concurrency", type=int, default=None,
                   help="bound on requests in flight (default: no bound)")
    p.add_argument("--output", default=None, help="write the result JSON here")
    p.add_argument("--save-text", action="store_true", help="keep every output text in the JSON")
    p.add_argument("--label", default=None,
                   help="name of the system in the table and JSON (default: the model id; offline: "
                        "'sprig (offline)')")
    p.add_argument("--disable-progress", action="store_true", help="no progress bar")


def register(subparsers: argparse._SubParsersAction) -> None:
    """Add `bench serve` and `bench offline` to the `sprig` CLI."""
    from sprig.runtime.config import add_engine_args

    bench = subparsers.add_parser("bench", help="benchmark a server or the engine")
    sub = bench.add_subparsers(dest="bench_command", required=True)
    serve = sub.add_parser("serve", help="benchmark any OpenAI-compatible server over HTTP")
    serve.add_argument("--base-url", required=True, help="e.g. http://127.0.0.1:30000 (with or without /v1)")
    serve.add_argument("--model", default=None, help="the `model` field (default: the first of /v1/models)")
    serve.add_argument("--api-key", default=None, help="bearer key sent to the server")
    serve.add_argument("--tokenizer", default=None,
                       help="checkpoint folder or sprig recipe name for prompts and counts "
                            "(default: the tokenizer path the server reports)")
    serve.add_argument("--extra-body", default=None, help="JSON object merged into every request body")
    serve.add_argument("--warmup", type=int, default=1, help="unmeasured requests sent first")
    add_workload_args(serve)
    serve.set_defaults(func=cmd_serve)
    offline = sub.add_parser("offline", help="benchmark sprig.Engine in-process with the same workloads")
    add_engine_args(offline)
    offline.add_argument("--warmup", type=int, default=1, help="unmeasured requests sent first")
    offline.add_argument("--torch-profile", action="store_true",
                         help="profile the engine thread during the run and print the top torch ops")
    add_workload_args(offline)
    offline.set_defaults(func=cmd_offline)


def workload_of(args: argparse.Namespace) -> WorkloadSpec:
    """The workload spec the flags describe."""
    kind, path = parse_dataset(args.dataset)
    spec = WorkloadSpec(kind=kind, num_prompts=args.num_prompts, input_len=args.input_len,
                        output_len=args.output_len, range_ratio=args.range_ratio, seed=args.seed,
                        prefix_len=args.prefix_len, num_groups=args.num_groups, num_turns=args.num_turns, path=path)
    spec.validate()
    return spec


def load_of(args: argparse.Namespace) -> LoadSpec:
    """The offered load the flags describe."""
    if not args.request_rate > 0:
        raise ValueError("--request-rate must be positive")
    if args.max_concurrency is not None and args.max_concurrency < 1:
        raise ValueError("--max-concurrency must be positive")
    forced = parse_dataset(args.dataset)[0].max_concurrency
    return LoadSpec(args.request_rate, args.arrival, forced or args.max_concurrency, args.seed)


def dataset_name(spec: WorkloadSpec) -> str:
    return spec.path if spec.kind is DatasetKind.FILE and spec.path else spec.kind.value


def warmup_sessions(spec: WorkloadSpec, tok: Tokenizer, count: int) -> list[Session]:
    """A few short requests unlike the workload's prompts (no prefix they could warm)."""
    warm = WorkloadSpec(kind=DatasetKind.RANDOM, num_prompts=max(count, 1), input_len=16, output_len=4,
                        seed=spec.seed + 10_000)
    return build_workload(warm, tok)[:count]


async def run_workload(backend: Backend, sessions: list[Session], load: LoadSpec, tok: Tokenizer | None,
                       progress: bool, desc: str, warmup: list[Session] | None = None) -> list[RequestRecord]:
    """Warm up, then drive the sessions; returns the measured records."""
    if warmup:
        await Driver(backend, LoadSpec(), tok, progress=False).run(warmup)
    return await Driver(backend, load, tok, progress=progress, desc=desc).run(sessions)


def options_of(args: argparse.Namespace) -> dict[str, Any]:
    """The command's options as JSON-friendly values."""
    out: dict[str, Any] = {}
    for k, v in vars(args).items():
        if k == "func" or callable(v):
            continue
        out[k] = v.value if hasattr(v, "value") else (None if isinstance(v, float) and math.isinf(v) else v)
    return out


async def _serve_async(args: argparse.Namespace) -> BenchResult:
    spec, load = workload_of(args), load_of(args)
    extra = json.loads(args.extra_body) if args.extra_body else None
    if extra is not None and not isinstance(extra, dict):
        raise ValueError("--extra-body must be a JSON object")
    backend = OpenAIBackend(args.base_url, args.model, args.api_key, extra)
    try:
        model = await backend.resolve_model()
        tok = load_tokenizer(args.tokenizer or await _server_tokenizer(backend))
        sessions = build_workload(spec, tok)
        records = await run_workload(backend, sessions, load, tok, not args.disable_progress, args.label or model,
                                     warmup_sessions(spec, tok, args.warmup))
    finally:
        await backend.aclose()
    summary = summarize(records, args.label or model, dataset_name(spec), load.request_rate, load.max_concurrency)
    return BenchResult(summary, {**options_of(args), "workload": _jsonable(asdict(spec))}, records)


async def _server_tokenizer(backend: OpenAIBackend) -> str:
    """The tokenizer folder a sprig or SGLang server reports, else the model id if it is a local folder."""
    try:
        resp = await backend.client.get("/get_model_info")
        if resp.status_code == 200:
            path = resp.json().get("tokenizer_path")
            if path and Path(path, "tokenizer.json").exists():
                return str(path)
    except Exception:  # noqa: BLE001 - any server may lack the route; fall through
        pass
    if backend.model and Path(backend.model, "tokenizer.json").exists():
        return backend.model
    raise ValueError("the server does not say where its tokenizer is: pass --tokenizer (a checkpoint folder "
                     "or a sprig recipe name)")


def cmd_serve(args: argparse.Namespace) -> int:
    """`sprig bench serve`."""
    result = asyncio.run(_serve_async(args))
    _finish(result, args)
    return 0


def cmd_offline(args: argparse.Namespace) -> int:
    """`sprig bench offline`."""
    from sprig.runtime.bench.offline import EngineBackend
    from sprig.runtime.config import config_from_args
    from sprig.runtime.engine.engine import Engine

    spec, load = workload_of(args), load_of(args)
    cfg = config_from_args(args)
    path = _model_path(cfg.model_path)
    options = {k: v for k, v in vars(cfg).items() if k != "model_path"}
    with Engine(path, **options) as engine:
        sessions = build_workload(spec, engine.tokenizer)
        warm = warmup_sessions(spec, engine.tokenizer, args.warmup)
        profiler = _start_op_profile(engine) if args.torch_profile else None
        before = engine.stats()
        records = asyncio.run(run_workload(EngineBackend(engine), sessions, load, engine.tokenizer,
                                           not args.disable_progress, args.label or "sprig offline", warm))
        stats = step_profile(before, engine.stats())
        if profiler is not None:
            stats["top_ops"] = _stop_op_profile(engine, profiler)
    summary = summarize(records, args.label or "sprig (offline)", dataset_name(spec), load.request_rate,
                        load.max_concurrency)
    result = BenchResult(summary, {**options_of(args), "workload": _jsonable(asdict(spec))}, records, stats)
    _finish(result, args)
    return 0


def _start_op_profile(engine: Any) -> Any:
    """A torch profiler running on the engine's loop thread (torch records ops of the thread that enabled it)."""
    from torch.profiler import ProfilerActivity, profile

    prof = profile(activities=[ProfilerActivity.CPU])
    engine._call(prof.__enter__)  # noqa: SLF001 - the loop thread is only reachable through the engine
    return prof


def _stop_op_profile(engine: Any, prof: Any, top: int = 12) -> list[dict[str, Any]]:
    """Stop the profiler; the top ops by self CPU time with their share of the total."""
    engine._call(lambda: prof.__exit__(None, None, None))  # noqa: SLF001 - see _start_op_profile
    events = sorted(prof.key_averages(), key=lambda e: e.self_cpu_time_total, reverse=True)
    total = sum(e.self_cpu_time_total for e in events) or 1.0
    return [{"op": e.key, "self_s": e.self_cpu_time_total / 1e6, "share": e.self_cpu_time_total / total,
             "calls": e.count} for e in events[:top]]


def _model_path(name: str | None) -> str | None:
    """A sprig recipe name (`llama-100m`) becomes its built checkpoint folder."""
    from sprig.runtime.model.checkpoints import RECIPES, checkpoint_path

    return str(checkpoint_path(name)) if name in RECIPES else name


def step_profile(before: dict[str, Any], after: dict[str, Any]) -> dict[str, Any]:
    """Where the engine's time went between two `Engine.stats()` snapshots (warm-up included in `before`)."""
    keys = ("model_time_s", "step_time_s", "steps", "generated_tokens", "computed_tokens", "cached_tokens",
            "prompt_tokens", "num_preemptions")
    delta = {k: after.get(k, 0) - before.get(k, 0) for k in keys}
    steps = max(delta["steps"], 1)
    delta["model_ms_per_step"] = 1e3 * delta["model_time_s"] / steps
    delta["other_ms_per_step"] = 1e3 * (delta["step_time_s"] - delta["model_time_s"]) / steps
    delta["tokens_per_step"] = delta["generated_tokens"] / steps
    delta["avg_decode_batch"] = after.get("avg_decode_batch")  # cumulative over the engine's life
    return delta


def format_profile(p: dict[str, Any]) -> str:
    """One line: model time vs the rest of each engine step."""
    share = p["model_time_s"] / p["step_time_s"] if p["step_time_s"] else 0.0
    return (f"step profile: {p['steps']} steps, model {p['model_ms_per_step']:.1f} ms/step + other "
            f"{p['other_ms_per_step']:.1f} ms/step (model share {share:.0%}), {p['tokens_per_step']:.1f} output "
            f"tokens/step, avg decode batch {p['avg_decode_batch'] or 0:.1f}")


def _finish(result: BenchResult, args: argparse.Namespace) -> None:
    print(format_summary(result.summary))
    if result.engine_stats:
        print(format_profile(result.engine_stats))
        for op in result.engine_stats.get("top_ops", []):
            print(f"  {op['op']:<50} {1e3 * op['self_s']:9.1f} ms {op['share']:6.1%} {op['calls']:>7} calls")
    if args.output:
        result.save(args.output, args.save_text)
        print(f"saved {args.output}", file=sys.stderr)


def _jsonable(d: dict[str, Any]) -> dict[str, Any]:
    return {k: (v.value if hasattr(v, "value") else v) for k, v in d.items()}
