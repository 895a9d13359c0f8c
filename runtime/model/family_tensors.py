"""Checkpoint tensor names of the families not named as Llama: which of them hold several of the decoder's tensors
(Phi-3's fused `qkv_proj` and `gate_up_proj`, GPT-NeoX's per-head interleaved `query_key_value`) and how the rest
are renamed. The loader builds its targets under Llama's names, then applies `checkpoint_layout`.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable
from dataclasses import dataclass

import torch

from sprig.runtime.model.config import ModelConfig

_LAYER = re.compile(r"^model\.layers\.(\d+)\.self_attn\.q_proj\.weight$")
_NEOX_SUFFIXES = {"self_attn.o_proj.": "attention.dense.", "mlp.up_proj.": "mlp.dense_h_to_4h.",
                  "mlp.down_proj.": "mlp.dense_4h_to_h."}
_NEOX_TOP = {"model.embed_tokens.weight": "gpt_neox.embed_in.weight", "lm_head.weight": "embed_out.weight",
             "model.norm.weight": "gpt_neox.final_layer_norm.weight",
             "model.norm.bias": "gpt_neox.final_layer_norm.bias"}


@dataclass(frozen=True)
class Fused:
    """One checkpoint tensor holding the Llama-named `parts`, concatenated in that order once `reorder` ran."""

    name: str
    parts: tuple[str, ...]
    reorder: Callable[[torch.Tensor], torch.Tensor] | None = None


def checkpoint_layout(cfg: ModelConfig, names: Iterable[str]) -> tuple[list[Fused], dict[str, str]]:
    """(the fused tensors, then renames of the remaining Llama names) of `cfg`'s checkpoints; `names` are the Llama
    names the loader wants filled."""
    names = list(names)
    prefixes = [f"model.layers.{m.group(1)}." for m in map(_LAYER.match, names) if m]
    if cfg.architecture == "Phi3ForCausalLM":
        return [group for p in prefixes for group in _phi3_fused(p)], {}
    if cfg.architecture == "GPTNeoXForCausalLM":
        fused = [group for p in prefixes for group in _neox_fused(cfg, p, names)]
        return fused, {name: _neox_name(name) for name in names}
    return [], {}


def _phi3_fused(p: str) -> list[Fused]:
    qkv = tuple(f"{p}self_attn.{x}_proj.weight" for x in "qkv")
    return [Fused(f"{p}self_attn.qkv_proj.weight", qkv),
            Fused(f"{p}mlp.gate_up_proj.weight", (f"{p}mlp.gate_proj.weight", f"{p}mlp.up_proj.weight"))]


def _neox_fused(cfg: ModelConfig, p: str, names: list[str]) -> list[Fused]:
    """query_key_value holds, per head, that head's q, k and v rows; sprig's qkv_proj holds all q, all k, all v."""

    def per_head_to_grouped(t: torch.Tensor) -> torch.Tensor:
        return t.unflatten(0, (cfg.num_heads, 3, cfg.head_dim)).transpose(0, 1).flatten(0, 2)

    out = p.replace("model.layers.", "gpt_neox.layers.") + "attention.query_key_value."
    return [Fused(out + kind, tuple(f"{p}self_attn.{x}_proj.{kind}" for x in "qkv"), per_head_to_grouped)
            for kind in ("weight", "bias") if f"{p}self_attn.q_proj.{kind}" in names]


def _neox_name(name: str) -> str:
    if name in _NEOX_TOP:
        return _NEOX_TOP[name]
    name = name.replace("model.layers.", "gpt_neox.layers.")
    for llama, neox in _NEOX_SUFFIXES.items():
        name = name.replace(llama, neox)
    return name
