"""Benchmark metrics: per-request records, their summary (throughput, TTFT, TPOT, ITL percentiles, cache hits,
JSON validity) and the printed table.

Definitions (the ones SGLang's and vLLM's serving benchmarks use):
TTFT = first content chunk - request sent; TPOT = (latency - TTFT) / (output tokens - 1);
ITL = gaps between consecutive content chunks (a chunk holding several tokens is one gap);
throughputs divide totals by the wall time from the first request sent to the last one finished.
"""

from __future__ import annotations

import json
import os
from dataclasses import asdict, dataclass, field
from typing import Any

import numpy as np


@dataclass
class RequestRecord:
    """What one request did; times are seconds since the benchmark started."""

    session: int
    turn: int
    start: float
    end: float = 0.0
    ttft: float | None = None
    chunk_times: list[float] = field(default_factory=list)
    prompt_tokens: int = 0
    completion_tokens: int = 0
    cached_tokens: int | None = None
    text: str = ""
    error: str | None = None
    json_valid: bool | None = None

    @property
    def ok(self) -> bool:
        return self.error is None

    @property
    def latency(self) -> float:
        return self.end - self.start

    @property
    def tpot(self) -> float | None:
        """Seconds per output token after the first (None with fewer than two tokens)."""
        if self.ttft is None or self.completion_tokens < 2:
            return None
        return (self.latency - self.ttft) / (self.completion_tokens - 1)

    @property
    def itls(self) -> list[float]:
        return [b - a for a, b in zip(self.chunk_times, self.chunk_times[1:], strict=False)]

    def to_dict(self, with_text: bool = False) -> dict[str, Any]:
        """A compact JSON form (chunk times rounded to 0.1 ms; text only when asked)."""
        d = asdict(self)
        d["chunk_times"] = [round(t, 4) for t in self.chunk_times]
        if not with_text:
            d.pop("text")
        return d

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> RequestRecord:
        return cls(**{k: v for k, v in d.items() if k in cls.__dataclass_fields__})


@dataclass(frozen=True)
class Stat:
    """Mean and percentiles of a latency, in milliseconds."""

    mean: float
    p50: float
    p90: float
    p99: float

    @classmethod
    def of(cls, seconds: list[float]) -> Stat:
        if not seconds:
            return cls(float("nan"), float("nan"), float("nan"), float("nan"))
        ms = np.asarray(seconds) * 1e3
        p50, p90, p99 = np.percentile(ms, [50, 90, 99])
        return cls(float(ms.mean()), float(p50), float(p90), float(p99))


@dataclass(frozen=True)
class BenchSummary:
    """The figures of one benchmark run."""

    label: str
    dataset: str
    requests: int
    completed: int
    failed: int
    duration_s: float
    request_throughput: float
    input_tok_s: float
    output_tok_s: float
    total_input_tokens: int
    total_output_tokens: int
    ttft_ms: Stat
    tpot_ms: Stat
    itl_ms: Stat
    e2e_ms: Stat
    cached_tokens: int | None
    cache_hit_rate: float | None
    json_valid_share: float | None
    request_rate: float
    max_concurrency: int | None
    load_avg: str
    first_error: str | None = None

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> BenchSummary:
        stats = {k: Stat(**d[k]) for k in ("ttft_ms", "tpot_ms", "itl_ms", "e2e_ms")}
        return cls(**{**d, **stats})


def load_average() -> str:
    """`uptime`'s three load averages (the machine's business while we measured)."""
    try:
        return " ".join(f"{x:.2f}" for x in os.getloadavg())
    except OSError:
        return "n/a"


def validate_json(text: str, schema: dict[str, Any]) -> bool:
    """Whether `text` is JSON that validates against `schema` (jsonschema when installed, else parse only)."""
    try:
        value = json.loads(text)
    except json.JSONDecodeError:
        return False
    try:
        import jsonschema
    except ImportError:  # the bench extra installs it; without it only well-formedness is checked
        return True
    try:
        jsonschema.validate(value, schema)
    except jsonschema.ValidationError:
        return False
    return True


def summarize(records: list[RequestRecord], label: str, dataset: str, request_rate: float,
              max_concurrency: int | None, load_avg: str | None = None) -> BenchSummary:
    """Aggregate records into a `BenchSummary`."""
    done = [r for r in records if r.ok]
    start = min((r.start for r in records), default=0.0)
    end = max((r.end for r in records), default=0.0)
    duration = max(end - start, 1e-9)
    n_in = sum(r.prompt_tokens for r in done)
    n_out = sum(r.completion_tokens for r in done)
    cached = [r.cached_tokens for r in done if r.cached_tokens is not None]
    judged = [r.json_valid for r in records if r.json_valid is not None]
    cached_total = sum(cached) if cached else None
    cached_prompt = sum(r.prompt_tokens for r in done if r.cached_tokens is not None)
    return BenchSummary(
        label=label, dataset=dataset, requests=len(records), completed=len(done), failed=len(records) - len(done),
        duration_s=duration, request_throughput=len(done) / duration, input_tok_s=n_in / duration,
        output_tok_s=n_out / duration, total_input_tokens=n_in, total_output_tokens=n_out,
        ttft_ms=Stat.of([r.ttft for r in done if r.ttft is not None]),
        tpot_ms=Stat.of([t for r in done if (t := r.tpot) is not None]),
        itl_ms=Stat.of([x for r in done for x in r.itls]), e2e_ms=Stat.of([r.latency for r in done]),
        cached_tokens=cached_total,
        cache_hit_rate=cached_total / cached_prompt if cached_total is not None and cached_prompt else None,
        json_valid_share=sum(judged) / len(judged) if judged else None,
        request_rate=request_rate, max_concurrency=max_concurrency, load_avg=load_avg or load_average(),
        first_error=next((r.error for r in records if r.error), None),
    )


def format_summary(s: BenchSummary) -> str:
    """The printed result table of one run."""
    rate = "inf" if s.request_rate == float("inf") else f"{s.request_rate:g}"
    rows: list[tuple[str, str]] = [
        ("System", s.label), ("Dataset", s.dataset), ("Request rate (req/s)", rate),
        ("Max concurrency", str(s.max_concurrency or "unbounded")),
        ("Successful / failed requests", f"{s.completed} / {s.failed}"),
        ("Duration (s)", f"{s.duration_s:.2f}"), ("Input tokens", str(s.total_input_tokens)),
        ("Output tokens", str(s.total_output_tokens)),
        ("Request throughput (req/s)", f"{s.request_throughput:.2f}"),
        ("Input throughput (tok/s)", f"{s.input_tok_s:.1f}"), ("Output throughput (tok/s)", f"{s.output_tok_s:.1f}"),
    ]
    for name, st in (("TTFT", s.ttft_ms), ("TPOT", s.tpot_ms), ("ITL", s.itl_ms), ("E2E latency", s.e2e_ms)):
        rows.append((f"{name} ms (mean / p50 / p90 / p99)",
                     f"{st.mean:.1f} / {st.p50:.1f} / {st.p90:.1f} / {st.p99:.1f}"))
    if s.cached_tokens is not None:
        rows.append(("Cached prompt tokens (hit rate)", f"{s.cached_tokens} ({(s.cache_hit_rate or 0):.1%})"))
    else:
        rows.append(("Cached prompt tokens", "not reported by the server"))
    if s.json_valid_share is not None:
        rows.append(("Outputs valid for the schema", f"{s.json_valid_share:.1%}"))
    rows.append(("Load average during run", s.load_avg))
    if s.first_error:
        rows.append(("First error", s.first_error[:120]))
    width = max(len(k) for k, _ in rows)
    line = "=" * (width + 40)
    body = "\n".join(f"{k:<{width}}  {v}" for k, v in rows)
    return f"{line}\n{body}\n{line}"
