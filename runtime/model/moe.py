"""A MoE block's routed experts: every expert's gate/up and down weights stacked in one parameter each, run by the
kernel set's `fused_moe` (routing, the active experts' MLPs and the weighted sum in one call), or, once packed for
the CPU kernels (`Experts.pack_for_cpu`), by sprig's fused C kernel."""

from __future__ import annotations

import torch
from torch import nn

from sprig.kernels.backend import KernelSet
from sprig.kernels.cpu_moe import PackedExperts, cpu_fused_moe, cpu_moe_supports, pack_experts
from sprig.runtime.model.moe_config import MoEConfig


class Experts(nn.Module):
    """`num_experts` SwiGLU MLPs of `intermediate_size` (this rank's share of it under tensor parallelism).

    The weights are 2-D so the loader fills them with row targets like any linear's: `w13` [E * 2I, H] holds
    expert e's gate rows at e * 2I and its up rows at e * 2I + I, `w2` [E * H, I] its down rows at e * H."""

    def __init__(self, moe: MoEConfig, hidden_size: int, intermediate_size: int, dtype: torch.dtype,
                 ops: KernelSet) -> None:
        super().__init__()
        self.num_experts, self.top_k, self.renormalize = moe.num_experts, moe.top_k, moe.renormalize
        self.hidden_size, self.intermediate_size = hidden_size, intermediate_size
        self.ops = ops
        e, h, i = moe.num_experts, hidden_size, intermediate_size
        self.w13 = nn.Parameter(torch.empty(e * 2 * i, h, dtype=dtype), requires_grad=False)
        self.w2 = nn.Parameter(torch.empty(e * h, i, dtype=dtype), requires_grad=False)
        self.packed: PackedExperts | None = None  # the weights laid out for the C kernel, see pack_for_cpu

    def stacked(self) -> tuple[torch.Tensor, torch.Tensor]:
        """(w13 [E, 2I, H], w2 [E, H, I]): views of the parameters."""
        e, h, i = self.num_experts, self.hidden_size, self.intermediate_size
        return self.w13.view(e, 2 * i, h), self.w2.view(e, h, i)

    def pack_for_cpu(self) -> bool:
        """With the "cpu" kernel set, hold the weights only in the fused C kernel's layout where it takes them (bf16
        or fp32); returns whether it does."""
        w13, w2 = self.stacked()
        if self.ops.name != "cpu" or not cpu_moe_supports(w13):
            return False
        self.packed = pack_experts(w13.detach(), w2.detach())
        # Keep only the shapes (meta tensors) of the plain weights the packed ones replace.
        self.w13 = nn.Parameter(torch.empty(self.w13.shape, dtype=w13.dtype, device="meta"), requires_grad=False)
        self.w2 = nn.Parameter(torch.empty(self.w2.shape, dtype=w13.dtype, device="meta"), requires_grad=False)
        return True

    def forward(self, x: torch.Tensor, router_logits: torch.Tensor) -> torch.Tensor:
        if self.packed is not None:
            return cpu_fused_moe(x, self.packed, router_logits, self.top_k, self.renormalize)
        w13, w2 = self.stacked()
        return self.ops.fused_moe(x, w13, w2, router_logits, self.top_k, self.renormalize)
