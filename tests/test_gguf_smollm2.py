"""The real SmolLM2-135M-Instruct Q4_1 GGUF file: sprig in fp32 on its dequantized weights gives transformers' greedy
output token for token; native (block-quantized) mode knows the capital of France on the torch reference of its
layers and on the C kernels; `sprig serve` answers a chat."""

from __future__ import annotations

import httpx
import pytest
import torch
from test_server_helpers import ServerProcess

from sprig.runtime.engine.engine import Engine
from sprig.runtime.model.gguf_config import gguf_model_config
from sprig.runtime.model.gguf_file import open_gguf

PROMPTS = [
    "What is the capital of France?",
    "Write a haiku about the sea.",
    "List three prime numbers.",
    "Translate 'good morning' into Spanish.",
    "What is 12 times 7?",
    "Give me a Python function that reverses a string.",
    "Explain photosynthesis in one sentence.",
    "Name a famous painting by Leonardo da Vinci.",
]
NEW_TOKENS = 32
FRANCE = [{"role": "user", "content": PROMPTS[0]}]


def until_eos(ids: list[int], eos: set[int]) -> list[int]:
    for i, token in enumerate(ids):
        if token in eos:
            return ids[:i]
    return ids


def test_config_matches_transformers(smollm2_gguf):
    from transformers import AutoConfig

    ref = AutoConfig.from_pretrained(smollm2_gguf.parent, gguf_file=smollm2_gguf.name)
    cfg = gguf_model_config(open_gguf(smollm2_gguf))
    assert (cfg.num_layers, cfg.hidden_size, cfg.intermediate_size, cfg.num_heads, cfg.num_kv_heads, cfg.vocab_size,
            cfg.max_position_embeddings) == (ref.num_hidden_layers, ref.hidden_size, ref.intermediate_size,
                                             ref.num_attention_heads, ref.num_key_value_heads, ref.vocab_size,
                                             ref.max_position_embeddings)
    assert cfg.rms_norm_eps == pytest.approx(ref.rms_norm_eps) and cfg.rope.theta == pytest.approx(
        ref.rope_parameters["rope_theta"])
    assert cfg.tie_word_embeddings and cfg.head_dim == 64 and cfg.eos_token_ids == (2,)


def test_dequantized_fp32_greedy_equals_transformers(smollm2_gguf):
    from transformers import AutoModelForCausalLM

    with Engine(str(smollm2_gguf), dtype="float32", gguf_dequantize=True, max_total_tokens=4096) as engine:
        tok = engine.core.tokenizer
        prompts = [tok.encode(tok.apply_chat_template([{"role": "user", "content": p}])) for p in PROMPTS]
        ours = engine.generate(input_ids=prompts, sampling_params={"max_new_tokens": NEW_TOKENS, "temperature": 0})
    hf = AutoModelForCausalLM.from_pretrained(smollm2_gguf.parent, gguf_file=smollm2_gguf.name,
                                              dtype=torch.float32).eval()
    eos = {2}
    for ids, result in zip(prompts, ours, strict=True):
        with torch.no_grad():
            out = hf.generate(torch.tensor([ids]), max_new_tokens=NEW_TOKENS, do_sample=False)[0, len(ids):]
        assert until_eos(result["output_ids"], eos) == until_eos(out.tolist(), eos), tok.decode(ids)



@pytest.mark.parametrize("isa", [
    "none",  # the torch reference of the block-quantized layers: weights stay quantized, dequantized per tile
    None,  # the C kernels, whose activations carry a residual int8 code (with plain 8-bit ones the answer flipped)
])
def test_native_mode_knows_the_capital_of_france(smollm2_gguf, isa, monkeypatch):
    if isa is not None:
        monkeypatch.setenv("SPRIG_CPU_ISA", isa)
    with Engine(str(smollm2_gguf), dtype="float32", max_total_tokens=4096) as engine:
        assert "q4_1 (" in engine.core.model.linear_kernels
        prompt = engine.core.tokenizer.apply_chat_template(FRANCE)
        out = engine.generate(prompt, {"max_new_tokens": 32, "temperature": 0})
    assert "Paris" in out["text"]


def test_serve_answers_a_chat_request(smollm2_gguf):
    with ServerProcess(model=str(smollm2_gguf)) as server:
        reply = httpx.post(server.url + "/v1/chat/completions", timeout=120,
                           json={"model": str(smollm2_gguf), "messages": FRANCE, "max_tokens": 32,
                                 "temperature": 0}).json()
        info = httpx.get(server.url + "/model_info", timeout=30).json()
        log = server.output()
    choice = reply["choices"][0]
    assert choice["message"]["content"].strip() and choice["finish_reason"] in ("stop", "length")
    assert info["model_format"] == "gguf" and info["file_type"] == "Q4_1"
    assert info["model_path"] == str(smollm2_gguf)
    assert f"{smollm2_gguf} (gguf Q4_1, LlamaForCausalLM, 30 layers" in log
