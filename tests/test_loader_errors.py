"""A broken checkpoint folder gives one clear CheckpointError naming the problem."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from safetensors.torch import load_file, save_file

from sprig.runtime.errors import CheckpointError
from sprig.runtime.model.loader import load_model


@pytest.fixture()
def ckpt(tmp_path: Path, tiny_paths) -> Path:
    dst = tmp_path / "ckpt"
    shutil.copytree(tiny_paths["tiny-llama"], dst)
    return dst


def edit_config(folder: Path, **changes) -> None:
    cfg = json.loads((folder / "config.json").read_text())
    cfg.update(changes)
    (folder / "config.json").write_text(json.dumps(cfg))


def edit_tensors(folder: Path, fn) -> None:
    tensors = load_file(folder / "model.safetensors")
    fn(tensors)
    save_file(tensors, folder / "model.safetensors", metadata={"format": "pt"})


def test_missing_folder(tmp_path):
    with pytest.raises(CheckpointError, match="model folder not found"):
        load_model(tmp_path / "nope")


def test_missing_config(ckpt):
    (ckpt / "config.json").unlink()
    with pytest.raises(CheckpointError, match="no config.json"):
        load_model(ckpt)


def test_unsupported_architecture_lists_supported_ones(ckpt):
    edit_config(ckpt, architectures=["GPT2LMHeadModel"])
    with pytest.raises(CheckpointError, match="GPT2LMHeadModel.*LlamaForCausalLM, MistralForCausalLM"):
        load_model(ckpt)


def test_missing_tensor_is_named(ckpt):
    edit_tensors(ckpt, lambda t: t.pop("model.layers.1.mlp.up_proj.weight"))
    with pytest.raises(CheckpointError, match=r"missing tensors.*model\.layers\.1\.mlp\.up_proj\.weight"):
        load_model(ckpt)


def test_unexpected_tensor_is_named(ckpt):
    edit_tensors(ckpt, lambda t: t.__setitem__("model.layers.0.extra.weight", t["model.norm.weight"].clone()))
    with pytest.raises(CheckpointError, match=r"unexpected tensor names.*model\.layers\.0\.extra\.weight"):
        load_model(ckpt)


def test_wrong_shape_is_named(ckpt):
    def shrink(t):
        t["model.norm.weight"] = t["model.norm.weight"][:10].clone()

    edit_tensors(ckpt, shrink)
    with pytest.raises(CheckpointError, match=r"model\.norm\.weight has shape \(10,\)"):
        load_model(ckpt)


def test_corrupt_safetensors(ckpt):
    data = (ckpt / "model.safetensors").read_bytes()
    (ckpt / "model.safetensors").write_bytes(data[: len(data) // 2])
    with pytest.raises(CheckpointError, match="corrupt safetensors file model.safetensors"):
        load_model(ckpt)


def test_garbage_header(ckpt):
    (ckpt / "model.safetensors").write_bytes(b"\xff" * 64)
    with pytest.raises(CheckpointError, match="corrupt safetensors"):
        load_model(ckpt)


def test_unsupported_dtype(ckpt):
    with pytest.raises(CheckpointError, match="unsupported dtype 'float8'"):
        load_model(ckpt, dtype="float8")


def test_unsupported_quantization(ckpt):
    with pytest.raises(CheckpointError, match="unsupported quantization 'fp4'"):
        load_model(ckpt, quantization="fp4")


def test_sharded_checkpoint_with_index_loads(ckpt):
    tensors = load_file(ckpt / "model.safetensors")
    names = sorted(tensors)
    half = len(names) // 2
    shards = {"model-00001-of-00002.safetensors": names[:half], "model-00002-of-00002.safetensors": names[half:]}
    for file, keys in shards.items():
        save_file({k: tensors[k] for k in keys}, ckpt / file, metadata={"format": "pt"})
    (ckpt / "model.safetensors").unlink()
    weight_map = {k: f for f, keys in shards.items() for k in keys}
    (ckpt / "model.safetensors.index.json").write_text(json.dumps({"metadata": {}, "weight_map": weight_map}))
    model = load_model(ckpt)
    assert model.cfg.num_layers == 2


def test_missing_shard_is_named(ckpt):
    (ckpt / "model.safetensors.index.json").write_text(
        json.dumps({"weight_map": {"model.norm.weight": "model-00009.safetensors"}})
    )
    with pytest.raises(CheckpointError, match="model-00009.safetensors"):
        load_model(ckpt)
