"""`EngineGauges`: the engine's load, KV and cache figures, read from any thread without waiting for the engine.

`/metrics` scrapes these while the engine steps: each figure is one racy read of an int (or a small copy), fine
for monitoring, and never a round trip to the engine thread, so a scrape costs the same under any load.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from sprig.runtime.engine.core import EngineCore


@dataclass(frozen=True)
class SpecGauges:
    """Speculative decoding since start (zeros when the engine does not speculate)."""

    accept_rate: float = 0.0
    accept_length: float = 0.0
    verify_steps: int = 0
    proposed_tokens: int = 0
    accepted_tokens: int = 0


@dataclass(frozen=True)
class HiCacheGauges:
    """The host KV tier since start (zeros without one); the dicts are keyed by the enums' values."""

    device_hit_tokens: int
    host_hit_tokens: int
    offload_bytes: int
    load_bytes: int
    offload_time_s: float
    load_time_s: float
    preemptions: dict[str, int]
    fallbacks: dict[str, int]
    host_tokens: int


@dataclass(frozen=True)
class EngineGauges:
    """A snapshot of the engine's figures for `/metrics`."""

    running: int
    waiting: int
    kv_total_tokens: int
    kv_free_tokens: int
    prefix_cache_tokens: int
    prompt_tokens: int
    cached_tokens: int
    num_preemptions: int
    steps: int
    grammar: dict[str, Any]  # the grammar compiler's own counters (`GrammarCompiler.stats`)
    spec: SpecGauges
    hicache: HiCacheGauges

    @property
    def kv_usage(self) -> float:
        total = self.kv_total_tokens
        return (total - self.kv_free_tokens) / total if total else 0.0

    @property
    def cache_hit_rate(self) -> float:
        return self.cached_tokens / self.prompt_tokens if self.prompt_tokens else 0.0


def read_gauges(core: EngineCore) -> EngineGauges:
    """The figures now (any thread; racy reads)."""
    c = core.counters
    return EngineGauges(
        running=len(core.scheduler.running), waiting=len(core.scheduler.waiting),
        kv_total_tokens=core.kv.total_tokens, kv_free_tokens=core.pool.num_free_tokens,
        prefix_cache_tokens=core.tree.evictable_size + core.tree.protected_size,
        prompt_tokens=c.prompt_tokens, cached_tokens=c.cached_tokens,
        num_preemptions=core.scheduler.num_preemptions, steps=c.steps,
        grammar=core.grammar.stats(), spec=_spec(core), hicache=_hicache(core))


def _spec(core: EngineCore) -> SpecGauges:
    if core.spec is None:
        return SpecGauges()
    c = core.spec.counters
    return SpecGauges(c.acceptance_rate, c.mean_accept_length, c.verify_steps, c.proposed_tokens, c.accepted_tokens)


def _hicache(core: EngineCore) -> HiCacheGauges:
    c = core.hicache
    return HiCacheGauges(c.device_hit_tokens, c.host_hit_tokens, c.offload_bytes, c.load_bytes, c.offload_time_s,
                         c.load_time_s, {m.value: n for m, n in c.preemptions.items()},
                         {r.value: n for r, n in c.fallbacks.items()}, getattr(core.tree, "host_size", 0))
