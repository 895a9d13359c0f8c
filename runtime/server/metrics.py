"""Prometheus metrics of the server (prometheus-client, one registry per app).

Request-level figures (tokens, TTFT, TPOT, latency, errors, tenants) are recorded by the server as requests
finish; engine figures (running/waiting, KV usage, cache hit rate, preemptions, grammar compiles) are read at
scrape time through `Engine.gauges()`, without a round trip to the engine thread, so `/metrics` stays fast under
load.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING, Any

from prometheus_client import CollectorRegistry, Counter, Histogram, generate_latest
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric, SummaryMetricFamily
from prometheus_client.registry import Collector

from sprig.runtime.engine.gauges import HiCacheGauges, SpecGauges
from sprig.runtime.engine.request import SequenceMeta

if TYPE_CHECKING:
    from sprig.runtime.engine.engine import Engine

LATENCY_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 120.0, 300.0)
TPOT_BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 1.0, 2.5)


class EngineCollector(Collector):
    """Engine gauges read at scrape time through `Engine.gauges()` (racy reads, no engine round trip)."""

    def __init__(self, get_engine: Callable[[], Engine | None]) -> None:
        self.get_engine = get_engine

    def collect(self) -> Iterator[Metric]:
        engine = self.get_engine()
        if engine is None:
            return
        g = engine.gauges()
        yield _gauge("sprig_num_requests_running", "Requests in the running batch", g.running)
        yield _gauge("sprig_num_requests_waiting", "Requests waiting for admission", g.waiting)
        yield _gauge("sprig_kv_cache_usage_ratio", "Fraction of KV slots in use (including cached prefixes)",
                     g.kv_usage)
        yield _gauge("sprig_kv_cache_total_tokens", "KV pool size in tokens", g.kv_total_tokens)
        yield _gauge("sprig_prefix_cache_tokens", "Tokens held by the prefix cache", g.prefix_cache_tokens)
        yield _gauge("sprig_cache_hit_rate", "Cached prompt tokens / prompt tokens since start", g.cache_hit_rate)
        yield _counter("sprig_num_preemptions", "Requests preempted for lack of KV", g.num_preemptions)
        yield _counter("sprig_engine_steps", "Engine steps run", g.steps)
        yield _gauge("sprig_engine_alive", "1 while the engine loop runs", 1.0 if engine.is_alive else 0.0)
        yield from _grammar_metrics(g.grammar)
        yield from _spec_metrics(g.spec)
        yield from _hicache_metrics(g.hicache)


def _hicache_metrics(c: HiCacheGauges) -> Iterator[Metric]:
    """Host KV tier figures: hits by tier, bytes and time moved each way, preemptions by mode, fallbacks."""
    yield _labelled_counter("sprig_cache_hit_tokens", "Prompt tokens found in the cache at admission, by tier",
                            "tier", {"device": c.device_hit_tokens, "host": c.host_hit_tokens})
    yield _labelled_counter("sprig_hicache_bytes", "KV bytes copied between the tiers", "direction",
                            {"offload": c.offload_bytes, "load": c.load_bytes})
    yield _labelled_counter("sprig_hicache_seconds", "Time spent copying KV between the tiers", "direction",
                            {"offload": c.offload_time_s, "load": c.load_time_s})
    yield _labelled_counter("sprig_preemptions_by_mode", "Preempted requests, by swap or recompute", "mode",
                            dict(c.preemptions))
    yield _labelled_counter("sprig_hicache_fallbacks", "Times KV was recomputed instead of using the host tier",
                            "reason", dict(c.fallbacks))
    yield _gauge("sprig_hicache_host_tokens", "Tokens whose KV the host tier holds", c.host_tokens)


def _labelled_counter(name: str, doc: str, label: str, values: dict[str, float]) -> CounterMetricFamily:
    family = CounterMetricFamily(name, doc, labels=[label])
    for key, value in sorted(values.items()):
        family.add_metric([key], value)
    return family


def _spec_metrics(c: SpecGauges) -> Iterator[Metric]:
    """Speculative decoding figures (zeros when the engine does not speculate)."""
    yield _gauge("sprig_spec_accept_rate", "Draft tokens the target kept / draft tokens proposed", c.accept_rate)
    yield _gauge("sprig_spec_accept_length", "Tokens added per verification (kept drafts + the target's token)",
                 c.accept_length)
    yield _counter("sprig_spec_verify_steps", "Speculating rows verified", c.verify_steps)
    yield _counter("sprig_spec_proposed_tokens", "Draft tokens proposed", c.proposed_tokens)
    yield _counter("sprig_spec_accepted_tokens", "Draft tokens the target kept", c.accepted_tokens)


def _grammar_metrics(stats: dict[str, Any]) -> Iterator[Metric]:
    """Grammar compiler figures (zeros while no constraint was compiled or no compiler is wired in)."""
    yield SummaryMetricFamily("sprig_grammar_compile_seconds", "Grammar compile time (count and sum)",
                              count_value=stats.get("compiles", 0), sum_value=stats.get("compile_time_s_total", 0.0))
    yield _gauge("sprig_grammar_compile_seconds_max", "Longest grammar compile", stats.get("compile_time_s_max", 0.0))
    yield _counter("sprig_grammar_compile_errors", "Constraints that failed to compile", stats.get("compile_errors", 0))
    yield _counter("sprig_grammar_compile_timeouts", "Compiles stopped by the time budget", stats.get("timeouts", 0))
    yield _counter("sprig_grammar_cache_hits", "Grammar cache hits", stats.get("cache_hits", 0))
    yield _counter("sprig_grammar_cache_misses", "Grammar cache misses", stats.get("cache_misses", 0))
    yield _gauge("sprig_grammar_cache_bytes", "Bytes held by the grammar cache", stats.get("cache_bytes", 0))


def _gauge(name: str, doc: str, value: float) -> GaugeMetricFamily:
    return GaugeMetricFamily(name, doc, value=value)


def _counter(name: str, doc: str, value: float) -> CounterMetricFamily:
    return CounterMetricFamily(name, doc, value=value)


class ServerMetrics:
    """All server metrics in their own registry."""

    def __init__(self, get_engine: Callable[[], Engine | None]) -> None:
        self.registry = CollectorRegistry(auto_describe=True)
        r = self.registry
        self.prompt_tokens = Counter("sprig_prompt_tokens", "Prompt tokens of finished sequences", registry=r)
        self.generation_tokens = Counter("sprig_generation_tokens", "Generated tokens", registry=r)
        self.cached_tokens = Counter("sprig_cached_tokens", "Prompt tokens served from the prefix cache",
                                     registry=r)
        self.finished = Counter("sprig_requests_finished", "Sequences finished, by finish reason",
                                ["finish_reason"], registry=r)
        self.requests = Counter("sprig_requests", "Generation requests admitted, by endpoint", ["endpoint"],
                                registry=r)
        self.errors = Counter("sprig_request_errors", "Error responses, by type and code", ["type", "code"],
                              registry=r)
        self.disconnects = Counter("sprig_client_disconnected", "Requests aborted because the client left",
                                   registry=r)
        self.timeouts = Counter("sprig_request_timeouts", "Requests aborted at their deadline", registry=r)
        self.ttft = Histogram("sprig_time_to_first_token_seconds", "Time to first token", buckets=LATENCY_BUCKETS,
                              registry=r)
        self.tpot = Histogram("sprig_time_per_output_token_seconds", "Time per output token after the first",
                              buckets=TPOT_BUCKETS, registry=r)
        self.e2e = Histogram("sprig_e2e_request_latency_seconds", "End-to-end sequence latency",
                             buckets=LATENCY_BUCKETS, registry=r)
        self.tenant_requests = Counter("sprig_tenant_requests", "Requests admitted per API key", ["tenant"],
                                       registry=r)
        self.tenant_prompt_tokens = Counter("sprig_tenant_prompt_tokens", "Prompt tokens per API key", ["tenant"],
                                            registry=r)
        self.tenant_generation_tokens = Counter("sprig_tenant_generation_tokens", "Generated tokens per API key",
                                                ["tenant"], registry=r)
        self.tenant_rejected = Counter("sprig_tenant_rate_limited", "Requests refused by a tenant limit",
                                       ["tenant", "limit"], registry=r)
        r.register(EngineCollector(get_engine))

    def sequence_finished(self, tenant: str, meta: SequenceMeta, first_token_s: float | None,
                          end_s: float) -> None:
        """Record one finished sequence: tokens, finish reason and latencies (seconds since arrival)."""
        prompt, completion = meta.prompt_tokens, meta.completion_tokens
        self.prompt_tokens.inc(prompt)
        self.generation_tokens.inc(completion)
        self.cached_tokens.inc(meta.cached_tokens)
        self.finished.labels(meta.finish_type or "abort").inc()
        self.tenant_prompt_tokens.labels(tenant).inc(prompt)
        self.tenant_generation_tokens.labels(tenant).inc(completion)
        self.e2e.observe(end_s)
        if first_token_s is not None:
            self.ttft.observe(first_token_s)
            if completion > 1:
                self.tpot.observe((end_s - first_token_s) / (completion - 1))

    def render(self) -> bytes:
        return generate_latest(self.registry)
