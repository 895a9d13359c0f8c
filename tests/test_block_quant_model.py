"""`--quantization q8_0|q4_0|q4_1`: a full-precision checkpoint quantized at load into GGML blocks that stay
quantized in memory (linears, the embedding, the LM head), computing what the dequantized weights compute.

Bounds. (1) On the torch path in fp32 the model multiplies by exactly the dequantized weights, so it must give the
logits of a full-precision checkpoint holding dequantize(quantize(w)) to float32 rounding (1e-5). (2) On the C
kernel the only further error is the activations' quantization (two codes per value, an error of max|x| / 32512
per block of 32; the int8 W8A8 kernel's one code per row errs 128 times more) and bf16, so the measured bounds of
`--quantization int8` (test_reduced_precision.py: rel. 0.16, top-1 0.83) apply with room to spare. (3) Against the original weights, q8_0's weight error is at most max|w| / 254 per block of 32,
no more than int8's max|w| / 254 per row, but q8_0 also quantizes the embedding and a tied LM head. Measured on
the four tiny checkpoints (bf16 and fp32): q8_0 rel. 0.048-0.162, top-1 0.906-0.984; int8 0.049-0.141,
0.875-0.984. The bound leaves test_reduced_precision.py's 1.5x headroom: rel. < 0.25, top-1 >= 0.86. 4-bit weights
(an error up to max|w| / 16 per block) on these random-weight tiny models move the logits by about their own size
(measured 0.85-1.0), so q4 is checked through (1) and (2) only.
"""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
import torch
from kernel_paths import needs_kernels
from safetensors.torch import load_file, save_file

from sprig.kernels.ggml_quants import dequantize, quantize
from sprig.runtime.model.block_quant import (
    BLOCK_QUANTIZATIONS,
    BlockQuantEmbedding,
    BlockQuantLinear,
    resident_bytes,
)
from sprig.runtime.model.kv_pool import KVPool, PoolSize
from sprig.runtime.model.loader import load_model
from sprig.runtime.model.runner import ModelRunner, SeqInput

IDS = list(range(3, 67))


def _logits(path, dtype: str, quantization: str | None) -> torch.Tensor:
    model = load_model(path, dtype, quantization)
    pool = KVPool(model.cfg, PoolSize(8, 16), model.dtype)
    return ModelRunner(model, pool).forward([SeqInput(IDS, 0, pool.alloc(4), all_logits=True)]).logits.float()


def _dequantized_copy(src: Path, dst: Path, quantization: str) -> Path:
    """The checkpoint with every 2-D weight replaced by dequantize(quantize(w)) in float32."""
    qtype = BLOCK_QUANTIZATIONS[quantization]
    shutil.copytree(src, dst)
    tensors = load_file(str(src / "model.safetensors"))
    out = {name: dequantize(quantize(w, qtype), qtype, w.shape[1]) if w.dim() == 2 else w.float()
           for name, w in tensors.items()}
    save_file(out, str(dst / "model.safetensors"), metadata={"format": "pt"})
    return dst


def _rel_top1(got: torch.Tensor, want: torch.Tensor) -> tuple[float, float]:
    rel = ((got - want).abs().max() / want.abs().max()).item()
    return rel, (got.argmax(-1) == want.argmax(-1)).float().mean().item()


@pytest.mark.parametrize("quantization", list(BLOCK_QUANTIZATIONS))
@pytest.mark.parametrize("name", ["tiny-llama", "tiny-qwen2"])
def test_the_torch_path_computes_the_dequantized_weights(tiny_paths, tmp_path, monkeypatch, name, quantization):
    copy = _dequantized_copy(Path(tiny_paths[name]), tmp_path / "dq", quantization)
    want = _logits(copy, "float32", None)
    monkeypatch.setenv("SPRIG_CPU_ISA", "none")  # the torch reference path
    got = _logits(tiny_paths[name], "float32", quantization)
    assert _rel_top1(got, want)[0] < 1e-5


@needs_kernels
@pytest.mark.parametrize("quantization", list(BLOCK_QUANTIZATIONS))
@pytest.mark.parametrize("name", ["tiny-llama", "tiny-qwen2"])
def test_the_kernel_stays_within_the_w8a8_bounds(tiny_paths, tmp_path, monkeypatch, name, quantization):
    monkeypatch.delenv("SPRIG_CPU_ISA", raising=False)
    want = _logits(_dequantized_copy(Path(tiny_paths[name]), tmp_path / "dq", quantization), "float32", None)
    rel, top1 = _rel_top1(_logits(tiny_paths[name], "bfloat16", quantization), want)
    assert rel < 0.16 and top1 >= 0.83, (rel, top1)


@pytest.mark.parametrize("name", ["tiny-llama", "tiny-qwen2"])
def test_q8_0_stays_close_to_the_full_precision_model(tiny_paths, name):
    want = _logits(tiny_paths[name], "float32", None)
    rel, top1 = _rel_top1(_logits(tiny_paths[name], "bfloat16", "q8_0"), want)
    assert rel < 0.25 and top1 >= 0.86, (rel, top1)


@needs_kernels
def test_weights_stay_quantized_and_a_tied_head_shares_the_table(tiny_paths, monkeypatch):
    monkeypatch.delenv("SPRIG_CPU_ISA", raising=False)
    model = load_model(tiny_paths["tiny-qwen2"], "bfloat16", "q4_0")  # a tied LM head
    assert isinstance(model.embed_tokens, BlockQuantEmbedding) and isinstance(model.lm_head, BlockQuantLinear)
    assert model.lm_head.weight is model.embed_tokens.weight
    quantized = [m for m in model.modules() if isinstance(m, BlockQuantLinear | BlockQuantEmbedding)]
    raw = sum(m.weight.numel() for m in {id(m.weight): m for m in quantized}.values())
    others = sum(t.numel() * t.element_size() for n, t in model.named_parameters() if not n.endswith("weight")
                 or t.dim() == 1)
    assert resident_bytes(model) - model.cos_sin_cache.numel() * 4 <= 1.15 * raw + others
    assert model.linear_kernels.startswith("q4_0 (") and model.graph_blocker is None
    assert model.lm_head.out_dtype == torch.float32  # the C kernel writes the logits in fp32, no .to() after it
    proj = model.layers[0].mlp.down_proj
    assert proj.weight.dtype == torch.uint8 and proj.isa is not None


def test_bad_block_quantization_requests_are_one_line_errors(tiny_paths):
    from sprig.runtime.errors import CheckpointError
    from sprig.runtime.model.parallel import TPContext

    with pytest.raises(CheckpointError, match="supported: int8, fp8, q8_0, q4_0, q4_1"):
        load_model(tiny_paths["tiny-llama"], "bfloat16", "q4_k")
    with pytest.raises(CheckpointError, match="tensor parallelism"):
        load_model(tiny_paths["tiny-llama"], "bfloat16", "q4_0", tp=TPContext(rank=0, size=2))


@needs_kernels
@pytest.mark.parametrize("quantization", ["q4_0", "q8_0"])
def test_a_cpu_graph_decode_step_equals_the_eager_one(tiny_paths, monkeypatch, quantization):
    monkeypatch.delenv("SPRIG_CPU_ISA", raising=False)
    model = load_model(tiny_paths["tiny-qwen2"], "bfloat16", quantization)
    pool = KVPool(model.cfg, PoolSize(256, 16), torch.bfloat16)
    runner = ModelRunner(model, pool)
    pages = [pool.alloc(4) for _ in range(3)]
    for n, p in zip((5, 33, 17), pages, strict=True):
        runner.forward([SeqInput(list(range(3, 3 + n)), 0, p)])
    step = [SeqInput([7], n, p) for n, p in zip((5, 33, 17), pages, strict=True)]
    results = {}
    for use_graphs in (False, True):
        snapshot = pool.buffer.clone()
        runner.enable_decode_graphs(max_context=64, max_batch=4, use_graphs=use_graphs)
        results[use_graphs] = [runner.forward(step).logits.clone() for _ in range(2)]
        pool.buffer.copy_(snapshot)
    assert runner.graph_runner.cpu_graphs and runner.graph_runner.capture_error is None
    names = next(iter(runner.graph_runner.cpu_graphs.values())).names
    assert "bq_embedding" in names and "bq_linear" in names
    for eager, replayed in zip(results[False], results[True], strict=True):
        assert eager.dtype == torch.float32 and torch.equal(eager, replayed)
