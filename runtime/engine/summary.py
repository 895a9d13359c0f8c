"""What an engine reports about itself: the start-up block (what it loaded and how it will run) and its stats."""

from __future__ import annotations

from typing import Any

import torch

from sprig.kernels.backend import backend_reason
from sprig.runtime.config import EngineConfig
from sprig.runtime.engine.core import EngineCore
from sprig.runtime.engine.gauges import read_gauges
from sprig.runtime.model.kv_pool import KVPool
from sprig.runtime.model.parallel import pipeline_stage

GRAMMAR_BACKENDS = {
    "llguidance": "llguidance (context-free grammars over sprig's JSON Schema translation, masks computed lazily)",
    "outlines": "outlines-core (one regex per constraint, eager token automata)",
}


def engine_facts(core: EngineCore) -> list[tuple[str, str]]:
    """Model, precision, kernels, threads, KV pool, cache, grammar and parallelism of a loaded engine."""
    cfg = core.config
    model_cfg = core.model_config
    pool = core.pool
    gib = pool.nbytes / 2**30
    ops = core.model.ops.name
    quant = cfg.quantization or ("gguf, dequantized (--gguf-dequantize)" if cfg.gguf_dequantize
                                 and core.checkpoint_format.name == "gguf" else "none")
    threads = str(torch.get_num_threads()) + (" (--num-threads)" if cfg.num_threads else " (torch's default)")
    return [
        ("model", f"{core.model_path} ({core.checkpoint_format.describe()}, {model_cfg.architecture}, "
                  f"{model_cfg.num_layers} layers, context {core.context_length})"),
        ("dtype", f"{str(core.model.dtype).removeprefix('torch.')} (--dtype {cfg.dtype}), quantization {quant}"),
        ("device", cfg.device),
        ("attention backend", f"{ops} ({backend_reason(ops, cfg.attention_backend, cfg.device)})"),
        ("linear kernels", core.model.linear_kernels),
        ("decode graphs", _graphs_fact(core)),
        ("overlap schedule", _overlap_fact(core.schedule.overlap_off)),
        ("threads", threads),
        ("KV pool", f"{pool.size.num_tokens} tokens, {gib:.2f} GiB, page size {pool.page_size}{_kv_storage(pool)}"
                    f"{_sliding_region(pool)}"),
        ("radix cache", "off (--disable-radix-cache)" if cfg.disable_radix_cache else "on"),
        ("host KV tier", _host_tier_fact(core)),
        ("grammar backend", f"{GRAMMAR_BACKENDS[cfg.grammar_backend]}, {cfg.grammar_workers} compile workers"),
        ("tensor parallel", str(cfg.tp_size)),
        ("pipeline parallel", _stages_fact(core)),
        ("speculative", _speculative_fact(cfg)),
    ]


def _overlap_fact(off: str | None) -> str:
    return "on" if off is None else f"off ({off})"


def _stages_fact(core: EngineCore) -> str:
    """"1", or each stage's layers: "2 stages: layers 0-7 | 8-11 + LM head"."""
    pp = core.config.pp_size
    if pp == 1:
        return "1"
    stages = [pipeline_stage(core.model_config, pp, s) for s in range(pp)]
    spans = [str(r.start) if r.count == 1 else f"{r.start}-{r.end - 1}" for r in stages]
    return f"{pp} stages: layers " + " | ".join(spans) + " + LM head"


def _graphs_fact(core: EngineCore) -> str:
    runner = core.runner.graph_runner
    if runner is None:
        return f"off ({core.graphs_off})"
    kind = "recorded C-kernel calls, captured by each size's first step" if runner.on_cpu else "CUDA graphs"
    return f"{kind}, batch sizes up to {runner.batch_sizes[-1]}"


def _host_tier_fact(core: EngineCore) -> str:
    host = core.kv.host
    if host is not None:
        pool = host.pool
        return (f"{host.num_tokens} tokens, {pool.nbytes / 2**30:.2f} GiB, {pool.spec.backend.value}, "
                f"write-back, swap preemption from {core.kv.swap_min_tokens} tokens")
    if core.config.enable_hierarchical_cache:
        return "unavailable, recomputing instead (see the log)"
    return "off"


def hicache_stats(core: EngineCore) -> dict[str, Any]:
    """The host tier's figures (all zero without one)."""
    c = core.hicache
    host = core.kv.host
    return {
        "hicache_enabled": host is not None,
        "hicache_host_total_tokens": host.num_tokens if host is not None else 0,
        "hicache_host_free_tokens": host.num_free_tokens if host is not None else 0,
        "hicache_host_cached_tokens": getattr(core.tree, "host_size", 0),
        "hicache_device_hit_tokens": c.device_hit_tokens,
        "hicache_host_hit_tokens": c.host_hit_tokens,
        "hicache_offloaded_tokens": c.offloaded_tokens,
        "hicache_loaded_tokens": c.loaded_tokens,
        "hicache_offload_bytes": c.offload_bytes,
        "hicache_load_bytes": c.load_bytes,
        "hicache_offload_time_s": c.offload_time_s,
        "hicache_load_time_s": c.load_time_s,
        "preemptions_by_mode": {mode.value: n for mode, n in c.preemptions.items()},
        "hicache_fallbacks": {reason.value: n for reason, n in c.fallbacks.items()},
    }


def _speculative_fact(cfg: EngineConfig) -> str:
    if cfg.speculative_algorithm is None:
        return "off"
    draft = f", draft model {cfg.speculative_draft_model_path}" if cfg.speculative_algorithm == "draft" else ""
    adaptive = "fixed" if cfg.speculative_disable_adaptive else "adaptive"
    return f"{cfg.speculative_algorithm}{draft}, up to {cfg.speculative_num_draft_tokens} draft tokens ({adaptive})"


def _sliding_region(pool: KVPool) -> str:
    """The sliding-window layers' own region, when they have one."""
    if pool.sliding is None:
        return ""
    spec = pool.sliding.spec
    return (f"; {len(spec.layers)} sliding-window layers in a region of {spec.num_pages * pool.page_size} tokens "
            f"(window {spec.window})")


def _kv_storage(pool: KVPool) -> str:
    """How a quantized pool stores K/V (nothing for one in the model dtype)."""
    kind = pool.kv_cache_dtype
    if not kind.quantized:
        return ""
    return f", {kind.value} codes with a bf16 scale per token and head (--kv-cache-dtype)"


def format_block(title: str, facts: list[tuple[str, str]]) -> str:
    """`title` then one aligned `label: value` line per fact."""
    width = max(len(label) for label, _ in facts)
    return "\n".join([title, *(f"  {label + ':':<{width + 1}} {value}" for label, value in facts)])


def sliding_stats(core: EngineCore) -> dict[str, int]:
    """The sliding-window region's tokens: all, in use (held by requests or kept by the tree) and kept idle by the
    tree (given up first when the region runs short); nothing without a region."""
    sliding = core.kv.sliding
    if sliding is None:
        return {}
    p = core.pool.page_size
    return {"swa_total_tokens": sliding.region.spec.num_pages * p, "swa_used_tokens": sliding.held_pages * p,
            "swa_idle_tokens": sliding.idle_pages * p}


def engine_stats(core: EngineCore) -> dict[str, Any]:
    """A snapshot of load, KV usage, cache figures and step timings (call it on the engine thread)."""
    c = core.counters
    g = read_gauges(core)  # why: the figures /metrics scrapes, read one way
    decode_steps = max(c.decode_steps, 1)
    return {
        "running": g.running,
        "waiting": g.waiting,
        "kv_total_tokens": g.kv_total_tokens,
        "kv_used_tokens": g.kv_total_tokens - g.kv_free_tokens,
        "kv_usage": g.kv_usage,
        "kv_free_tokens": g.kv_free_tokens,
        "cache_evictable_tokens": core.tree.evictable_size,
        "cache_protected_tokens": core.tree.protected_size,
        "cached_tokens": g.cached_tokens,
        "prompt_tokens": g.prompt_tokens,
        "cache_hit_rate": g.cache_hit_rate,
        "generated_tokens": c.generated_tokens,
        "computed_tokens": c.computed_tokens,
        "num_preemptions": g.num_preemptions,
        "finished_requests": c.finished_requests,
        "aborted_requests": c.aborted_requests,
        "request_errors": c.request_errors,
        "steps": g.steps,
        "tokens_per_step": (sum(c.recent_step_tokens) / len(c.recent_step_tokens)) if c.recent_step_tokens
        else 0.0,
        "avg_decode_batch": c.decode_batch_tokens / decode_steps,
        "model_time_s": c.model_time,
        "step_time_s": c.step_time,
        "context_length": core.context_length,
        "page_size": core.pool.page_size,
        "jump_forward_tokens": c.jump_forward_tokens,
        "grammar": g.grammar,
        **hicache_stats(core),
        **sliding_stats(core),
        **(core.spec.stats() if core.spec is not None else {}),
    }
