"""fp8 weights: checkpoints in the vLLM / SGLang / compressed-tensors layouts load and match transformers on their
dequantized weights; `--quantization fp8` quantizes at load; malformed checkpoints get one-line errors.

Measured (64 positions, tiny checkpoints, vs fp32 transformers on the original weights): `--quantization fp8`
(per row) rel. max error 0.226-0.254, top-1 agreement 0.72-0.78 (fp32 and bf16 activations). fp8 loses 4 of
bf16's mantissa bits on every weight and these random checkpoints have small logit margins; a per-tensor
checkpoint measured 0.28-0.46 / 0.64-0.66. Against transformers on the dequantized weights every layout matches to
4e-7 (fp32). The bounds leave ~1.3x headroom.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file, save_file
from transformers import AutoModelForCausalLM

from sprig.runtime.errors import CheckpointError
from sprig.runtime.model.fp8_checkpoints import Fp8Layout, write_fp8_checkpoint
from sprig.runtime.model.kv_pool import KVPool, PoolSize
from sprig.runtime.model.loader import load_model
from sprig.runtime.model.quantization import FP8, Fp8Linear
from sprig.runtime.model.runner import ModelRunner, SeqInput

LAYOUTS = [(Fp8Layout.FP8_TENSOR, (128, 128)), (Fp8Layout.FP8_BLOCK, (128, 128)), (Fp8Layout.FP8_BLOCK, (16, 32)),
           (Fp8Layout.CT_TENSOR, (128, 128)), (Fp8Layout.CT_CHANNEL, (128, 128)), (Fp8Layout.CT_BLOCK, (32, 16))]
IDS = torch.randint(3, 2000, (64,), generator=torch.Generator().manual_seed(5)).tolist()


def _logits(path, dtype: str = "float32", quantization: str | None = None) -> torch.Tensor:
    model = load_model(path, dtype, quantization)
    pool = KVPool(model.cfg, PoolSize(8, 16), model.dtype)
    return ModelRunner(model, pool).forward([SeqInput(IDS, 0, pool.alloc(4), all_logits=True)]).logits.float()


def _hf_logits(path) -> torch.Tensor:
    hf = AutoModelForCausalLM.from_pretrained(path, dtype=torch.float32).eval()
    with torch.no_grad():
        return hf(torch.tensor([IDS])).logits[0]


def _dequantized_copy(src: Path, dst: Path) -> Path:
    """The fp8 checkpoint `src` with every weight multiplied out to float32 (and no quantization_config)."""
    dst.mkdir()
    for f in src.iterdir():
        if f.name != "model.safetensors":
            shutil.copy(f, dst / f.name)
    config = json.loads((dst / "config.json").read_text())
    qc = config.pop("quantization_config")
    (dst / "config.json").write_text(json.dumps(config))
    groups = qc.get("config_groups", {})
    block = qc.get("weight_block_size") or next(iter(groups.values()), {}).get("weights", {}).get("block_structure")
    tensors = load_file(src / "model.safetensors")
    out = {}
    for name, w in tensors.items():
        if name.endswith(("weight_scale", "weight_scale_inv")):
            continue
        if w.dtype == FP8:
            base = name.removesuffix("weight")
            s = tensors.get(base + "weight_scale", tensors.get(base + "weight_scale_inv")).float()
            s = s.reshape(1, 1) if s.numel() == 1 else s
            if block and s.shape[1] != 1:
                s = s.repeat_interleave(block[0], 0)[: w.shape[0]].repeat_interleave(block[1], 1)[:, : w.shape[1]]
            w = w.float() * s
        out[name] = w
    save_file(out, str(dst / "model.safetensors"), metadata={"format": "pt"})
    return dst


@pytest.mark.parametrize(("layout", "block"), LAYOUTS, ids=lambda v: getattr(v, "value", None) or f"{v[0]}x{v[1]}")
@pytest.mark.parametrize("name", ["tiny-llama", "tiny-qwen2"])
def test_fp8_checkpoints_match_transformers_on_the_dequantized_weights(tiny_paths, tmp_path, name, layout, block):
    fp8 = write_fp8_checkpoint(Path(tiny_paths[name]), tmp_path / "fp8", layout, block)
    want = _hf_logits(_dequantized_copy(fp8, tmp_path / "dequantized"))
    model = load_model(fp8, "float32")
    proj = model.layers[0].self_attn.qkv_proj
    assert isinstance(proj, Fp8Linear) and proj.weight.dtype == FP8
    got = _logits(fp8)
    assert ((got - want).abs().max() / want.abs().max()).item() < 1e-5


@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
@pytest.mark.parametrize("name", ["tiny-llama", "tiny-qwen2"])
def test_quantization_fp8_at_load_stays_within_measured_bounds(tiny_paths, name, dtype):
    path = tiny_paths[name]
    want = _hf_logits(path)
    out = _logits(path, dtype, "fp8")
    rel = ((out - want).abs().max() / want.abs().max()).item()
    top1 = (out.argmax(-1) == want.argmax(-1)).float().mean().item()
    assert rel < 0.33 and top1 >= 0.65, (rel, top1)
    proj = load_model(path, dtype, "fp8").layers[0].mlp.down_proj
    assert isinstance(proj, Fp8Linear) and proj.weight_scale.shape == (proj.weight.shape[0], 1)


def test_fp8_linear_upcasts_tile_by_tile_to_the_whole_product(monkeypatch):
    lin = Fp8Linear(48, 40, True, torch.float32, col_block=16)
    g = torch.Generator().manual_seed(0)
    lin.weight.data.copy_(torch.randn(40, 48, generator=g).to(FP8))
    lin.weight_scale.data.copy_(torch.rand(40, 3, generator=g) + 0.5)
    lin.bias.data.copy_(torch.randn(40, generator=g))
    x = torch.randn(5, 48, generator=g)
    w = lin.weight.float() * lin.weight_scale.repeat_interleave(16, dim=1)
    monkeypatch.setattr(Fp8Linear, "TILE_ROWS", 16)  # three tiles, the last one short
    torch.testing.assert_close(lin(x), x @ w.T + lin.bias)


@pytest.fixture(scope="module")
def block_checkpoint(tiny_paths, tmp_path_factory) -> Path:
    return write_fp8_checkpoint(Path(tiny_paths["tiny-llama"]), tmp_path_factory.mktemp("fp8"), Fp8Layout.FP8_BLOCK,
                                (16, 32))


def _broken_copy(src: Path, dst: Path, edit) -> Path:
    shutil.copytree(src, dst)
    tensors = load_file(dst / "model.safetensors")
    config = json.loads((dst / "config.json").read_text())
    edit(tensors, config)
    save_file(tensors, str(dst / "model.safetensors"), metadata={"format": "pt"})
    (dst / "config.json").write_text(json.dumps(config))
    return dst


SCALE = "model.layers.0.self_attn.q_proj.weight_scale_inv"
WEIGHT = "model.layers.0.self_attn.q_proj.weight"
BROKEN = {
    "scale shape": (lambda t, c: t.__setitem__(SCALE, torch.ones(3, 3)), SCALE),
    "weight not fp8": (lambda t, c: t.__setitem__(WEIGHT, t[WEIGHT].float()), "expected float8_e4m3fn"),
    "missing scale": (lambda t, c: t.pop(SCALE), "missing tensors"),
    "unknown method": (lambda t, c: c["quantization_config"].__setitem__("quant_method", "squeezellm"),
                       "'squeezellm'"),
    "bad block": (lambda t, c: c["quantization_config"].__setitem__("weight_block_size", [128]),
                  "weight_block_size"),
    "e5m2 weights": (lambda t, c: c["quantization_config"].__setitem__("fmt", "e5m2"), "e5m2"),
}


@pytest.mark.parametrize("case", list(BROKEN))
def test_malformed_fp8_checkpoints_get_a_one_line_error(block_checkpoint, tmp_path, case):
    edit, needle = BROKEN[case]
    broken = _broken_copy(block_checkpoint, tmp_path / "broken", edit)
    with pytest.raises(CheckpointError) as err:
        load_model(broken, "float32")
    message = str(err.value)
    assert needle in message and "\n" not in message


def test_an_fp8_checkpoint_cannot_be_requantized_to_int8(block_checkpoint):
    with pytest.raises(CheckpointError, match="fp8 already"):
        load_model(block_checkpoint, "float32", "int8")


def test_quantization_fp8_smollm2_perplexity_stays_near_fp32(smollm2_folder, smollm2_fp32_perplexity):
    """--quantization fp8 (e4m3, a scale per row) on the real SmolLM2-135M: the short text's perplexity (measured
    -0.36 % from sprig fp32's 18.833, tests/perplexity_helpers.py) within 1.5 % of fp32's."""
    from perplexity_helpers import assert_perplexity_near, short_perplexity

    ppl = short_perplexity(smollm2_folder, dtype="float32", quantization="fp8")
    assert_perplexity_near(ppl.value, smollm2_fp32_perplexity, 1.5)
