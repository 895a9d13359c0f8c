"""Write fp8 copies of a checkpoint in the layouts vLLM, SGLang and compressed-tensors use (for tests and benchmarks).

The decoder layers' projection weights become float8_e4m3fn with float32 scales; embeddings, norms, biases and
the LM head stay as they are. `Fp8Layout` names the layouts `quantization.Fp8Format` reads back:
- FP8_TENSOR: `quant_method: fp8`, one scale per tensor in `<layer>.weight_scale` (vLLM's per-tensor fp8);
- FP8_BLOCK: `quant_method: fp8` with `weight_block_size`, scales `<layer>.weight_scale_inv` per block (the
  DeepSeek-V3 layout SGLang and vLLM load);
- CT_TENSOR / CT_CHANNEL / CT_BLOCK: `quant_method: compressed-tensors`, float8 weights with strategy tensor
  ([1]), channel ([out, 1]) or block, scales in `<layer>.weight_scale`.
"""

from __future__ import annotations

import enum
import json
import math
import re
import shutil
from pathlib import Path
from typing import Any

import torch
from safetensors.torch import load_file, save_file

from sprig.runtime.model.quantization import FP8, FP8_MAX

_PROJECTION = re.compile(r"model\.layers\.\d+\.(self_attn\.[qkvo]_proj|mlp\.(gate|up|down)_proj)\.weight")


class Fp8Layout(enum.Enum):
    FP8_TENSOR = "fp8-tensor"
    FP8_BLOCK = "fp8-block"
    CT_TENSOR = "ct-tensor"
    CT_CHANNEL = "ct-channel"
    CT_BLOCK = "ct-block"


def _amax_scale(w: torch.Tensor) -> torch.Tensor:
    return w.abs().amax().clamp(min=1e-12) / FP8_MAX


def quantize_weight(w: torch.Tensor, layout: Fp8Layout, block: tuple[int, int]) -> tuple[torch.Tensor, torch.Tensor]:
    """(fp8 codes, scale tensor as the layout stores it) for one weight [out, in]."""
    w = w.float()
    out_f, in_f = w.shape
    if layout in (Fp8Layout.FP8_TENSOR, Fp8Layout.CT_TENSOR):
        scale = _amax_scale(w)
        expanded = scale.expand(out_f, in_f)
        stored = scale.reshape(()) if layout is Fp8Layout.FP8_TENSOR else scale.reshape(1)
    elif layout is Fp8Layout.CT_CHANNEL:
        stored = w.abs().amax(1, keepdim=True).clamp(min=1e-12) / FP8_MAX
        expanded = stored.expand(out_f, in_f)
    else:
        br, bc = block
        stored = torch.empty(math.ceil(out_f / br), math.ceil(in_f / bc))
        for i in range(stored.shape[0]):
            for j in range(stored.shape[1]):
                stored[i, j] = _amax_scale(w[i * br : (i + 1) * br, j * bc : (j + 1) * bc])
        expanded = stored.repeat_interleave(br, 0)[:out_f].repeat_interleave(bc, 1)[:, :in_f]
    return (w / expanded).clamp(-FP8_MAX, FP8_MAX).to(FP8), stored.contiguous()


def quantization_config(layout: Fp8Layout, block: tuple[int, int]) -> dict[str, Any]:
    """The config.json `quantization_config` of `layout`."""
    if layout is Fp8Layout.FP8_TENSOR:
        return {"quant_method": "fp8", "fmt": "e4m3", "activation_scheme": "dynamic"}
    if layout is Fp8Layout.FP8_BLOCK:
        return {"quant_method": "fp8", "fmt": "e4m3", "activation_scheme": "dynamic", "weight_block_size": list(block)}
    strategy = {Fp8Layout.CT_TENSOR: "tensor", Fp8Layout.CT_CHANNEL: "channel", Fp8Layout.CT_BLOCK: "block"}[layout]
    weights: dict[str, Any] = {"num_bits": 8, "type": "float", "symmetric": True, "strategy": strategy,
                               "dynamic": False}
    if layout is Fp8Layout.CT_BLOCK:
        weights["block_structure"] = list(block)
    return {"quant_method": "compressed-tensors", "format": "float-quantized", "ignore": ["lm_head"],
            "config_groups": {"group_0": {"targets": ["Linear"], "weights": weights,
                                          "input_activations": {"num_bits": 8, "type": "float",
                                                                "strategy": "token", "dynamic": True}}}}


def write_fp8_checkpoint(src: Path, dst: Path, layout: Fp8Layout, block: tuple[int, int] = (128, 128)) -> Path:
    """Write the checkpoint in folder `src` to `dst` with fp8 projection weights in `layout`; returns `dst`."""
    dst.mkdir(parents=True, exist_ok=True)
    for f in src.iterdir():
        if f.is_file() and not f.name.endswith(".safetensors") and f.name != "model.safetensors.index.json":
            shutil.copy(f, dst / f.name)
    config = json.loads((src / "config.json").read_text())
    config["quantization_config"] = quantization_config(layout, block)
    (dst / "config.json").write_text(json.dumps(config, indent=2))
    tensors: dict[str, torch.Tensor] = {}
    for f in sorted(src.glob("*.safetensors")):
        tensors.update(load_file(f))
    suffix = "weight_scale_inv" if layout is Fp8Layout.FP8_BLOCK else "weight_scale"
    out: dict[str, torch.Tensor] = {}
    for name, t in tensors.items():
        if _PROJECTION.fullmatch(name):
            out[name], out[name.removesuffix("weight") + suffix] = quantize_weight(t, layout, block)
        else:
            out[name] = t.contiguous()
    save_file(out, str(dst / "model.safetensors"), metadata={"format": "pt"})
    return dst
