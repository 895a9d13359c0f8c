"""Who a rank is: its place in the world of pp × tp ranks, its device, and the timeout of its collectives."""

from __future__ import annotations

import os
from dataclasses import dataclass
from datetime import timedelta

import torch

from sprig.runtime.config import EngineConfig
from sprig.runtime.model.parallel import Backend, rank_device

DEFAULT_TIMEOUT_S = 600.0  # a collective waiting longer than this is a hung rank (idle ranks get heartbeats)


def collective_timeout() -> timedelta:
    """The process-group timeout; `SPRIG_TP_TIMEOUT` (seconds) overrides it."""
    return timedelta(seconds=float(os.environ.get("SPRIG_TP_TIMEOUT", DEFAULT_TIMEOUT_S)))


@dataclass(frozen=True)
class RankSpec:
    """Everything a rank needs to join the group and build its shard."""

    rank: int
    size: int
    local_rank: int
    init_method: str  # tcp://host:port, or env:// under torchrun
    config: EngineConfig
    model_path: str
    parent_pid: int | None = None  # spawned ranks exit when this process goes away

    @property
    def device(self) -> str:
        return rank_device(self.config.device, self.local_rank)

    @property
    def tp_size(self) -> int:
        return self.config.tp_size

    @property
    def stage(self) -> int:
        """This rank's pipeline stage (0 without pipeline parallelism)."""
        return self.rank // self.config.tp_size

    @property
    def tp_rank(self) -> int:
        """This rank's place in its stage's tensor-parallel group."""
        return self.rank % self.config.tp_size

    @property
    def backend(self) -> Backend:
        return Backend.for_device(self.config.device)


def rank_name(spec: RankSpec) -> str:
    """How messages name a rank: "tensor-parallel rank 1", or "pipeline rank 3 (stage 1, tp rank 1)"."""
    return describe_rank(spec.rank, spec.config.tp_size, spec.config.pp_size)


def describe_rank(rank: int, tp_size: int, pp_size: int) -> str:
    if pp_size == 1:
        return f"tensor-parallel rank {rank}"
    return f"pipeline rank {rank} (stage {rank // tp_size}, tp rank {rank % tp_size})"


def collective_device(spec: RankSpec) -> torch.device:
    """Where messages between ranks live: the GPU for NCCL, the CPU for gloo."""
    return torch.device(spec.device if spec.backend is Backend.NCCL else "cpu")
