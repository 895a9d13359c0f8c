"""Write GGUF files for tests with `gguf.GGUFWriter`: sprig's tiny checkpoints converted as llama.cpp's converter
would (its tensor names, llama's Q/K row interleave, tokenizer metadata), and small hand-made vocabularies."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import gguf
import numpy as np
import torch
from safetensors.torch import load_file

from sprig.runtime.model.config import load_model_config
from sprig.runtime.model.rope import rope_inv_freq

ARCH = {"LlamaForCausalLM": "llama", "MistralForCausalLM": "llama", "Qwen2ForCausalLM": "qwen2",
        "Qwen3ForCausalLM": "qwen3"}
LAYER_NAMES = {"self_attn.q_proj": "attn_q", "self_attn.k_proj": "attn_k", "self_attn.v_proj": "attn_v",
               "self_attn.o_proj": "attn_output", "self_attn.q_norm": "attn_q_norm",
               "self_attn.k_norm": "attn_k_norm", "mlp.gate_proj": "ffn_gate", "mlp.up_proj": "ffn_up",
               "mlp.down_proj": "ffn_down", "input_layernorm": "attn_norm", "post_attention_layernorm": "ffn_norm"}


def interleave_rows(w: np.ndarray, heads: int) -> np.ndarray:
    """llama.cpp's converter's Q/K permutation (per head: the two rotary halves interleaved row by row)."""
    return w.reshape(heads, 2, w.shape[0] // heads // 2, *w.shape[1:]).swapaxes(1, 2).reshape(w.shape)


def gguf_name(hf_name: str) -> str:
    if hf_name == "model.embed_tokens.weight":
        return "token_embd.weight"
    if hf_name == "model.norm.weight":
        return "output_norm.weight"
    if hf_name == "lm_head.weight":
        return "output.weight"
    _, _, index, rest = hf_name.split(".", 3)
    module, kind = rest.rsplit(".", 1)
    return f"blk.{index}.{LAYER_NAMES[module]}.{kind}"


def write_tiny_gguf(folder: Path, out: Path, qtype: gguf.GGMLQuantizationType = gguf.GGMLQuantizationType.F32,
                    arch: str | None = None, edit: Any = None,
                    types: dict[str, gguf.GGMLQuantizationType] | None = None) -> Path:
    """Convert the tiny checkpoint in `folder` to a GGUF file: matrices in `qtype` (norms and biases F32), or in
    `types[name]`. `edit(meta, tensors)` may change the metadata and tensors before they are written."""
    cfg = load_model_config(folder)
    raw = json.loads((folder / "config.json").read_text())
    arch = arch or ARCH[cfg.architecture]
    meta: dict[str, Any] = {
        "general.architecture": arch, "general.file_type": {0: 0, 1: 1, 2: 2, 3: 3, 8: 7, 30: 32}.get(int(qtype), 0),
        f"{arch}.block_count": cfg.num_layers, f"{arch}.context_length": cfg.max_position_embeddings,
        f"{arch}.embedding_length": cfg.hidden_size, f"{arch}.feed_forward_length": cfg.intermediate_size,
        f"{arch}.attention.head_count": cfg.num_heads, f"{arch}.attention.head_count_kv": cfg.num_kv_heads,
        f"{arch}.attention.key_length": cfg.head_dim, f"{arch}.attention.value_length": cfg.head_dim,
        f"{arch}.attention.layer_norm_rms_epsilon": cfg.rms_norm_eps, f"{arch}.rope.freq_base": cfg.rope.theta,
        f"{arch}.rope.dimension_count": cfg.head_dim,
    }
    tensors = {gguf_name(k): v.float().numpy() for k, v in load_file(folder / "model.safetensors").items()}
    rope = cfg.rope
    if rope.rope_type == "llama3":  # llama.cpp writes the divisors llama3 scaling implies
        default = 1.0 / (rope.theta ** (torch.arange(0, cfg.head_dim, 2).float() / cfg.head_dim))
        scaled, _ = rope_inv_freq(rope, cfg.head_dim, cfg.max_position_embeddings)
        tensors["rope_freqs.weight"] = (default / scaled).numpy()
    elif rope.rope_type in ("linear", "yarn"):
        meta[f"{arch}.rope.scaling.type"] = rope.rope_type
        meta[f"{arch}.rope.scaling.factor"] = float(rope.params["factor"])
        if "original_max_position_embeddings" in rope.params:
            meta[f"{arch}.rope.scaling.original_context_length"] = int(rope.params["original_max_position_embeddings"])
    if arch == "llama":
        for name in list(tensors):
            if ".attn_q." in name or ".attn_k." in name:
                heads = cfg.num_heads if ".attn_q." in name else cfg.num_kv_heads
                tensors[name] = interleave_rows(tensors[name], heads)
    meta.update(tokenizer_metadata(folder, int(raw["vocab_size"])))
    if edit is not None:
        edit(meta, tensors)
    return write_gguf(out, meta, tensors, qtype, types)


def tokenizer_metadata(folder: Path, vocab_rows: int) -> dict[str, Any]:
    """A byte-level BPE `tokenizer.json` as llama.cpp's metadata, padded with `[PAD{i}]` to `vocab_rows`."""
    tok = json.loads((folder / "tokenizer.json").read_text())
    vocab: dict[str, int] = dict(tok["model"]["vocab"])
    for added in tok.get("added_tokens", []):
        vocab[added["content"]] = added["id"]
    tokens = [""] * vocab_rows
    types = [5] * vocab_rows  # UNUSED padding
    for text, index in vocab.items():
        tokens[index] = text
        types[index] = 1
    for index in range(vocab_rows):
        if not tokens[index]:
            tokens[index] = f"[PAD{index}]"
    special = {a["id"] for a in tok.get("added_tokens", []) if a.get("special")}
    for index in special:
        types[index] = 3
    merges = [m if isinstance(m, str) else " ".join(m) for m in tok["model"]["merges"]]
    cfg = json.loads((folder / "tokenizer_config.json").read_text())
    meta = {"tokenizer.ggml.model": "gpt2", "tokenizer.ggml.pre": "gpt-2", "tokenizer.ggml.tokens": tokens,
            "tokenizer.ggml.token_type": types, "tokenizer.ggml.merges": merges,
            "tokenizer.ggml.eos_token_id": vocab[cfg["eos_token"]], "tokenizer.ggml.add_bos_token": False}
    if cfg.get("chat_template"):
        meta["tokenizer.chat_template"] = cfg["chat_template"]
    return meta


def write_gguf(out: Path, meta: dict[str, Any], tensors: dict[str, np.ndarray],
               qtype: gguf.GGMLQuantizationType = gguf.GGMLQuantizationType.F32,
               types: dict[str, gguf.GGMLQuantizationType] | None = None) -> Path:
    """Write `meta` (values typed by their Python type) and `tensors` (2-D ones in `types[name]` or `qtype`)."""
    writer = gguf.GGUFWriter(str(out), meta["general.architecture"])
    for key, value in meta.items():
        if key == "general.architecture":
            continue
        _add(writer, key, value)
    for name, array in tensors.items():
        array = np.ascontiguousarray(array, dtype=np.float32)
        kind = (types or {}).get(name, qtype)
        if array.ndim == 2 and kind is not gguf.GGMLQuantizationType.F32:
            if kind is gguf.GGMLQuantizationType.F16:
                writer.add_tensor(name, array.astype(np.float16))
            else:
                writer.add_tensor(name, gguf.quants.quantize(array, kind), raw_dtype=kind)
        else:
            writer.add_tensor(name, array)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    return out


def _add(writer: gguf.GGUFWriter, key: str, value: Any) -> None:
    if isinstance(value, bool):
        writer.add_bool(key, value)
    elif isinstance(value, int):
        writer.add_uint32(key, value) if value >= 0 else writer.add_int32(key, value)
    elif isinstance(value, float):
        writer.add_float32(key, value)
    elif isinstance(value, str):
        writer.add_string(key, value)
    elif isinstance(value, list):
        writer.add_array(key, value)
    else:
        raise TypeError(f"{key}: {type(value).__name__}")


