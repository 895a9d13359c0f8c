"""A loaded model made ready for its device: on the CPU, linears re-laid out for sprig's C kernels (bf16 / fp16
packed panels, int8 W8A8, GGML blocks read as stored), and the kernels each linear runs recorded for the start-up
block, with the reason, if any, why decode steps cannot replay from a CPU graph."""

from __future__ import annotations

import os
from collections import Counter

import torch
from torch import nn

from sprig.runtime.model import host_memory
from sprig.runtime.model.block_quant import BlockQuantEmbedding, BlockQuantLinear
from sprig.runtime.model.decoder import CausalLM
from sprig.runtime.model.linear import Linear, LinearKernel, can_pack_for_onednn
from sprig.runtime.model.moe import Experts
from sprig.runtime.model.quantization import Fp8Linear, Int8Linear


def finish_for_device(model: CausalLM, device: str) -> CausalLM:
    """Re-lay the loaded linears out for the CPU kernels and record which kernels run them."""
    _pack_int8_linears(model, device)
    if torch.device(device).type == "cpu":
        for m in model.modules():
            if isinstance(m, BlockQuantLinear | BlockQuantEmbedding):
                m.pack_for_cpu()  # the C kernels read the blocks as they are: nothing to re-lay out
        experts = [m for m in model.modules() if isinstance(m, Experts) and m.pack_for_cpu()]
        if experts:  # the fused MoE kernel's layout (fp32 or bf16 experts, the "cpu" kernel set): one huge-page buffer
            host_memory.pack_parameters(nn.ModuleList(experts))
    if packs_linears(model, device):
        linears = [m for m in model.modules() if isinstance(m, Linear)]
        for m in linears:
            _pack_linear(m)
        host_memory.pack_parameters(nn.ModuleList(linears))  # re-laid-out weights and biases: one huge-page buffer
    model.linear_kernels = _describe_linears(model)
    model.graph_blocker = _graph_blocker(model)
    model.eval()
    return model


def _pack_linear(linear: Linear) -> None:
    """sprig's AMX or vector kernel where the shape allows; else, for the LM head (fp32 out of a bf16 / fp16
    weight, which oneDNN cannot write), the weight held in fp32; else oneDNN's layout where its build has kernels
    for the dtype (SPRIG_ONEDNN_PACK=0: never), else plain F.linear."""
    if linear.pack_for_cpu() is not LinearKernel.TORCH:
        return
    if linear.out_dtype != linear.weight.dtype:
        linear.widen_weight()
    elif can_pack_for_onednn(linear.weight.dtype, "cpu") and os.environ.get("SPRIG_ONEDNN_PACK", "1") != "0":
        linear.pack_for_onednn()


def _pack_int8_linears(model: CausalLM, device: str) -> None:
    """int8 linears of a CPU model onto sprig's W8A8 kernel where it takes them (see `Int8Linear.pack_for_cpu`)."""
    if torch.device(device).type != "cpu":
        return
    packed = [m for m in model.modules() if isinstance(m, Int8Linear) and m.pack_for_cpu() is not None]
    if packed:
        host_memory.pack_parameters(nn.ModuleList(packed))  # the re-laid-out weights: one huge-page buffer


def _linear_label(module: nn.Module) -> str | None:
    if isinstance(module, Linear):
        return module.kernel.value + ("" if module.isa is None else f" ({module.isa.name.lower()})")
    if isinstance(module, Int8Linear):
        if module.isa is not None:
            return f"int8 w8a8 ({module.isa.name.lower()})"
        return "int8 " + ("_weight_int8pack_mm" if module.use_kernel else "dequantize + F.linear")
    if isinstance(module, BlockQuantLinear):
        kernel = "dequantize + F.linear" if module.isa is None else module.isa.name.lower()
        return f"{module.qtype.name.lower()} ({kernel})"
    return "fp8" if isinstance(module, Fp8Linear) else None


def _in_c(module: nn.Module) -> bool:
    """Whether a linear layer runs one of sprig's C kernels (which a CPU graph can replay)."""
    if isinstance(module, Linear):
        return module.kernel in (LinearKernel.AMX, LinearKernel.VEC)
    return isinstance(module, Int8Linear | BlockQuantLinear) and module.isa is not None


def _graph_blocker(model: CausalLM) -> str | None:
    """Why a CPU graph cannot replay this model's decode steps (it replays C kernels only), or None."""
    labels = {_linear_label(m) for m in model.modules()
              if isinstance(m, Linear | Int8Linear | Fp8Linear | BlockQuantLinear)
              and not _in_c(m)}
    if labels:
        return f"linears run in torch ({', '.join(sorted(str(x) for x in labels))})"
    return "MoE experts run eagerly (their routing is data-dependent)" if _has_experts(model) else None


def _has_experts(model: CausalLM) -> bool:
    return any(isinstance(m, Experts) for m in model.modules())


def _describe_linears(model: CausalLM) -> str:
    """For the start-up log: "vec (avx512_bf16) x 49", or each kernel with its count when they differ."""
    labels = Counter(label for m in model.modules() if (label := _linear_label(m)) is not None)
    return ", ".join(f"{name} x {count}" for name, count in labels.most_common()) or "none"


def packs_linears(model: CausalLM, device: str) -> bool:
    """Linears of a CPU model in bf16 / fp16 are re-laid out after loading (fp32 ones stay on F.linear)."""
    return torch.device(device).type == "cpu" and model.dtype in (torch.bfloat16, torch.float16)
