"""sprig's tiny checkpoints written as GGUF files (tests/gguf_helpers.py) load into the same model: config, Q/K row
order, rope scaling (llama3 as rope_freqs, yarn, linear), biases, q/k norms, tied heads; native block-quantized
weights give the logits of their dequantized values; the tokenizer built from the metadata encodes as
tokenizer.json does."""

from __future__ import annotations

import dataclasses

import gguf
import pytest
import torch
from gguf_helpers import write_tiny_gguf

from sprig.runtime.model.block_quant import BlockQuantEmbedding, BlockQuantLinear
from sprig.runtime.model.checkpoint_source import checkpoint_config, checkpoint_format
from sprig.runtime.model.checkpoints import TINY_ARCHITECTURES
from sprig.runtime.model.kv_pool import KVPool, PoolSize
from sprig.runtime.model.loader import load_model
from sprig.runtime.model.runner import ModelRunner, SeqInput
from sprig.runtime.model.tokenizer import Tokenizer

Q = gguf.GGMLQuantizationType
TOL = 1e-4
TEXT = "Hello there, <|im_start|>user\n  two  spaces, 1234 digits, ünïcödé and 😀 emoji\n\n\tdone<|im_end|>"


def logits(model, ids: list[int]) -> torch.Tensor:
    runner = ModelRunner(model, KVPool(model.cfg, PoolSize(64, 16), torch.float32))
    pages = runner.pool.alloc(-(-len(ids) // 16))
    return runner.forward([SeqInput(ids, 0, pages, all_logits=True)]).logits.float()


IDS = torch.randint(3, 2000, (40,), generator=torch.Generator().manual_seed(7)).tolist()


@pytest.mark.parametrize("name", TINY_ARCHITECTURES)
def test_f32_gguf_loads_the_same_model_as_the_folder(name, tiny_paths, tmp_path):
    folder = tiny_paths[name]
    path = write_tiny_gguf(folder, tmp_path / f"{name}.gguf")
    expected_cfg = checkpoint_config(folder)
    cfg = checkpoint_config(path)
    same = {"rope", "architecture", "torch_dtype", "eos_token_ids", "moe"}
    assert cfg.parts == expected_cfg.parts  # Llama's defaults on both sides
    assert cfg.moe is None and expected_cfg.moe is None  # dense families only: MoE GGUF files are refused
    for field in dataclasses.fields(cfg):
        if field.name not in same | {"parts"}:
            assert getattr(cfg, field.name) == pytest.approx(getattr(expected_cfg, field.name), rel=1e-6), field.name
    assert checkpoint_format(path).describe() == "gguf F32"
    ref, model = load_model(folder, "float32"), load_model(path, "float32")
    assert (logits(model, IDS) - logits(ref, IDS)).abs().max().item() < TOL


@pytest.mark.parametrize("name", TINY_ARCHITECTURES)
def test_tokenizer_from_metadata_encodes_as_tokenizer_json(name, tiny_paths, tmp_path):
    folder = tiny_paths[name]
    path = write_tiny_gguf(folder, tmp_path / f"{name}.gguf")
    ours, ref = Tokenizer(path), Tokenizer(folder)
    assert ours.encode(TEXT) == ref.encode(TEXT)
    assert ours.decode(ours.encode(TEXT)) == ref.decode(ref.encode(TEXT))
    assert ours.eos_token_id == ref.eos_token_id and ours.chat_template == ref.chat_template


@pytest.mark.parametrize("qtype", [Q.Q8_0, Q.Q4_0, Q.Q4_1])
@pytest.mark.parametrize("name", ["tiny-llama", "tiny-qwen2"])
def test_native_block_quant_equals_dequantized_weights(name, qtype, tiny_paths, tmp_path, monkeypatch):
    path = write_tiny_gguf(tiny_paths[name], tmp_path / f"{name}-{qtype.name}.gguf", qtype)
    dequantized = load_model(path, "float32", gguf_dequantize=True)
    assert not any(isinstance(m, BlockQuantLinear) for m in dequantized.modules())
    expected = logits(dequantized, IDS)
    monkeypatch.setenv("SPRIG_CPU_ISA", "none")  # the torch reference: the blocks' exact values
    native = load_model(path, "float32")
    quantized = [m for m in native.modules() if isinstance(m, BlockQuantLinear | BlockQuantEmbedding)]
    assert {m.qtype.name for m in quantized} == {qtype.name}
    assert isinstance(native.embed_tokens, BlockQuantEmbedding)
    if native.cfg.tie_word_embeddings:  # the head reads the embedding's bytes, not a copy
        assert native.lm_head is not None and native.lm_head.weight is native.embed_tokens.weight
    assert (logits(native, IDS) - expected).abs().max().item() < 1e-3
    monkeypatch.delenv("SPRIG_CPU_ISA")  # the C kernels quantize activations per 32: close, not equal
    kernels = logits(load_model(path, "float32"), IDS)
    assert ((kernels - expected).norm() / expected.norm()).item() < 0.15  # tiny-qwen2 q8_0: 0.050
    assert (kernels.argmax(-1) == expected.argmax(-1)).float().mean().item() >= 0.75  # random weights: flat logits


def test_mixed_types_in_a_fused_projection_are_held_dequantized(tiny_paths, tmp_path, monkeypatch):
    path = write_tiny_gguf(tiny_paths["tiny-llama"], tmp_path / "mixed.gguf", Q.Q4_0,
                           types={"blk.0.attn_v.weight": Q.Q8_0})
    monkeypatch.setenv("SPRIG_CPU_ISA", "none")
    native = load_model(path, "float32")
    assert not isinstance(native.layers[0].self_attn.qkv_proj, BlockQuantLinear)  # Q4_0 and Q8_0 parts
    assert isinstance(native.layers[1].self_attn.qkv_proj, BlockQuantLinear)
    dequantized = load_model(path, "float32", gguf_dequantize=True)
    assert (logits(native, IDS) - logits(dequantized, IDS)).abs().max().item() < 1e-3


@pytest.mark.parametrize("qtype", [Q.F16, Q.BF16])
def test_half_precision_files_load_close_to_the_folder(qtype, tiny_paths, tmp_path):
    folder = tiny_paths["tiny-qwen3"]
    path = write_tiny_gguf(folder, tmp_path / f"{qtype.name}.gguf", qtype)
    assert checkpoint_config(path).torch_dtype == ("bfloat16" if qtype is Q.BF16 else "float32")
    model = load_model(path, "float32")
    assert not any(isinstance(m, BlockQuantLinear) for m in model.modules())
    expected = logits(load_model(folder, "float32"), IDS)
    assert ((logits(model, IDS) - expected).norm() / expected.norm()).item() < 0.02


def test_end_of_turn_ids_stop_generation_too(tiny_paths, tmp_path):
    def add_eot(meta, tensors):
        del tensors
        meta["tokenizer.ggml.eot_token_id"] = 5
        meta["tokenizer.ggml.eom_token_id"] = 6

    path = write_tiny_gguf(tiny_paths["tiny-llama"], tmp_path / "eot.gguf", edit=add_eot)
    assert checkpoint_config(path).eos_token_ids == (2, 5, 6)
