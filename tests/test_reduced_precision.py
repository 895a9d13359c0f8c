"""bf16, fp16 and int8 stay close to the fp32 transformers logits (bounds measured, see notes).

Measured on the tiny checkpoints (64 positions): bf16 rel. max error 0.024–0.063, top-1 agreement 0.94–0.98;
fp16 0.003–0.008, 0.98–1.0. int8 on sprig's W8A8 kernel (activations quantized per row too; all four tiny
checkpoints): fp32 activations 0.058–0.111, 0.83–0.97; bf16 0.055–0.107, 0.89–0.94. Weight-only int8 (torch's
`_weight_int8pack_mm`, where the kernel is off): fp32 0.041–0.076, 0.91–0.97; bf16 0.053–0.081, 0.92–0.94.
The bounds below leave ~1.5x headroom over the worst measured value (of the error, or of the top-1 disagreement).
"""

from __future__ import annotations

import pytest
import torch

from sprig.runtime.model.decoder import can_pack_for_onednn
from sprig.runtime.model.kv_pool import KVPool, PoolSize
from sprig.runtime.model.loader import load_model
from sprig.runtime.model.runner import ModelRunner, SeqInput

CASES = [  # dtype, quantization, max relative error, min top-1 agreement
    ("bfloat16", None, 0.10, 0.85),
    ("float16", None, 0.012, 0.95),
    ("float32", "int8", 0.17, 0.74),
    ("bfloat16", "int8", 0.16, 0.83),
]


def sprig_logits(path, ids: list[int], dtype: str, quantization: str | None) -> torch.Tensor:
    model = load_model(path, dtype, quantization)
    pool = KVPool(model.cfg, PoolSize(8, 16), model.dtype)
    seq = SeqInput(ids, 0, pool.alloc(4), all_logits=True)
    return ModelRunner(model, pool).forward([seq]).logits


@pytest.mark.parametrize(("dtype", "quantization", "max_rel", "min_top1"), CASES)
def test_error_and_top1_agreement_within_measured_bounds(reference, dtype, quantization, max_rel, min_top1):
    path, ids, ref = reference
    out = sprig_logits(path, ids, dtype, quantization)
    rel = ((out - ref).abs().max() / ref.abs().max()).item()
    top1 = (out.argmax(-1) == ref.argmax(-1)).float().mean().item()
    assert rel < max_rel and top1 >= min_top1


def test_int8_weights_are_int8_with_a_scale_per_output_row(tiny_paths):
    model = load_model(tiny_paths["tiny-llama"], "float32", "int8")
    proj = model.layers[0].self_attn.qkv_proj
    assert proj.weight.dtype == torch.int8
    assert proj.scales.shape == (proj.weight.shape[0],)


@pytest.mark.parametrize("dtype", ["bfloat16", "float16"])
def test_onednn_packed_linears_change_nothing_but_speed(reference, dtype, monkeypatch):
    """Half-precision linears on the CPU run from oneDNN's blocked weight layout; the logits are bit-identical."""
    path, ids, _ = reference
    if not can_pack_for_onednn(getattr(torch, dtype), "cpu"):
        pytest.skip(f"this CPU's oneDNN has no {dtype} matmul to pack for")
    monkeypatch.setenv("SPRIG_AMX", "0")  # bf16 would take sprig's AMX or vector kernel (tests/test_cpu_gemm.py)
    monkeypatch.setenv("SPRIG_CPU_ISA", "none")
    assert load_model(path, dtype).layers[0].mlp.down_proj.packed is not None
    packed_logits = sprig_logits(path, ids, dtype, None)
    monkeypatch.setenv("SPRIG_ONEDNN_PACK", "0")
    assert load_model(path, dtype).layers[0].mlp.down_proj.packed is None
    assert torch.equal(sprig_logits(path, ids, dtype, None), packed_logits)
