"""The fused mixture-of-experts feed-forward through sprig's C kernel (`kernels/csrc/moe.c`): routing, the active
experts' gate_up and down products and the weighted combine in one call, bf16 experts on the vector kernel's code
path (`vec_isa()`, capped by `SPRIG_CPU_ISA`), fp32 experts as stored. The torch reference is `kernels/moe.py`."""

from __future__ import annotations

from dataclasses import dataclass

import torch

from sprig.kernels.cpu_gemm import VecIsa, vec_isa, vnni_pack
from sprig.kernels.cpu_native import DTYPE_CODES, native_kernels


@dataclass(frozen=True)
class PackedExperts:
    """Every expert's weights laid out for `moe_fused`: bf16 ones `vnni_pack`ed per expert, fp32 ones as stored."""

    w13: torch.Tensor
    w2: torch.Tensor
    hidden_size: int
    intermediate_size: int
    isa: VecIsa  # the bf16 code path (fp32 experts ignore it)


def cpu_moe_supports(w13: torch.Tensor) -> bool:
    """Whether `moe_fused` takes these stacked [E, 2I, H] experts: fp32, or bf16 with even H and I and a vector
    path allowed (`vec_isa()`), on the CPU with the C kernels built."""
    if w13.device.type != "cpu" or native_kernels() is None:
        return False
    if w13.dtype == torch.float32:
        return True
    return w13.dtype == torch.bfloat16 and w13.shape[1] % 4 == 0 and w13.shape[2] % 2 == 0 and vec_isa() is not None


def pack_experts(w13: torch.Tensor, w2: torch.Tensor, isa: VecIsa | None = None) -> PackedExperts:
    """w13 [E, 2I, H] and w2 [E, H, I] re-laid out for `moe_fused` (`isa` defaults to `vec_isa()`)."""
    chosen = isa if isa is not None else vec_isa() or VecIsa.PORTABLE
    hidden, inter = w13.shape[2], w2.shape[2]
    if w13.dtype == torch.bfloat16:
        return PackedExperts(torch.stack([vnni_pack(w) for w in w13]), torch.stack([vnni_pack(w) for w in w2]),
                             hidden, inter, chosen)
    return PackedExperts(w13.contiguous(), w2.contiguous(), hidden, inter, chosen)


def cpu_fused_moe(x: torch.Tensor, experts: PackedExperts, router_logits: torch.Tensor, top_k: int,
                  renormalize: bool) -> torch.Tensor:
    """`kernels.moe.fused_moe` for packed experts: x [T, H] in the experts' dtype → [T, H]."""
    lib = native_kernels()
    assert lib is not None  # cpu_moe_supports checked that the library is there
    x = x.contiguous()
    logits = router_logits.float().contiguous()
    out = torch.empty_like(x)
    status = lib.moe_fused(x.data_ptr(), logits.data_ptr(), x.shape[0], logits.shape[1], top_k, int(renormalize),
                           experts.w13.data_ptr(), experts.w2.data_ptr(), experts.hidden_size,
                           experts.intermediate_size, DTYPE_CODES[x.dtype], int(experts.isa), out.data_ptr(),
                           torch.get_num_threads())
    if status != 0:
        raise RuntimeError(f"moe_fused refused [{x.shape[0]}, {experts.hidden_size}] over "
                           f"{logits.shape[1]} experts (status {status})")
    return out
