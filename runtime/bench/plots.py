"""The comparison report's figures: throughput vs request rate, TTFT/TPOT CDFs, cache hit rate over time.

Each takes compare.json's data with every run and sweep point tagged with its mode (`report.render` fills in the
mode of older files); with several modes a system has one line per mode (solid: alone, dashed: alternating).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

COLORS = {"sprig": "C0", "sprig-no-cache": "C1", "llama.cpp": "C2", "transformers": "C3", "sprig-int8": "C4",
          "llama.cpp-q8_0": "C5"}  # same in every plot
LINESTYLES = {"alone": "-", "alternating": "--"}


def _plt() -> Any:
    import matplotlib

    matplotlib.use("Agg")  # files only, no display
    import matplotlib.pyplot as plt

    return plt


def _series(rows: list[dict[str, Any]]) -> list[tuple[str, str]]:
    """(mode, system) pairs in first-seen order."""
    return list(dict.fromkeys((r["mode"], r["system"]) for r in rows))


def _style(mode: str, system: str, several_modes: bool) -> dict[str, Any]:
    label = f"{system} ({mode})" if several_modes else system
    return {"label": label, "color": COLORS.get(system), "linestyle": LINESTYLES.get(mode, "-")}


def _finish(plt: Any, fig: Any, ax: Any, labels: tuple[str, str, str], path: Path) -> bool:
    """Axis labels and title, grid, legend; save and close."""
    ax.set_xlabel(labels[0])
    ax.set_ylabel(labels[1])
    ax.set_title(labels[2])
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)
    return _save(plt, fig, path)


def _save(plt: Any, fig: Any, path: Path) -> bool:
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)
    return True


def plot_throughput_vs_rate(data: dict[str, Any], path: Path) -> bool:
    """Output tokens/s against offered request rate, one line per system and mode (from the rate sweep)."""
    sweep = data.get("sweep") or []
    if not sweep:
        return False
    plt = _plt()
    fig, ax = plt.subplots(figsize=(5.5, 3.6), dpi=90)
    pairs = _series(sweep)
    several = len({m for m, _ in pairs}) > 1
    for mode, system in sorted(pairs):
        rows = sorted((r["rate"], r["summary"]["output_tok_s"]) for r in sweep
                      if r["system"] == system and r["mode"] == mode)
        ax.plot([x for x, _ in rows], [y for _, y in rows], marker="o", **_style(mode, system, several))
    labels = ("request rate (req/s, Poisson)", "output tokens/s", f"{sweep[0]['workload']}: throughput vs request rate")
    return _finish(plt, fig, ax, labels, path)


def plot_cdfs(data: dict[str, Any], metric: str, path: Path) -> bool:
    """CDF of a per-request latency (`ttft` or `tpot`, ms), one panel per workload, pooled over rounds."""
    workloads = list(dict.fromkeys(r["workload"] for r in data["runs"]))
    if not workloads:
        return False
    plt = _plt()
    several = len({r["mode"] for r in data["runs"]}) > 1
    fig, axes = plt.subplots(1, len(workloads), figsize=(4.2 * len(workloads), 3.4), dpi=90, squeeze=False)
    for ax, wl in zip(axes[0], workloads, strict=True):
        runs = [r for r in data["runs"] if r["workload"] == wl]
        for mode, system in _series(runs):
            values = sorted(1e3 * v for r in runs if r["system"] == system and r["mode"] == mode
                            for v in r["requests"][metric] if v is not None)
            if values:
                ax.plot(values, [(i + 1) / len(values) for i in range(len(values))],
                        **_style(mode, system, several))
        ax.set_xscale("log")
        ax.xaxis.set_minor_formatter(plt.NullFormatter())  # minor labels collide on short log ranges
        ax.set_title(wl)
        ax.set_xlabel(f"{metric.upper()} (ms, log scale)")
        ax.grid(alpha=0.3)
    axes[0][0].set_ylabel("fraction of requests")
    axes[0][-1].legend(fontsize=8)
    return _save(plt, fig, path)


def _cumulative_hits(cols: dict[str, list[Any]]) -> tuple[list[float], list[float]]:
    """(finish times, cumulative cached / prompt tokens) of the requests that report cached tokens."""
    reqs = sorted((end, c, p) for end, c, p in zip(cols["end"], cols["cached_tokens"], cols["prompt_tokens"],
                                                   strict=True) if c is not None)
    cached = prompt = 0
    xs, ys = [], []
    for end, c, p in reqs:
        cached += c
        prompt += p
        xs.append(end)
        ys.append(cached / prompt)
    return xs, ys


def plot_cache_hits(data: dict[str, Any], path: Path, workload: str = "shared-prefix") -> bool:
    """Cumulative prompt-cache hit rate (cached / prompt tokens of finished requests) over time, first round."""
    runs = [r for r in data["runs"] if r["workload"] == workload and r["round"] == 0]
    if not runs:
        return False
    plt = _plt()
    several = len({r["mode"] for r in runs}) > 1
    fig, ax = plt.subplots(figsize=(5.5, 3.6), dpi=90)
    for run in runs:
        xs, ys = _cumulative_hits(run["requests"])
        if xs:
            ax.plot(xs, ys, drawstyle="steps-post", **_style(run["mode"], run["system"], several))
    ax.set_ylim(-0.02, 1.02)
    labels = ("time since the run started (s), at each request's finish", "cumulative cache hit rate",
              f"{workload}: prompt tokens served from cache")
    return _finish(plt, fig, ax, labels, path)
