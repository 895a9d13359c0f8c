"""LoRA adapters on one base: greedy fp32 output with an adapter equals transformers with that adapter merged into
its weights (W + s B A, s = alpha / r or alpha / sqrt(r) with rsLoRA), for ranks 8, 16 and 64, attention-only and
all-linear targets, alone and in one mixed batch of 4 adapters + the base model, under preemption and LRU eviction of
a small pool, with tensor parallelism (2 ranks, gloo), the host tier, speculation and a grammar; prefixes are never
shared across adapters; bad adapters are refused naming the adapter and the module."""

from __future__ import annotations

import math
import re
from pathlib import Path

import pytest
import torch
from transformers import AutoModelForCausalLM

from sprig import Engine
from sprig.runtime.model.checkpoints import checkpoint_path
from sprig.runtime.model.config import load_model_config
from sprig.runtime.model.lora_adapter import (
    ATTENTION_MODULES,
    MODULES,
    LoraError,
    LoraErrorKind,
    random_adapter_weights,
    read_adapter,
    write_adapter,
)

ATTN = sorted(ATTENTION_MODULES)
# name → (rank, alpha, targets, rsLoRA)
ADAPTERS = {"r8-attn": (8, 16.0, ATTN, False), "r8-all": (8, 8.0, MODULES, False),
            "r16-attn": (16, 32.0, ATTN, True), "r16-all": (16, 24.0, MODULES, False),
            "r64-attn": (64, 64.0, ATTN, False), "r64-all": (64, 32.0, MODULES, True)}
MIXED = ["r8-all", "r16-attn", "r64-all", "r64-attn", None]  # 4 adapters and the base model in one batch
GREEDY = {"max_new_tokens": 10, "temperature": 0.0, "ignore_eos": True}
OPTIONS = {"dtype": "float32", "num_threads": 1, "max_total_tokens": 4096}
PROMPT = list(range(7, 31))
pytestmark = pytest.mark.timeout(300)


@pytest.fixture(scope="module")
def base() -> Path:
    return checkpoint_path("tiny-llama")


@pytest.fixture(scope="module")
def adapters(base: Path, tmp_path_factory) -> dict[str, tuple[Path, dict[str, torch.Tensor]]]:
    cfg = load_model_config(base)
    root = tmp_path_factory.mktemp("adapters")
    out = {}
    for seed, (name, (rank, alpha, targets, rslora)) in enumerate(ADAPTERS.items()):
        weights = random_adapter_weights(cfg, rank, targets, seed=seed, std=0.6 / math.sqrt(rank))
        out[name] = (write_adapter(root / name, weights, rank, alpha, targets, rslora), weights)
    return out


def lora_paths(adapters, names=ADAPTERS) -> list[str]:
    return [f"{n}={adapters[n][0]}" for n in names]


def merged_greedy(base: Path, adapter: tuple[Path, dict[str, torch.Tensor]] | None, prompts: list[list[int]],
                  n: int) -> list[list[int]]:
    """transformers' greedy tokens for each prompt with the adapter merged by hand from its raw tensors."""
    hf = AutoModelForCausalLM.from_pretrained(base, dtype=torch.float32).eval()
    if adapter is not None:
        name = adapter[0].name
        rank, alpha, _, rslora = ADAPTERS[name]
        scale = alpha / math.sqrt(rank) if rslora else alpha / rank
        state = hf.state_dict()
        for key, a in adapter[1].items():
            if key.endswith("lora_A.weight"):
                b = adapter[1][key.replace("lora_A", "lora_B")]
                state[key.removeprefix("base_model.model.").replace(".lora_A", "")] += scale * b @ a
        hf.load_state_dict(state)
    outs = []
    for ids in prompts:
        seq = list(ids)
        with torch.no_grad():
            for _ in range(n):
                seq.append(int(hf(torch.tensor([seq])).logits[0, -1].argmax()))
        outs.append(seq[len(ids):])
    return outs


@pytest.fixture(scope="module")
def reference(base, adapters) -> dict[str | None, list[int]]:
    names: list[str | None] = [*ADAPTERS, None]
    return {n: merged_greedy(base, None if n is None else adapters[n], [PROMPT], GREEDY["max_new_tokens"])[0]
            for n in names}


def test_each_adapter_alone_and_a_mixed_batch_equal_merged_transformers(base, adapters, reference):
    assert len({tuple(v) for v in reference.values()}) == len(reference)  # every adapter changes the output
    with Engine(str(base), lora_paths=lora_paths(adapters), **OPTIONS) as engine:
        for name in ADAPTERS:
            assert engine.generate(input_ids=PROMPT, sampling_params=GREEDY, lora_path=name)["output_ids"] == \
                reference[name], name
        mixed = engine.generate(input_ids=[PROMPT] * len(MIXED), sampling_params=GREEDY, lora_path=MIXED)
        assert [r["output_ids"] for r in mixed] == [reference[n] for n in MIXED]


def test_preemption_and_lru_eviction_of_a_two_slot_pool_keep_outputs(base, adapters):
    """A pool too small for every request forces preemption; two slots for four adapters force evictions."""
    names = [MIXED[i % len(MIXED)] for i in range(25)]
    prompts = [list(range(7 + 3 * i, 40 + 3 * i)) for i in range(25)]
    greedy = {**GREEDY, "max_new_tokens": 24}
    expected = {n: merged_greedy(base, None if n is None else adapters[n], prompts[i::5], 24)
                for i, n in enumerate(MIXED)}
    with Engine(str(base), lora_paths=lora_paths(adapters, MIXED[:4]), dtype="float32", num_threads=1,
                max_total_tokens=512, page_size=16, chunked_prefill_size=64, max_loras_per_batch=2) as engine:
        out = engine.generate(input_ids=prompts, sampling_params=greedy, lora_path=names)
        stats = engine.stats()
        pool = engine.core.lora
        assert pool is not None and len(pool.resident()) <= 2
        assert all(e.pinned == 0 and e.holders == 0 for e in pool.entries.values())
    assert [r["output_ids"] for r in out] == [expected[n][i // 5] for i, n in enumerate(names)]
    assert stats["num_preemptions"] > 0


def test_prefixes_are_never_shared_across_adapters(base, adapters):
    with Engine(str(base), lora_paths=lora_paths(adapters, ["r8-all", "r16-all"]), **OPTIONS) as engine:
        first = engine.generate(input_ids=PROMPT, sampling_params=GREEDY, lora_path="r8-all")
        other = engine.generate(input_ids=PROMPT, sampling_params=GREEDY, lora_path="r16-all")
        plain = engine.generate(input_ids=PROMPT, sampling_params=GREEDY)
        again = engine.generate(input_ids=PROMPT, sampling_params=GREEDY, lora_path="r8-all")
    assert first["meta_info"]["cached_tokens"] == 0
    assert other["meta_info"]["cached_tokens"] == 0 and plain["meta_info"]["cached_tokens"] == 0
    assert again["meta_info"]["cached_tokens"] > 0 and again["output_ids"] == first["output_ids"]


@pytest.mark.parametrize("options", [
    {"enable_hierarchical_cache": True, "max_total_tokens": 256, "page_size": 16, "chunked_prefill_size": 64},
    {"speculative_algorithm": "ngram"},
    {"enable_overlap_schedule": True, "max_total_tokens": 512, "page_size": 16, "chunked_prefill_size": 64,
     "max_loras_per_batch": 2},
], ids=["host-tier", "ngram-speculation", "overlap-two-slots"])
def test_host_tier_and_speculation_keep_adapter_outputs(base, adapters, reference, options):
    names = MIXED * 3
    with Engine(str(base), lora_paths=lora_paths(adapters, MIXED[:4]), dtype="float32", num_threads=1,
                **{"max_total_tokens": 4096, **options}) as engine:
        out = engine.generate(input_ids=[PROMPT] * len(names), sampling_params=GREEDY, lora_path=names)
    assert [r["output_ids"] for r in out] == [reference[n] for n in names]


def test_grammar_constraints_hold_with_an_adapter(base, adapters):
    with Engine(str(base), lora_paths=lora_paths(adapters, ["r16-all"]), **OPTIONS) as engine:
        out = engine.generate("Answer:", {"max_new_tokens": 40, "temperature": 0.0, "regex": "(yes|no)-[0-9]{3}"},
                              lora_path="r16-all")
    assert re.fullmatch("(yes|no)-[0-9]{3}", out["text"])


def test_tp2_gives_the_tokens_of_tp1(base, adapters, reference):
    with Engine(str(base), lora_paths=lora_paths(adapters, MIXED[:4]), tp_size=2, **OPTIONS) as engine:
        out = engine.generate(input_ids=[PROMPT] * len(MIXED), sampling_params=GREEDY, lora_path=MIXED)
    assert [r["output_ids"] for r in out] == [reference[n] for n in MIXED]


# --- bad adapters ------------------------------------------------------------------------------------------------
def _write(folder: Path, cfg, rank: int, modules, **overrides) -> Path:
    weights = random_adapter_weights(cfg, rank, modules, seed=0)
    weights.update(overrides)
    return write_adapter(folder, weights, rank, 16.0, modules)


def test_bad_adapters_name_the_adapter_and_the_module(base, tmp_path):
    cfg = load_model_config(base)
    big = _write(tmp_path / "big", cfg, 128, ["v_proj"])
    with pytest.raises(LoraError, match=r"adapter big: module layers\.0\.v_proj has rank 128, over --max-lora-rank"):
        read_adapter("big", big, cfg, 64)
    wrong = _write(tmp_path / "wrong", cfg, 8, ["o_proj"], **{
        "base_model.model.model.layers.1.self_attn.o_proj.lora_B.weight": torch.zeros(65, 8)})
    with pytest.raises(LoraError, match=r"adapter wrong: module layers\.1\.o_proj has lora_A \[8, 64\] and lora_B "
                                        r"\[65, 8\]"):
        read_adapter("wrong", wrong, cfg, 64)
    (tmp_path / "pickle").mkdir()
    (tmp_path / "pickle" / "adapter_config.json").write_text('{"r": 8, "lora_alpha": 8}')
    (tmp_path / "pickle" / "adapter_model.bin").write_bytes(b"not read")
    with pytest.raises(LoraError, match="no adapter_model.safetensors.*only safetensors"):
        read_adapter("pickle", tmp_path / "pickle", cfg, 64)
    with pytest.raises(LoraError, match="not in --lora-target-modules") as info:
        read_adapter("big", big, cfg, 256, frozenset(["q_proj"]))
    assert info.value.kind is LoraErrorKind.INVALID


def test_engine_refuses_an_unknown_adapter_with_a_404_error(base, adapters):
    with Engine(str(base), lora_paths=lora_paths(adapters, ["r8-attn"]), **OPTIONS) as engine, \
            pytest.raises(LoraError, match="adapter nope is not loaded") as info:
        engine.generate(input_ids=PROMPT, sampling_params=GREEDY, lora_path="nope")
    assert info.value.kind is LoraErrorKind.NOT_FOUND
    with Engine(str(base), **OPTIONS) as engine, pytest.raises(LoraError, match="serves no LoRA adapters"):
        engine.generate(input_ids=PROMPT, sampling_params=GREEDY, lora_path="r8-attn")


def test_cpu_decode_graph_captured_without_adapters_replays_them(base, adapters):
    """bf16 on the C kernels: a decode graph recorded by a base-only step runs the adapters' products later, giving
    the eager tokens (the LoRA kernel is called on every step, with each row's slot in a static buffer)."""
    prompts = [PROMPT] * 3
    outs = []
    for graphs in (True, False):
        with Engine(str(base), lora_paths=lora_paths(adapters, ["r8-all", "r64-attn"]), dtype="bfloat16",
                    num_threads=1, max_total_tokens=2048, disable_cuda_graph=not graphs) as engine:
            engine.generate(input_ids=prompts, sampling_params=GREEDY)  # captures the size-4 graph, no adapters
            out = engine.generate(input_ids=prompts, sampling_params=GREEDY, lora_path=["r8-all", "r64-attn", None])
            outs.append([r["output_ids"] for r in out])
            runner = engine.core.runner.graph_runner
            if graphs and engine.core.model.ops.name == "cpu":
                assert runner is not None and runner.capture_error is None
                assert any("lora_apply" in g.names for g in runner.cpu_graphs.values())
    assert outs[0] == outs[1]
    assert len({tuple(o) for o in outs[0]}) == 3


def test_lru_slots_never_evict_an_adapter_in_use(base, adapters):
    """Two slots, three adapters: a pinned adapter keeps its slot, an idle one is evicted least recently used first,
    a request finding every slot pinned waits (pin is False) and loses nothing."""
    from sprig.runtime.engine.lora_manager import LoraManager
    from sprig.runtime.engine.request import Request
    from sprig.runtime.model.loader import load_model
    from sprig.runtime.model.lora_pool import LoraPool

    model = load_model(base, "float32")
    manager = LoraManager(LoraPool(model, 2, 64, frozenset(MODULES)), model.cfg)
    for name in ("r8-all", "r16-all", "r8-attn"):
        manager.register(manager.read(name, str(adapters[name][0]), confine=False))

    def request(name: str) -> Request:
        req = Request.__new__(Request)  # only the adapter fields matter to the manager
        req.lora, req.lora_slot, req.lora_held = manager.resolve(name), -1, False
        assert manager.hold(req)
        return req

    a, b, c = request("r8-all"), request("r16-all"), request("r8-attn")
    assert manager.pin(a) and manager.pin(b) and not manager.pin(c)  # both slots pinned: c waits
    manager.unpin(b)
    assert manager.pin(c) and manager.resident() == {"r8-all": a.lora_slot, "r8-attn": c.lora_slot}
    assert int(manager.pool.ranks[c.lora_slot]) == 8
    for req in (a, b, c):
        manager.drop(req)
    assert manager.resident().keys() == {"r8-all", "r8-attn"}  # idle adapters stay cached in their slots
    b2 = request("r16-all")
    assert manager.pin(b2) and "r8-all" not in manager.resident()  # r8-all was used least recently
