"""The comparison report: medians of rounds per mode (alone, alternating), ratios against targets, plots and a
markdown page.

Input is the `compare.json` that `benchmarks/compare.py` writes; output is PNGs and `report.md` next to it. Runs
of an older compare.json carry no mode: they were alternating.
"""

from __future__ import annotations

import statistics
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from sprig.runtime.bench.plots import plot_cache_hits, plot_cdfs, plot_throughput_vs_rate

METRICS = ("output_tok_s", "request_throughput", "ttft_p50", "ttft_p99", "tpot_p50", "tpot_mean", "itl_p50",
           "cache_hit_rate", "json_valid_share")
MODES = ("alone", "alternating")  # the order modes run and appear in
LEGACY_MODE = "alternating"  # runs without a mode come from compare.py before modes existed


@dataclass(frozen=True)
class Target:
    """A ratio the issue asks for: `system` / `baseline` on `workload` in `metric` at least `at_least` (None: a
    figure reported without a target). `always`: listed even when not measured."""

    workload: str
    system: str
    baseline: str
    metric: str
    at_least: float | None
    always: bool = True


TARGETS = [
    Target("random", "sprig", "llama.cpp", "output_tok_s", 1.5),
    Target("random", "sprig-int8", "llama.cpp-q8_0", "output_tok_s", None, always=False),
    Target("shared-prefix", "sprig", "llama.cpp", "output_tok_s", 3.0),
    Target("shared-prefix", "sprig-int8", "llama.cpp-q8_0", "output_tok_s", None, always=False),
    Target("batch1", "sprig", "llama.cpp", "output_tok_s", 1.0, always=False),
    Target("batch1", "sprig-int8", "llama.cpp-q8_0", "output_tok_s", None, always=False),
    Target("random", "sprig", "transformers", "output_tok_s", 5.0),
    Target("shared-prefix", "sprig", "transformers", "output_tok_s", 5.0),
    Target("json-schema", "sprig", "transformers", "request_throughput", 5.0),
]

# Issue 29's targets for one GGUF file served by both: sprig's block-quant kernels against llama.cpp on the same
# blocks, and sprig's own bf16 run (the file dequantized) reported beside them.
GGUF_TARGETS = [
    Target("batch1", "sprig", "llama.cpp", "output_tok_s", 1.2),
    Target("random", "sprig", "llama.cpp", "output_tok_s", 2.0),
    Target("shared-prefix", "sprig", "llama.cpp", "output_tok_s", 3.0),
    Target("batch1", "sprig-bf16", "llama.cpp", "output_tok_s", None, always=False),
    Target("random", "sprig-bf16", "llama.cpp", "output_tok_s", None, always=False),
    Target("shared-prefix", "sprig-bf16", "llama.cpp", "output_tok_s", None, always=False),
    Target("batch1", "sprig", "sprig-bf16", "output_tok_s", None, always=False),
    Target("random", "sprig", "sprig-bf16", "output_tok_s", None, always=False),
    Target("shared-prefix", "sprig", "sprig-bf16", "output_tok_s", None, always=False),
]


def targets_of(data: dict[str, Any]) -> list[Target]:
    """The targets of this run: GGUF_TARGETS when every system served one GGUF file, else TARGETS."""
    return GGUF_TARGETS if data["setup"].get("gguf") else TARGETS


def flat_metrics(summary: dict[str, Any]) -> dict[str, float | None]:
    """The figures the report compares, from a BenchSummary dict."""
    return {"output_tok_s": summary["output_tok_s"], "request_throughput": summary["request_throughput"],
            "ttft_p50": summary["ttft_ms"]["p50"], "ttft_p99": summary["ttft_ms"]["p99"],
            "tpot_p50": summary["tpot_ms"]["p50"], "tpot_mean": summary["tpot_ms"]["mean"],
            "itl_p50": summary["itl_ms"]["p50"], "cache_hit_rate": summary["cache_hit_rate"], "json_valid_share": summary["json_valid_share"]}


def mode_of(run: dict[str, Any]) -> str:
    return str(run.get("mode") or LEGACY_MODE)


def modes(data: dict[str, Any]) -> list[str]:
    """The modes with runs or sweep points, alone first."""
    present = {mode_of(r) for r in [*data["runs"], *(data.get("sweep") or [])]}
    return [m for m in MODES if m in present] + sorted(present - set(MODES))


def runs_of(data: dict[str, Any], mode: str | None) -> list[dict[str, Any]]:
    """The runs of a mode (None: all)."""
    return [r for r in data["runs"] if mode is None or mode_of(r) == mode]


def medians(data: dict[str, Any], mode: str | None = None) -> dict[str, dict[str, dict[str, float | None]]]:
    """workload → system → metric → median over the rounds of a mode (None where the system reports nothing)."""
    grouped: dict[str, dict[str, list[dict[str, float | None]]]] = {}
    for run in runs_of(data, mode):
        grouped.setdefault(run["workload"], {}).setdefault(run["system"], []).append(flat_metrics(run["summary"]))
    out: dict[str, dict[str, dict[str, float | None]]] = {}
    for wl, systems in grouped.items():
        out[wl] = {}
        for sysname, rows in systems.items():
            out[wl][sysname] = {m: _median([r[m] for r in rows]) for m in METRICS}
    return out


def _median(values: list[float | None]) -> float | None:
    vals = [v for v in values if v is not None and v == v]  # drop None and NaN
    return statistics.median(vals) if vals else None


def profile_medians(data: dict[str, Any], system: str = "sprig", mode: str | None = None
                    ) -> dict[str, dict[str, float]]:
    """workload → median step profile of a sprig system: model vs other ms per step, tokens per step, decode
    batch, and the share of the run's wall time the engine spent in steps (the rest: HTTP, queueing, idle)."""
    keys = ("model_ms_per_step", "other_ms_per_step", "tokens_per_step", "avg_decode_batch", "busy_share")
    out: dict[str, dict[str, float]] = {}
    runs = runs_of(data, mode)
    for wl in dict.fromkeys(r["workload"] for r in runs):
        rows = [{**r["profile"], "busy_share": r["profile"]["step_time_s"] / r["summary"]["duration_s"]}
                for r in runs if r["workload"] == wl and r["system"] == system and r["profile"]]
        if rows:
            out[wl] = {k: statistics.median(float(r.get(k) or 0) for r in rows) for k in keys}
    return out


def ratio(med: dict[str, dict[str, dict[str, float | None]]], t: Target) -> float | None:
    """The measured ratio of a target (None when either side was not measured)."""
    a = med.get(t.workload, {}).get(t.system, {}).get(t.metric)
    b = med.get(t.workload, {}).get(t.baseline, {}).get(t.metric)
    return a / b if a and b else None


def with_modes(data: dict[str, Any]) -> dict[str, Any]:
    """The data with every run and sweep point tagged with its mode (older files: alternating)."""
    def tag(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
        return [{**r, "mode": mode_of(r)} for r in rows]

    return {**data, "runs": tag(data["runs"]), "sweep": tag(data.get("sweep") or [])}


def render(data: dict[str, Any], out_dir: Path) -> Path:
    """Write the plots and report.md into out_dir; returns the report path."""
    out_dir.mkdir(parents=True, exist_ok=True)
    data = with_modes(data)
    figures: list[tuple[str, str]] = []
    for name, title, draw in (
        ("throughput_vs_rate.png", "Throughput vs request rate", lambda p: plot_throughput_vs_rate(data, p)),
        ("ttft_cdf.png", "TTFT CDF", lambda p: plot_cdfs(data, "ttft", p)),
        ("tpot_cdf.png", "TPOT CDF", lambda p: plot_cdfs(data, "tpot", p)),
        ("cache_hit_rate.png", "Cache hit rate over time", lambda p: plot_cache_hits(data, p)),
    ):
        if draw(out_dir / name):
            figures.append((title, name))
    notes = out_dir / "notes.md"  # hand-written analysis of this run, kept across re-renders
    if notes.exists():
        data = {**data, "notes": notes.read_text().splitlines()}
    path = out_dir / "report.md"
    path.write_text(markdown(data, figures))
    return path


def _lengths(setup: dict[str, Any]) -> str:
    r = setup.get("range_ratio", 1.0)
    return "" if r == 1.0 else f" (lengths drawn uniformly from [{r:g} x, 1 x] these)"


def _fmt(v: float | None, pattern: str = "{:.1f}") -> str:
    return "–" if v is None else pattern.format(v)


MODE_TEXT = {
    "alone": "each system by itself, every other system stopped: one unmeasured warm-up round per workload, then "
             "the measured rounds ({rounds}), each with fresh prompts",
    "alternating": "every system up at once; each round ({rounds} in all) sends fresh prompts to every system in turn, "
                   "in alternating order (idle servers share the cores)",
}


def markdown(data: dict[str, Any], figures: list[tuple[str, str]]) -> str:
    """The report page: machine and setup, medians per mode and workload, batch-1 decode, targets, step profile,
    figures."""
    shown = modes(data)
    lines = [f"# sprig comparison ({data['started']})", "", *_header(data, shown)]
    skipped = [f"- **{name} skipped:** {why}" for name, why in (data.get("skipped") or {}).items()]
    lines += [*skipped, ""] if skipped else []
    n = data["setup"]["rounds"]
    for mode in shown:
        lines += _results_lines(medians(data, mode), f"Results, {mode} (medians of {n} round{'s' * (n != 1)})")
    lines += _batch1_lines(data, shown)
    lines += _target_lines(data, shown)
    lines += _memory_lines(data)
    lines += _profile_lines(data, shown)
    for title, name in figures:
        lines += [f"## {title}", "", f"![{title}]({name})", ""]
    lines += [*data.get("notes", []), ""]
    return "\n".join(lines)


def _header(data: dict[str, Any], shown: list[str]) -> list[str]:
    s = data["setup"]
    batch1 = (f" batch1: {s['batch1_prompts']} requests one at a time, input {s['batch1_input_len']}, output "
              f"{s['batch1_output_len']} tokens." if "batch1_prompts" in s else "")
    kernels = _kernel_lines(data)
    lines = [f"Machine: {data['machine']}.", "", *kernels, *([""] if kernels else []),
             f"Checkpoint `{s['model']}` in {s['dtype']}, {s['threads']} threads per "
             f"system, {s['num_prompts']} requests per run, concurrency {s['concurrency']}, input {s['input_len']} "
             f"tokens (shared-prefix: + {s['prefix_len']}-token prefix, {s['num_groups']} groups), output "
             f"{s['output_len']} tokens{_lengths(s)}.{batch1} transformers runs the first "
             f"{s.get('baseline_prompts', s['num_prompts'])} requests of each round in static batches of "
             f"{s['concurrency']}.", ""]
    lines += [f"- **{m}**: {MODE_TEXT.get(m, m).format(rounds=s['rounds'])}." for m in shown]
    return [*lines, "", f"Load average (1/5/15 min) before: {data['load_before']}, after: {data['load_after']}.", ""]


def _kernel_lines(data: dict[str, Any]) -> list[str]:
    """CPU ISA flags, kernel overrides and the kernels each sprig system reported (older files have none)."""
    if "cpu" not in data:
        return []
    env = ", ".join(f"{k}={v}" for k, v in (data.get("kernel_env") or {}).items()) or "none"
    lines = [f"ISA flags: {' '.join(data['cpu']['flags']) or 'none of those checked'}. Kernel overrides in the "
             f"environment: {env}."]
    for system, facts in (data.get("kernels") or {}).items():
        lines.append(f"- {system}: " + "; ".join(f"{k}: {v}" for k, v in facts.items()))
    local = data.get("local_kernels") or {}
    if local:
        lines.append("- in the driver process: " + ", ".join(f"{k} {v}" for k, v in local.items()))
    return lines


def _results_lines(med: dict[str, dict[str, dict[str, float | None]]], title: str) -> list[str]:
    lines = [f"## {title}", "",
             "| workload | system | out tok/s | req/s | TTFT p50 ms | TTFT p99 ms | TPOT p50 ms | ITL p50 ms "
             "| cache hit | JSON valid |", "|---|---|---|---|---|---|---|---|---|---|"]
    for wl, systems in med.items():
        for sysname, m in systems.items():
            lines.append(f"| {wl} | {sysname} | {_fmt(m['output_tok_s'])} | {_fmt(m['request_throughput'], '{:.2f}')} "
                         f"| {_fmt(m['ttft_p50'])} | {_fmt(m['ttft_p99'])} | {_fmt(m['tpot_p50'])} "
                         f"| {_fmt(m['itl_p50'])} | {_fmt(m['cache_hit_rate'], '{:.0%}')} "
                         f"| {_fmt(m['json_valid_share'], '{:.0%}')} |")
    return [*lines, ""]


def _batch1_lines(data: dict[str, Any], shown: list[str]) -> list[str]:
    """Batch-1 decode: output tok/s and mean TPOT per system, a column pair per mode."""
    per_mode = {m: medians(data, m).get("batch1", {}) for m in shown}
    systems = list(dict.fromkeys(sysname for rows in per_mode.values() for sysname in rows))
    if not systems:
        return []
    head = " | ".join(f"{m} out tok/s | {m} mean TPOT ms" for m in shown)
    lines = ["## Batch-1 decode (one request at a time, medians)", "", f"| system | {head} |",
             "|---|" + "---|---|" * len(shown)]
    for sysname in systems:
        cells = " | ".join(f"{_fmt(per_mode[m].get(sysname, {}).get('output_tok_s'))} "
                           f"| {_fmt(per_mode[m].get(sysname, {}).get('tpot_mean'))}" for m in shown)
        lines.append(f"| {sysname} | {cells} |")
    return [*lines, ""]


def verdict(r: float | None, t: Target) -> str:
    """met / missed by / not measured / reported (no target)."""
    if r is None:
        return "not measured"
    if t.at_least is None:
        return "reported (no target)"
    return "met" if r >= t.at_least else f"missed by {t.at_least / r:.2f}x"


def _target_lines(data: dict[str, Any], shown: list[str]) -> list[str]:
    meds = {m: medians(data, m) for m in shown}
    lines = ["## Targets", "", f"| workload | ratio | metric | {' | '.join(shown)} | target | status |",
             "|---|---|---|" + "---|" * len(shown) + "---|---|"]
    for t in targets_of(data):
        rs = {m: ratio(meds[m], t) for m in shown}
        if not t.always and all(r is None for r in rs.values()):
            continue
        verdicts = {m: verdict(r, t) for m, r in rs.items()}
        same = len(set(verdicts.values())) == 1
        status = next(iter(verdicts.values())) if same else "; ".join(f"{m}: {v}" for m, v in verdicts.items())
        goal = "–" if t.at_least is None else f"≥ {t.at_least:g}x"
        lines.append(f"| {t.workload} | {t.system} / {t.baseline} | {t.metric} | "
                     f"{' | '.join(_fmt(r, '{:.2f}x') for r in rs.values())} | {goal} | {status} |")
    for mode in shown:
        med = meds[mode]
        extra = [(wl, ratio(med, Target(wl, "sprig", "sprig-no-cache", "output_tok_s", 0))) for wl in med]
        pairs = ", ".join(f"{wl} {_fmt(r, '{:.2f}x')}" for wl, r in extra if r is not None)
        if pairs:
            lines += ["", f"Radix cache on / off (output tok/s, {mode}): {pairs}"]
    return [*lines, ""]


def _memory_lines(data: dict[str, Any]) -> list[str]:
    """Each server process's resident memory, the largest seen after any of its runs (older files have none)."""
    memory = data.get("memory") or {}
    if not memory:
        return []
    lines = ["## Resident memory (server process, largest seen after a run)", "", "| system | RSS MiB | peak MiB |",
             "|---|---|---|"]
    lines += [f"| {name} | {m['rss_mib']:.0f} | {m['peak_mib']:.0f} |" for name, m in memory.items()]
    return [*lines, ""]


def _profile_lines(data: dict[str, Any], shown: list[str]) -> list[str]:
    lines = ["## Where sprig's time goes (engine step profile, medians)", "",
             "| system | workload | model ms/step | other ms/step | output tokens/step | avg decode batch "
             "| engine busy |", "|---|---|---|---|---|---|---|"]
    rows = 0
    for mode in shown:
        for system in ("sprig", "sprig-no-cache", "sprig-int8"):
            label = f"{system} ({mode})" if len(shown) > 1 else system
            for wl, p in profile_medians(data, system, mode).items():
                rows += 1
                lines.append(f"| {label} | {wl} | {p['model_ms_per_step']:.1f} | {p['other_ms_per_step']:.1f} "
                             f"| {p['tokens_per_step']:.1f} | {p['avg_decode_batch']:.1f} | {p['busy_share']:.0%} |")
    note = ("Engine busy = time inside engine steps / wall time of the run; the rest is time the engine waited "
            "for work (HTTP, streaming, the client and the server sharing the CPU).")
    return [*lines, "", note, ""] if rows else []
