"""Phi-3, Granite, GPT-NeoX and StableLM (issue 31) beyond the logit parity of `test_model_parity.py`: the engine's
output alone, batched and from the radix cache; the torch, Triton and C kernels; LongRoPE's choice of factors; and the
one-line refusals (CPU graphs over partial rotary: `test_cpu_graph.py`)."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest
import torch
from transformers import AutoModelForCausalLM

from sprig import Engine
from sprig.runtime.errors import CheckpointError
from sprig.runtime.model.checkpoints import FAMILY_CHECKPOINTS, checkpoint_path
from sprig.runtime.model.config import RopeConfig, load_model_config
from sprig.runtime.model.kv_pool import KVPool, PoolSize
from sprig.runtime.model.loader import load_model
from sprig.runtime.model.parallel import TPContext
from sprig.runtime.model.rope import rope_cos_sin_cache
from sprig.runtime.model.runner import ModelRunner, SeqInput

TOL = 1e-4
PARAMS = {"max_new_tokens": 16, "temperature": 0, "ignore_eos": True}


def _prompts() -> list[list[int]]:
    """Four prompts over two shared prefixes, so the radix cache serves part of each after the first."""
    gen = torch.Generator().manual_seed(5)
    heads = [torch.randint(3, 2000, (n,), generator=gen).tolist() for n in (21, 34)]
    tails = [torch.randint(3, 2000, (n,), generator=gen).tolist() for n in (3, 9, 1, 14)]
    return [heads[i % 2] + tail for i, tail in enumerate(tails)]


def _logits(model, ids: list[int]) -> torch.Tensor:
    runner = ModelRunner(model, KVPool(model.cfg, PoolSize(64, 16), torch.float32))
    pages = runner.pool.alloc(-(-len(ids) // 16))
    return runner.forward([SeqInput(ids, 0, pages, all_logits=True)]).logits


@pytest.mark.parametrize("name", FAMILY_CHECKPOINTS)
def test_batched_and_cached_output_equals_each_request_alone(name):
    path = str(checkpoint_path(name))
    prompts = _prompts()
    with Engine(path, dtype="float32", max_total_tokens=2048, disable_radix_cache=True) as engine:
        alone = [engine.generate(input_ids=p, sampling_params=PARAMS)["output_ids"] for p in prompts]
    with Engine(path, dtype="float32", max_total_tokens=2048) as engine:
        batched = [r["output_ids"] for r in engine.generate(input_ids=prompts, sampling_params=PARAMS)]
        again = engine.generate(input_ids=prompts, sampling_params=PARAMS)
    cached = [r["output_ids"] for r in again]
    assert all(r["meta_info"]["cached_tokens"] > 0 for r in again)
    assert batched == alone
    assert cached == alone


@pytest.mark.parametrize(("name", "blocker"), [("tiny-phi3-long", None), ("tiny-granite", "aten.mul"),
                                              ("tiny-gpt-neox", "aten.layer_norm"),
                                              ("tiny-stablelm-sequential", "aten.layer_norm")])
def test_bf16_decodes_from_cpu_graphs_where_they_capture_and_eagerly_elsewhere(name, blocker):
    """What the README's families table says: Phi-3 decodes from CPU graphs; Granite's multipliers and the
    LayerNorm families' norms are torch ops, so their capture stops there, and they decode eagerly, the same."""
    outputs = []
    for disable in (True, False):
        with Engine(str(checkpoint_path(name)), dtype="bfloat16", disable_cuda_graph=disable,
                    max_total_tokens=2048) as engine:
            outputs.append([r["output_ids"] for r in engine.generate(input_ids=_prompts(), sampling_params=PARAMS)])
            graphs = engine.core.runner.graph_runner
    assert graphs is not None and outputs[0] == outputs[1]
    if blocker is None:
        assert graphs.cpu_graphs and graphs.capture_error is None
    else:
        assert blocker in graphs.capture_error and not graphs.cpu_graphs


@pytest.mark.parametrize("name", ["tiny-phi3-long", "tiny-gpt-neox", "tiny-stablelm", "tiny-granite"])
def test_torch_kernels_match_transformers(name):
    """The torch reference kernels (the parity tests run the C ones) on partial rotary and the other parts."""
    path = checkpoint_path(name)
    hf = AutoModelForCausalLM.from_pretrained(path, dtype=torch.float32).eval()
    ids = _prompts()[1]
    with torch.no_grad():
        expected = hf(torch.tensor([ids])).logits[0]
    got = _logits(load_model(path, "float32", attention_backend="torch"), ids)
    assert (got - expected).abs().max().item() < TOL


TRITON_SCRIPT = """
import json, sys, torch
torch.set_num_threads(1)
from sprig.runtime.model.loader import load_model
from sprig.runtime.model.kv_pool import KVPool, PoolSize
from sprig.runtime.model.runner import ModelRunner, SeqInput
ids = json.loads(sys.argv[2])
out = {}
for backend in ("torch", "triton"):
    model = load_model(sys.argv[1], "float32", attention_backend=backend)
    runner = ModelRunner(model, KVPool(model.cfg, PoolSize(64, 16), torch.float32))
    pages = runner.pool.alloc(-(-len(ids) // 16))
    out[backend] = runner.forward([SeqInput(ids, 0, pages, all_logits=True)]).logits
print(json.dumps((out["triton"] - out["torch"]).abs().max().item()))
"""


@pytest.mark.parametrize("name", ["tiny-phi3-long", "tiny-gpt-neox"])
def test_triton_kernels_match_torch_kernels(name, tmp_path):
    """The Triton twins (interpreted on the CPU) on partial rotary: the rope kernel turns strided views of each
    head's first channels and leaves the rest."""
    pytest.importorskip("triton", reason="triton is not installed")
    env = {**os.environ, "TRITON_INTERPRET": "1", "OMP_NUM_THREADS": "1"}
    proc = subprocess.run([sys.executable, "-c", TRITON_SCRIPT, str(checkpoint_path(name)), json.dumps(_prompts()[0])],
                          capture_output=True, text=True, timeout=600, env=env, cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert json.loads(proc.stdout.strip().splitlines()[-1]) < TOL


def test_longrope_picks_long_factors_only_past_the_pretraining_length():
    rope = RopeConfig(10000.0, "longrope", {"short_factor": [1.0, 2.0], "long_factor": [4.0, 8.0],
                                            "original_max_position_embeddings": 16})
    short, long = rope_cos_sin_cache(rope, 4, 64, 16), rope_cos_sin_cache(rope, 4, 64, 17)
    scale = (1 + torch.log(torch.tensor(4.0)) / torch.log(torch.tensor(16.0))).sqrt()  # factor 64 / 16
    assert torch.allclose(short[1, :2], torch.cos(torch.tensor([1.0, 0.005])) * scale)
    assert torch.allclose(long[1, :2], torch.cos(torch.tensor([0.25, 0.00125])) * scale)


def test_a_served_context_within_the_pretraining_length_takes_the_short_factors(tmp_path):
    """Phi-3-128k-like: max_position_embeddings past original_max_position_embeddings, so the model's own context
    takes the long factors; capped at the pretraining length (`--context-length`) it takes the short ones, which
    transformers uses for every sequence that short, and equals it."""
    path = _edited_config("tiny-phi3-short", tmp_path, max_position_embeddings=4096)
    hf = AutoModelForCausalLM.from_pretrained(path, dtype=torch.float32).eval()
    ids = _prompts()[3]
    with torch.no_grad():
        expected = hf(torch.tensor([ids])).logits[0]
    capped = _logits(load_model(path, "float32", context_length=2048), ids)
    assert (capped - expected).abs().max().item() < TOL
    assert (_logits(load_model(path, "float32"), ids) - expected).abs().max().item() > 100 * TOL
    with Engine(path, dtype="float32", max_total_tokens=2048, context_length=2048) as engine:
        assert engine.core.model.cos_sin_cache.shape[0] == 2048


def _edited_config(name: str, tmp_path, **changes) -> str:
    """A copy of checkpoint `name`'s folder (its files linked) with config.json fields changed."""
    source = checkpoint_path(name)
    for f in source.iterdir():
        (tmp_path / f.name).symlink_to(f)
    raw = json.loads((source / "config.json").read_text())
    (tmp_path / "config.json").unlink()
    (tmp_path / "config.json").write_text(json.dumps({**raw, **changes}))
    return str(tmp_path)


@pytest.mark.parametrize(("name", "old_style"), [
    ("tiny-phi3-long", {"rope_scaling": {"type": "su", "short_factor": [1.0, 1.3, 1.9, 2.6, 3.4, 4.1, 5.0, 6.2],
                                         "long_factor": [1.1, 2.0, 3.5, 5.5, 8.0, 11.0, 15.0, 20.0]},
                        "rope_theta": 10000.0, "partial_rotary_factor": 0.5}),
    ("tiny-gpt-neox-sequential", {"rotary_pct": 0.5, "rotary_emb_base": 10000}),  # 0.5: not the default
    ("tiny-stablelm-sequential", {"partial_rotary_factor": 0.5, "rope_theta": 10000}),
])
def test_transformers_4_configs_read_as_transformers_5_ones(name, old_style, tmp_path):
    """Real checkpoints' configs predate `rope_parameters`: rope_scaling ("su" is LongRoPE's old name), rope
    fields and the rotated fraction (`rotary_pct` for GPT-NeoX) at the top."""
    raw = json.loads((checkpoint_path(name) / "config.json").read_text())
    old = _edited_config(name, tmp_path, **old_style)
    old_raw = json.loads((tmp_path / "config.json").read_text())
    del old_raw["rope_parameters"]
    (tmp_path / "config.json").write_text(json.dumps(old_raw))
    assert "rope_parameters" in raw and load_model_config(old) == load_model_config(checkpoint_path(name))


def test_unsupported_architecture_lists_the_families_in_one_line(tmp_path):
    with pytest.raises(CheckpointError) as e:
        load_model_config(_edited_config("tiny-granite", tmp_path, architectures=["GPT2LMHeadModel"]))
    message = str(e.value)
    assert "\n" not in message and "GPT2LMHeadModel" in message
    assert all(a in message for a in ("Phi3ForCausalLM", "GraniteForCausalLM", "GPTNeoXForCausalLM",
                                      "StableLmForCausalLM", "LlamaForCausalLM"))


@pytest.mark.parametrize(("name", "changes", "says"), [
    ("tiny-stablelm", {"qk_layernorm": True}, "qk_layernorm"),
    ("tiny-gpt-neox", {"hidden_act": "relu2"}, "hidden_act"),
    ("tiny-gpt-neox", {"rotary_pct": 1.5, "rope_parameters": {"rope_theta": 10000.0}}, "rotary_pct"),
])
def test_unsupported_family_parts_are_refused_in_one_line(name, changes, says, tmp_path):
    with pytest.raises(CheckpointError, match=says) as e:
        load_model_config(_edited_config(name, tmp_path, **changes))
    assert "\n" not in str(e.value)


def test_longrope_factors_of_the_wrong_length_are_refused(tmp_path):
    raw = json.loads((checkpoint_path("tiny-phi3-long") / "config.json").read_text())
    rope = {**raw["rope_parameters"], "long_factor": [1.0, 2.0]}
    with pytest.raises(CheckpointError, match="long_factor must hold 8 values"):
        load_model(_edited_config("tiny-phi3-long", tmp_path, rope_parameters=rope), "float32")


def test_tensor_parallelism_is_refused_for_the_families():
    with pytest.raises(CheckpointError, match="tensor or pipeline parallelism is not supported yet"):
        load_model(checkpoint_path("tiny-gpt-neox"), "float32", tp=TPContext(rank=0, size=2))
