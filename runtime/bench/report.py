"""The comparison report: medians of interleaved rounds, ratios against targets, plots and a markdown page.

Input is the `compare.json` that `benchmarks/compare.py` writes; output is PNGs and `report.md` next to it.
"""

from __future__ import annotations

import statistics
from dataclasses import dataclass
from pathlib import Path
from typing import Any

METRICS = ("output_tok_s", "request_throughput", "ttft_p50", "ttft_p99", "tpot_p50", "itl_p50", "cache_hit_rate",
           "json_valid_share")


COLORS = {"sprig": "C0", "sprig-no-cache": "C1", "llama.cpp": "C2", "transformers": "C3"}  # same in every plot


@dataclass(frozen=True)
class Target:
    """A ratio the issue asks for: `system` / `baseline` on `workload` in `metric` at least `at_least`."""

    workload: str
    system: str
    baseline: str
    metric: str
    at_least: float


TARGETS = [
    Target("random", "sprig", "llama.cpp", "output_tok_s", 1.0),
    Target("shared-prefix", "sprig", "llama.cpp", "output_tok_s", 2.0),
    Target("random", "sprig", "transformers", "output_tok_s", 5.0),
    Target("shared-prefix", "sprig", "transformers", "output_tok_s", 5.0),
    Target("json-schema", "sprig", "transformers", "request_throughput", 5.0),
]


def flat_metrics(summary: dict[str, Any]) -> dict[str, float | None]:
    """The figures the report compares, from a BenchSummary dict."""
    return {"output_tok_s": summary["output_tok_s"], "request_throughput": summary["request_throughput"],
            "ttft_p50": summary["ttft_ms"]["p50"], "ttft_p99": summary["ttft_ms"]["p99"],
            "tpot_p50": summary["tpot_ms"]["p50"], "itl_p50": summary["itl_ms"]["p50"],
            "cache_hit_rate": summary["cache_hit_rate"], "json_valid_share": summary["json_valid_share"]}


def medians(data: dict[str, Any]) -> dict[str, dict[str, dict[str, float | None]]]:
    """workload → system → metric → median over rounds (None where the system reports nothing)."""
    grouped: dict[str, dict[str, list[dict[str, float | None]]]] = {}
    for run in data["runs"]:
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


def profile_medians(data: dict[str, Any], system: str = "sprig") -> dict[str, dict[str, float]]:
    """workload → median step profile of a sprig system: model vs other ms per step, tokens per step, decode
    batch, and the share of the run's wall time the engine spent in steps (the rest: HTTP, queueing, idle)."""
    keys = ("model_ms_per_step", "other_ms_per_step", "tokens_per_step", "avg_decode_batch", "busy_share")
    out: dict[str, dict[str, float]] = {}
    for wl in dict.fromkeys(r["workload"] for r in data["runs"]):
        rows = [{**r["profile"], "busy_share": r["profile"]["step_time_s"] / r["summary"]["duration_s"]}
                for r in data["runs"] if r["workload"] == wl and r["system"] == system and r["profile"]]
        if rows:
            out[wl] = {k: statistics.median(float(r.get(k) or 0) for r in rows) for k in keys}
    return out


def ratio(med: dict[str, dict[str, dict[str, float | None]]], t: Target) -> float | None:
    """The measured ratio of a target (None when either side was not measured)."""
    a = med.get(t.workload, {}).get(t.system, {}).get(t.metric)
    b = med.get(t.workload, {}).get(t.baseline, {}).get(t.metric)
    return a / b if a and b else None


def _plt() -> Any:
    import matplotlib

    matplotlib.use("Agg")  # files only, no display
    import matplotlib.pyplot as plt

    return plt


def plot_throughput_vs_rate(data: dict[str, Any], path: Path) -> bool:
    """Output tokens/s against offered request rate, one line per system (from the rate sweep)."""
    sweep = data.get("sweep") or []
    if not sweep:
        return False
    plt = _plt()
    fig, ax = plt.subplots(figsize=(5.5, 3.6), dpi=90)
    for system in sorted({r["system"] for r in sweep}):
        rows = sorted((r["rate"], r["summary"]["output_tok_s"]) for r in sweep if r["system"] == system)
        ax.plot([x for x, _ in rows], [y for _, y in rows], marker="o", label=system, color=COLORS.get(system))
    ax.set_xlabel("request rate (req/s, Poisson)")
    ax.set_ylabel("output tokens/s")
    ax.set_title(f"{sweep[0]['workload']}: throughput vs request rate")
    ax.grid(alpha=0.3)
    ax.legend()
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)
    return True


def plot_cdfs(data: dict[str, Any], metric: str, path: Path) -> bool:
    """CDF of a per-request latency (`ttft` or `tpot`, ms), one panel per workload, pooled over rounds."""
    workloads = list(dict.fromkeys(r["workload"] for r in data["runs"]))
    if not workloads:
        return False
    plt = _plt()
    fig, axes = plt.subplots(1, len(workloads), figsize=(4.2 * len(workloads), 3.4), dpi=90, squeeze=False)
    for ax, wl in zip(axes[0], workloads, strict=True):
        for system in list(dict.fromkeys(r["system"] for r in data["runs"] if r["workload"] == wl)):
            values = sorted(1e3 * v for r in data["runs"] if r["workload"] == wl and r["system"] == system
                            for v in r["requests"][metric] if v is not None)
            if values:
                ax.plot(values, [(i + 1) / len(values) for i in range(len(values))], label=system,
                        color=COLORS.get(system))
        ax.set_xscale("log")
        ax.xaxis.set_minor_formatter(plt.NullFormatter())  # minor labels collide on short log ranges
        ax.set_title(wl)
        ax.set_xlabel(f"{metric.upper()} (ms, log scale)")
        ax.grid(alpha=0.3)
    axes[0][0].set_ylabel("fraction of requests")
    axes[0][-1].legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)
    return True


def plot_cache_hits(data: dict[str, Any], path: Path, workload: str = "shared-prefix") -> bool:
    """Cumulative prompt-cache hit rate (cached / prompt tokens of finished requests) over time, first round."""
    runs = [r for r in data["runs"] if r["workload"] == workload and r["round"] == 0]
    if not runs:
        return False
    plt = _plt()
    fig, ax = plt.subplots(figsize=(5.5, 3.6), dpi=90)
    for run in runs:
        cols = run["requests"]
        reqs = sorted((end, c, p) for end, c, p in zip(cols["end"], cols["cached_tokens"], cols["prompt_tokens"],
                                                       strict=True) if c is not None)
        if not reqs:
            continue
        cached = prompt = 0
        xs, ys = [], []
        for end, c, p in reqs:
            cached += c
            prompt += p
            xs.append(end)
            ys.append(cached / prompt)
        ax.plot(xs, ys, label=run["system"], drawstyle="steps-post", color=COLORS.get(run["system"]))
    ax.set_ylim(-0.02, 1.02)
    ax.set_xlabel("time since the run started (s), at each request's finish")
    ax.set_ylabel("cumulative cache hit rate")
    ax.set_title(f"{workload}: prompt tokens served from cache")
    ax.grid(alpha=0.3)
    ax.legend()
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)
    return True


def render(data: dict[str, Any], out_dir: Path) -> Path:
    """Write the plots and report.md into out_dir; returns the report path."""
    out_dir.mkdir(parents=True, exist_ok=True)
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


def markdown(data: dict[str, Any], figures: list[tuple[str, str]]) -> str:
    """The report page: setup, medians per workload, targets, step profile, figures."""
    med = medians(data)
    s = data["setup"]
    lines = [f"# sprig comparison ({data['started']})", "",
             f"Machine: {data['machine']}. Checkpoint `{s['model']}` in {s['dtype']}, {s['threads']} threads per "
             f"system, {s['num_prompts']} requests per run, concurrency {s['concurrency']}, input {s['input_len']} "
             f"tokens (shared-prefix: + {s['prefix_len']}-token prefix, {s['num_groups']} groups), output "
             f"{s['output_len']} tokens{_lengths(s)}. Medians of {s['rounds']} interleaved rounds (each round sends fresh "
             f"prompts to every system, in alternating order). transformers runs the first "
             f"{s.get('baseline_prompts', s['num_prompts'])} requests of each round in static batches of "
             f"{s['concurrency']}.", "",
             f"Load average (1/5/15 min) before: {data['load_before']}, after: {data['load_after']}.", ""]
    for name, why in (data.get("skipped") or {}).items():
        lines.append(f"- **{name} skipped:** {why}")
    lines += ["", "## Results (medians)", "",
              "| workload | system | out tok/s | req/s | TTFT p50 ms | TTFT p99 ms | TPOT p50 ms | ITL p50 ms "
              "| cache hit | JSON valid |", "|---|---|---|---|---|---|---|---|---|---|"]
    for wl, systems in med.items():
        for sysname, m in systems.items():
            lines.append(f"| {wl} | {sysname} | {_fmt(m['output_tok_s'])} | {_fmt(m['request_throughput'], '{:.2f}')} "
                         f"| {_fmt(m['ttft_p50'])} | {_fmt(m['ttft_p99'])} | {_fmt(m['tpot_p50'])} "
                         f"| {_fmt(m['itl_p50'])} | {_fmt(m['cache_hit_rate'], '{:.0%}')} "
                         f"| {_fmt(m['json_valid_share'], '{:.0%}')} |")
    lines += ["", "## Targets", "", "| workload | ratio | metric | measured | target | status |", "|---|---|---|---|---|---|"]
    for t in TARGETS:
        r = ratio(med, t)
        status = "not measured" if r is None else ("met" if r >= t.at_least else f"missed by {t.at_least / r:.2f}x")
        lines.append(f"| {t.workload} | {t.system} / {t.baseline} | {t.metric} | {_fmt(r, '{:.2f}x')} "
                     f"| ≥ {t.at_least:g}x | {status} |")
    extra = [(wl, ratio(med, Target(wl, "sprig", "sprig-no-cache", "output_tok_s", 0))) for wl in med]
    lines += ["", "Radix cache on / off (output tok/s): "
              + ", ".join(f"{wl} {_fmt(r, '{:.2f}x')}" for wl, r in extra if r is not None), ""]
    lines += _profile_lines(data)
    for title, name in figures:
        lines += [f"## {title}", "", f"![{title}]({name})", ""]
    lines += [*data.get("notes", []), ""]
    return "\n".join(lines)


def _profile_lines(data: dict[str, Any]) -> list[str]:
    lines = ["## Where sprig's time goes (engine step profile, medians)", "",
             "| system | workload | model ms/step | other ms/step | output tokens/step | avg decode batch "
             "| engine busy |", "|---|---|---|---|---|---|---|"]
    rows = 0
    for system in ("sprig", "sprig-no-cache"):
        for wl, p in profile_medians(data, system).items():
            rows += 1
            lines.append(f"| {system} | {wl} | {p['model_ms_per_step']:.1f} | {p['other_ms_per_step']:.1f} "
                         f"| {p['tokens_per_step']:.1f} | {p['avg_decode_batch']:.1f} | {p['busy_share']:.0%} |")
    note = ("Engine busy = time inside engine steps / wall time of the run; the rest is time the engine waited "
            "for work (HTTP, streaming, the client and the server sharing the CPU).")
    return [*lines, "", note, ""] if rows else []
