"""A MoE block's routed experts: every expert's gate/up and down weights stacked in one parameter each, run by the
kernel set's `fused_moe` (routing, the active experts' MLPs and the weighted sum in one call), or, once packed for
the CPU kernels (`Experts.pack_for_cpu`), by sprig's fused C kernel."""

from __future__ import annotations

from collections.abc import Callable

import torch
from torch import nn

from sprig.kernels.backend import KernelSet
from sprig.kernels.cpu_moe import PackedExperts, cpu_fused_moe, cpu_moe_supports, pack_experts
from sprig.kernels.moe import moe_loop
from sprig.runtime.model.moe_config import MoEConfig


class ExpertMLP(nn.Module):
    """One expert as two linears of its own (gate rows then up rows, and down), for quantized experts."""

    def __init__(self, gate_up_proj: nn.Module, down_proj: nn.Module) -> None:
        super().__init__()
        self.gate_up_proj = gate_up_proj
        self.down_proj = down_proj


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
        self.per_expert: nn.ModuleList | None = None  # one ExpertMLP each in place of w13 / w2, see unstack

    def unstack(self, make_linear: Callable[[int, int], nn.Module]) -> None:
        """Hold each expert as two linears of its own (`make_linear(in, out)`), which the model's quantization
        then replaces like any linear (int8, fp8, GGML blocks); they run one expert at a time in torch."""
        h, i = self.hidden_size, self.intermediate_size
        self.per_expert = nn.ModuleList(ExpertMLP(make_linear(h, 2 * i), make_linear(i, h))
                                        for _ in range(self.num_experts))
        del self.w13, self.w2

    def stacked(self) -> tuple[torch.Tensor, torch.Tensor]:
        """(w13 [E, 2I, H], w2 [E, H, I]): views of the parameters."""
        e, h, i = self.num_experts, self.hidden_size, self.intermediate_size
        return self.w13.view(e, 2 * i, h), self.w2.view(e, h, i)

    def pack_for_cpu(self) -> bool:
        """With the "cpu" kernel set, hold the weights only in the fused C kernel's layout where it takes them (bf16
        or fp32); returns whether it does."""
        if self.per_expert is not None:
            return False
        w13, w2 = self.stacked()
        if self.ops.name != "cpu" or not cpu_moe_supports(w13):
            return False
        self.packed = pack_experts(w13.detach(), w2.detach())
        # Buffers, so the loader moves them onto huge pages and counts them (`t.data` moves; `packed` sees it).
        self.register_buffer("packed_w13", self.packed.w13, persistent=False)
        self.register_buffer("packed_w2", self.packed.w2, persistent=False)
        # Keep only the shapes (meta tensors) of the plain weights the packed ones replace.
        self.w13 = nn.Parameter(torch.empty(self.w13.shape, dtype=w13.dtype, device="meta"), requires_grad=False)
        self.w2 = nn.Parameter(torch.empty(self.w2.shape, dtype=w13.dtype, device="meta"), requires_grad=False)
        return True

    def forward(self, x: torch.Tensor, router_logits: torch.Tensor) -> torch.Tensor:
        if self.packed is not None:
            return cpu_fused_moe(x, self.packed, router_logits, self.top_k, self.renormalize)
        if self.per_expert is not None:
            return moe_loop(x, router_logits, self.top_k, self.renormalize, self.num_experts, self._run_expert)
        w13, w2 = self.stacked()
        return self.ops.fused_moe(x, w13, w2, router_logits, self.top_k, self.renormalize)

    def _run_expert(self, e: int, rows: torch.Tensor) -> torch.Tensor:
        assert self.per_expert is not None  # set by unstack
        mlp = self.per_expert[e]
        assert isinstance(mlp, ExpertMLP)  # what unstack builds
        return mlp.down_proj(self.ops.silu_and_mul(mlp.gate_up_proj(rows)))


def unstack_experts(model: nn.Module, make_linear: Callable[[int, int], nn.Module]) -> None:
    """`Experts.unstack` on every MoE block of `model` (before quantization swaps its linears)."""
    for m in model.modules():
        if isinstance(m, Experts):
            m.unstack(make_linear)
