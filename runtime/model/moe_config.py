"""The mixture-of-experts part of a Hugging Face config (Mixtral, Qwen2-MoE, Qwen3-MoE): how many experts, how a
token is routed to them, which layers hold them, and the names their tensors have in the checkpoint."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

MOE_ARCHITECTURES = ("MixtralForCausalLM", "Qwen2MoeForCausalLM", "Qwen3MoeForCausalLM")


@dataclass(frozen=True)
class ExpertNames:
    """Where a MoE block's tensors sit in a checkpoint: `model.layers.{i}.{block}.experts.{e}.{gate|up|down}.weight`
    and the router `model.layers.{i}.{block}.gate.weight`."""

    block: str
    gate: str
    up: str
    down: str


MIXTRAL_NAMES = ExpertNames("block_sparse_moe", "w1", "w3", "w2")
QWEN_NAMES = ExpertNames("mlp", "gate_proj", "up_proj", "down_proj")


@dataclass(frozen=True)
class MoEConfig:
    """A sparse MoE block in place of the MLP in `sparse_layers`: softmax over `num_experts` router logits, the
    `top_k` best experts per token, their weights renormalized to sum to 1 when `renormalize`, each expert a SwiGLU
    MLP of `intermediate_size`; Qwen2-MoE adds a shared expert (`shared_intermediate_size` > 0) scaled by
    sigmoid(shared_expert_gate(x))."""

    num_experts: int
    top_k: int
    intermediate_size: int
    renormalize: bool
    shared_intermediate_size: int  # 0: no shared expert
    sparse_layers: tuple[int, ...]
    names: ExpertNames

    def __post_init__(self) -> None:
        if self.num_experts < 1:
            raise ValueError(f"num_experts must be positive, got {self.num_experts}")
        if not 1 <= self.top_k <= self.num_experts:
            raise ValueError(f"num_experts_per_tok must be in [1, num_experts={self.num_experts}], got {self.top_k}")
        if self.intermediate_size < 1:
            raise ValueError(f"moe_intermediate_size must be positive, got {self.intermediate_size}")

    @property
    def has_shared_expert(self) -> bool:
        return self.shared_intermediate_size > 0


def _sparse_layers(raw: dict[str, Any], num_layers: int) -> tuple[int, ...]:
    """Qwen-MoE's rule: layer i is sparse unless listed in `mlp_only_layers`, when (i + 1) % decoder_sparse_step == 0."""
    dense = set(int(i) for i in raw.get("mlp_only_layers") or [])
    step = int(raw.get("decoder_sparse_step") or 1)
    return tuple(i for i in range(num_layers) if i not in dense and (i + 1) % step == 0)


def moe_from_hf(raw: dict[str, Any], arch: str) -> MoEConfig | None:
    """The MoE config of a MoE architecture's config.json, None for a dense one (KeyError on a missing field)."""
    if arch not in MOE_ARCHITECTURES:
        return None
    num_layers = int(raw["num_hidden_layers"])
    top_k = int(raw["num_experts_per_tok"])
    if arch == "MixtralForCausalLM":  # every layer sparse, renormalized top-k, experts of intermediate_size
        return MoEConfig(int(raw["num_local_experts"]), top_k, int(raw["intermediate_size"]), True, 0,
                         tuple(range(num_layers)), MIXTRAL_NAMES)
    experts = int(raw["num_experts"] if "num_experts" in raw else raw["num_local_experts"])
    shared = int(raw.get("shared_expert_intermediate_size") or 0) if arch == "Qwen2MoeForCausalLM" else 0
    return MoEConfig(experts, top_k, int(raw["moe_intermediate_size"]), bool(raw.get("norm_topk_prob", False)),
                     shared, _sparse_layers(raw, num_layers), QWEN_NAMES)
