"""The start-up summary: what an engine loaded and how it will run, as (label, value) lines for one log block."""

from __future__ import annotations

import torch

from sprig.kernels.backend import backend_reason
from sprig.runtime.engine.core import EngineCore

GRAMMAR_BACKENDS = {
    "llguidance": "llguidance (context-free grammars over sprig's JSON Schema translation, masks computed lazily)",
    "outlines": "outlines-core (one regex per constraint, eager token automata)",
}


def engine_facts(core: EngineCore) -> list[tuple[str, str]]:
    """Model, precision, kernels, threads, KV pool, cache, grammar and parallelism of a loaded engine."""
    cfg = core.config
    model_cfg = core.model_config
    pool = core.pool
    element = pool.buffer.element_size()
    gib = pool.buffer.numel() * element / 2**30
    ops = core.model.ops.name
    quant = cfg.quantization or "none"
    threads = str(torch.get_num_threads()) + (" (--num-threads)" if cfg.num_threads else " (torch's default)")
    return [
        ("model", f"{core.model_path} ({model_cfg.architecture}, {model_cfg.num_layers} layers, "
                  f"context {core.context_length})"),
        ("dtype", f"{str(pool.buffer.dtype).removeprefix('torch.')} (--dtype {cfg.dtype}), quantization {quant}"),
        ("device", cfg.device),
        ("attention backend", f"{ops} ({backend_reason(ops, cfg.attention_backend, cfg.device)})"),
        ("threads", threads),
        ("KV pool", f"{pool.size.num_tokens} tokens, {gib:.2f} GiB, page size {pool.page_size}"),
        ("radix cache", "off (--disable-radix-cache)" if cfg.disable_radix_cache else "on"),
        ("grammar backend", f"{GRAMMAR_BACKENDS[cfg.grammar_backend]}, {cfg.grammar_workers} compile workers"),
        ("tensor parallel", str(cfg.tp_size)),
    ]


def format_block(title: str, facts: list[tuple[str, str]]) -> str:
    """`title` then one aligned `label: value` line per fact."""
    width = max(len(label) for label, _ in facts)
    return "\n".join([title, *(f"  {label + ':':<{width + 1}} {value}" for label, value in facts)])
