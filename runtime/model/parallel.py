"""Tensor and pipeline parallelism primitives over `torch.distributed`: which shard of the model a rank holds, and
its collectives.

A `TPContext` travels into the model so one implementation serves every rank: column-parallel linears (q/k/v and
gate/up, split by output rows) hold this rank's heads and intermediate channels, row-parallel linears (o_proj,
down_proj, split by input columns) are followed by one all-reduce, the embedding and LM head hold a contiguous
slice of the (padded) vocabulary. With `size == 1` every collective is a no-op and the shard is the whole model.

A `StageRange` says which contiguous decoder layers a pipeline stage holds (`stage_layers`); the first stage also
holds the embedding, the last the final norm and LM head.
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass
from enum import Enum
from typing import Any

import torch
import torch.distributed as dist

from sprig.runtime.model.config import ModelConfig


class Backend(str, Enum):
    """The collective library: NCCL between CUDA devices, gloo on CPUs."""

    GLOO = "gloo"
    NCCL = "nccl"

    @staticmethod
    def for_device(device: str) -> Backend:
        return Backend.NCCL if device.startswith("cuda") else Backend.GLOO


@dataclass(frozen=True)
class TPContext:
    """This process's place in a tensor-parallel group; `group=None` is the default (world) group."""

    rank: int = 0
    size: int = 1
    group: Any = None

    @property
    def enabled(self) -> bool:
        return self.size > 1

    def all_reduce(self, x: torch.Tensor) -> torch.Tensor:
        """Sum `x` over the ranks in place (the partial outputs of a row-parallel linear)."""
        if self.size > 1:
            dist.all_reduce(x, group=self.group)
        return x

    def gather_vocab(self, logits: torch.Tensor, vocab_size: int) -> torch.Tensor:
        """Join vocab-parallel logits [R, V/size] into [R, vocab_size] on rank 0; other ranks get their own shard."""
        if self.size == 1:
            return logits
        logits = logits.contiguous()
        parts = [torch.empty_like(logits) for _ in range(self.size)] if self.rank == 0 else None
        dist.gather(logits, parts, dst=self._global_rank(0), group=self.group)
        if parts is None:
            return logits
        return torch.cat(parts, dim=-1)[:, :vocab_size]

    def _global_rank(self, group_rank: int) -> int:
        if self.group is None:
            return group_rank
        return dist.get_global_rank(self.group, group_rank)


@dataclass(frozen=True)
class ShardPlan:
    """The slice of every sharded dimension that one rank holds."""

    heads: int  # query heads on this rank
    head_start: int
    kv_heads: int  # key/value heads on this rank (replicated when the model has fewer than ranks)
    kv_head_start: int
    intermediate: int  # MLP channels on this rank
    intermediate_start: int
    vocab_rows: int  # rows of the embedding and LM head on this rank (the vocabulary is padded to a multiple)
    vocab_start: int
    vocab_real: int  # rows of this rank's slice that exist in the checkpoint (the rest are zero padding)
    expert_intermediate: int = 0  # MoE: each expert's channels on this rank
    expert_intermediate_start: int = 0
    shared_intermediate: int = 0  # Qwen2-MoE's shared expert's channels on this rank
    shared_intermediate_start: int = 0

    @property
    def whole(self) -> bool:
        return self.head_start == 0 and self.vocab_start == 0 and self.vocab_real == self.vocab_rows


def check_divisible(cfg: ModelConfig, size: int) -> None:
    """Raise ValueError with one line when the model cannot be split over `size` ranks."""
    if size < 1:
        raise ValueError("tp_size must be positive")
    if cfg.num_heads % size:
        raise ValueError(f"tp_size {size} must divide the number of attention heads ({cfg.num_heads})")
    if cfg.num_kv_heads % size and size % cfg.num_kv_heads:
        raise ValueError(f"tp_size {size} must divide, or be a multiple of, the number of KV heads "
                         f"({cfg.num_kv_heads})")
    if cfg.intermediate_size % size:
        raise ValueError(f"tp_size {size} must divide the MLP size ({cfg.intermediate_size})")
    if size > 1 and cfg.parts.qk_norm_across_heads:
        raise ValueError(f"{cfg.architecture} with tensor parallelism is not supported yet (its q/k norms span "
                         "every head); use --tp-size 1")
    if cfg.moe is not None and cfg.moe.intermediate_size % size:
        raise ValueError(f"tp_size {size} must divide the experts' MLP size ({cfg.moe.intermediate_size})")
    if cfg.moe is not None and cfg.moe.shared_intermediate_size % size:
        raise ValueError(f"tp_size {size} must divide the shared expert's MLP size "
                         f"({cfg.moe.shared_intermediate_size})")


def shard_plan(cfg: ModelConfig, tp: TPContext) -> ShardPlan:
    """The shard of rank `tp.rank` among `tp.size` (the whole model when size is 1)."""
    check_divisible(cfg, tp.size)
    r, n = tp.rank, tp.size
    heads = cfg.num_heads // n
    if cfg.num_kv_heads >= n:
        kv_heads, kv_start = cfg.num_kv_heads // n, r * cfg.num_kv_heads // n
    else:  # why: each rank needs the one KV head its query heads read, so KV heads are replicated
        kv_heads, kv_start = 1, (r * heads) // (cfg.num_heads // cfg.num_kv_heads)
    inter = cfg.intermediate_size // n
    vocab_rows = -(-cfg.vocab_size // n)
    vocab_start = r * vocab_rows
    vocab_real = max(0, min(cfg.vocab_size - vocab_start, vocab_rows))
    expert = cfg.moe.intermediate_size // n if cfg.moe is not None else 0
    shared = cfg.moe.shared_intermediate_size // n if cfg.moe is not None else 0
    return ShardPlan(heads, r * heads, kv_heads, kv_start, inter, r * inter, vocab_rows, vocab_start, vocab_real,
                     expert, r * expert, shared, r * shared)


def local_config(cfg: ModelConfig, plan: ShardPlan, stage: StageRange | None = None) -> ModelConfig:
    """The config one rank's decoder layers and KV pool see: its heads, KV heads and MLP channels, and (for a
    pipeline stage) its number of layers, so the pool holds K/V for those layers only."""
    layers = cfg.num_layers if stage is None else stage.count
    moe = cfg.moe if cfg.moe is None else dataclasses.replace(
        cfg.moe, intermediate_size=plan.expert_intermediate, shared_intermediate_size=plan.shared_intermediate)
    return dataclasses.replace(cfg, num_heads=plan.heads, num_kv_heads=plan.kv_heads,
                               intermediate_size=plan.intermediate, num_layers=layers, moe=moe)


@dataclass(frozen=True)
class StageRange:
    """The decoder layers [start, end) of one pipeline stage, out of `num_layers`."""

    start: int
    end: int
    num_layers: int

    @property
    def first(self) -> bool:
        """This stage embeds the input ids."""
        return self.start == 0

    @property
    def last(self) -> bool:
        """This stage applies the final norm and the LM head."""
        return self.end == self.num_layers

    @property
    def count(self) -> int:
        return self.end - self.start


def whole_model(num_layers: int) -> StageRange:
    return StageRange(0, num_layers, num_layers)


def check_stages(num_layers: int, pp_size: int) -> None:
    """Raise ValueError with one line when `num_layers` cannot be split into `pp_size` stages."""
    if pp_size < 1:
        raise ValueError("pp_size must be positive")
    if pp_size > num_layers:
        raise ValueError(f"pp_size {pp_size} must not exceed the number of decoder layers ({num_layers})")


def head_layers(cfg: ModelConfig) -> float:
    """What the LM head costs in decoder layers during decode: its weights over one layer's (a decode step
    multiplies each weight once per sequence). 3.5 for llama-100m (32000 x 768 against 7.1 M per layer)."""
    attention = cfg.hidden_size * (cfg.q_size + 2 * cfg.kv_size) + cfg.q_size * cfg.hidden_size
    return cfg.vocab_size * cfg.hidden_size / (attention + 3 * cfg.hidden_size * cfg.intermediate_size)


def stage_layers(num_layers: int, pp_size: int, stage: int, head: float = 0.0) -> StageRange:
    """Stage `stage` of `pp_size`: contiguous layers, at least one each, balanced with the last stage's LM head
    counted as `head` layers (`head_layers`). Stage s ends at round(s * (num_layers + head) / pp_size) layers: with
    `head` 0 as even as possible; llama-100m's 12 layers and 3.5-layer head split 8 + (4 + head) at pp 2."""
    check_stages(num_layers, pp_size)

    def boundary(s: int) -> int:
        if s == pp_size:
            return num_layers
        ideal = math.floor(s * (num_layers + head) / pp_size + 0.5)
        return min(max(ideal, s), num_layers - (pp_size - s))  # why: every stage keeps a layer

    return StageRange(boundary(stage), boundary(stage + 1), num_layers)


def pipeline_stage(cfg: ModelConfig, pp_size: int, stage: int) -> StageRange:
    """The layers of a model's pipeline stage (the split every rank computes alike)."""
    return stage_layers(cfg.num_layers, pp_size, stage, head_layers(cfg))


def rank_device(device: str, local_rank: int) -> str:
    """The device of a rank: `cuda` / `cuda:k` → the local rank's GPU counted from k; CPU stays CPU."""
    if not device.startswith("cuda"):
        return device
    base = int(device.split(":", 1)[1]) if ":" in device else 0
    return f"cuda:{base + local_rank}"
