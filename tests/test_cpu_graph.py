"""CPU decode graphs: a forward's C-kernel calls, recorded once and replayed with one call into C, compute what the
forward computes, on whatever the static inputs hold at replay; anything a graph cannot replay stops the capture
with a reason instead of being frozen into it."""

from __future__ import annotations

import pytest
import torch

from sprig import Engine
from sprig.kernels import cpu_elementwise as ew
from sprig.kernels.cpu_native import native_kernels, recording_calls
from sprig.runtime.model.checkpoints import checkpoint_path
from sprig.runtime.model.cpu_graph import GraphCaptureError, capture
from sprig.runtime.model.kv_pool import KVPool, PoolSize
from sprig.runtime.model.loader import load_model
from sprig.runtime.model.runner import ModelRunner, SeqInput

pytestmark = pytest.mark.skipif(native_kernels() is None, reason="sprig's C kernels are not built here")


def test_replay_recomputes_from_the_current_inputs():
    x = torch.randn(3, 64, dtype=torch.bfloat16)
    residual = torch.randn(3, 64, dtype=torch.bfloat16)
    weight = torch.randn(64, dtype=torch.bfloat16)

    def step() -> torch.Tensor:
        normed, _ = ew.fused_add_rms_norm(x, residual, weight, 1e-6)
        return ew.silu_and_mul(normed)

    out, graph = capture(step)
    assert graph.names == ["rms_norm", "silu_and_mul"]
    for seed in range(3):  # new values in the same buffers: replay reads them
        gen = torch.Generator().manual_seed(seed)
        x.copy_(torch.randn(3, 64, generator=gen))
        residual.copy_(torch.randn(3, 64, generator=gen))
        graph.replay()
        assert torch.equal(out, step())


def test_copies_and_gathers_are_replayed_by_the_graph_helpers():
    table = torch.randn(50, 16, dtype=torch.bfloat16)
    ids = torch.tensor([3, 7, 7, 0], dtype=torch.int64)
    x = torch.randn(4, 6, 16, dtype=torch.bfloat16)

    def run() -> tuple[torch.Tensor, torch.Tensor]:
        emb = torch.nn.functional.embedding(ids, table)
        strided = x[:, 1:5].transpose(0, 1).contiguous()  # a real copy of a 3-d strided view
        return emb, strided

    (emb, strided), graph = capture(run)
    assert graph.names == ["graph_gather", "graph_copy"]
    ids.copy_(torch.tensor([49, 1, 2, 3]))
    x.copy_(torch.randn(4, 6, 16))
    graph.replay()
    assert torch.equal(emb, table[ids])
    assert torch.equal(strided, x[:, 1:5].transpose(0, 1).contiguous())


def test_a_torch_op_stops_the_capture_and_names_itself():
    x = torch.randn(4, 8)
    with pytest.raises(GraphCaptureError, match="aten.add"):
        capture(lambda: x + 1)


def test_a_kernel_that_declines_its_input_stops_the_capture():
    lib = native_kernels()
    assert lib is not None
    x = torch.randn(2, 8)

    def declined() -> torch.Tensor:
        out = torch.empty_like(x)
        lib.silu_and_mul(x.data_ptr(), out.data_ptr(), 2, 4, 8, 7, 1)  # dtype code 7 does not exist
        return out

    with pytest.raises(GraphCaptureError, match="silu_and_mul declined"):
        capture(declined)


def test_recording_puts_the_library_back():
    lib = native_kernels()
    assert lib is not None
    before = lib.rms_norm
    seen = []
    with recording_calls(lib, lambda name, args, status: seen.append(name)):
        assert lib.rms_norm is not before
        ew.rms_norm(torch.randn(2, 32), torch.ones(32), 1e-6)
    assert lib.rms_norm is before and seen == ["rms_norm"]


def _decode_runner(path):
    """A bf16 runner with prompts of 3 lengths already in the pool, and its first decode step's inputs."""
    model = load_model(path, "bfloat16")
    pool = KVPool(model.cfg, PoolSize(512, 16), torch.bfloat16)
    runner = ModelRunner(model, pool)
    gen = torch.Generator().manual_seed(0)
    seqs = []
    for n in (5, 33, 17):
        ids = torch.randint(3, 2000, (n,), generator=gen).tolist()
        pages = pool.alloc(8)
        runner.forward([SeqInput(ids, 0, pages)])
        seqs.append(SeqInput([7], n, pages))
    return runner, pool, seqs


@pytest.mark.parametrize("arch", ["tiny-llama", "tiny-qwen3", "tiny-phi3-long"])
def test_replayed_decode_steps_equal_eager_static_steps(arch):
    """The same static-buffer steps, eager and replayed, give the same logits bit for bit (same kernels, same
    shapes), over steps whose positions, lengths and page tables change, with padding rows (3 rows → 4). Phi-3's
    partial rotary runs the C rope over strided views of each head's first channels, which a graph replays."""
    runner, pool, seqs = _decode_runner(checkpoint_path(arch))
    results = {}
    for use_graphs in (False, True):
        snapshot = pool.buffer.clone()
        runner.enable_decode_graphs(max_context=128, max_batch=8, use_graphs=use_graphs)
        steps = [list(seqs)]
        for t in range(1, 6):  # each step one token longer; the second sequence drops out after three steps
            nxt = [SeqInput([7 + t], s.prefix_len + 1, s.pages) for s in steps[-1]]
            steps.append(nxt if t != 3 else [nxt[0], nxt[2]])
        results[use_graphs] = [runner.forward(step).logits.clone() for step in steps]
        pool.buffer.copy_(snapshot)
    graphs = runner.graph_runner.cpu_graphs
    assert set(graphs) == {2, 4} and runner.graph_runner.capture_error is None
    for eager, replayed in zip(results[False], results[True], strict=True):
        assert torch.equal(eager, replayed)


def test_a_model_with_torch_linears_decodes_eagerly(tiny_paths, caplog):
    """fp32 linears run in torch: the first capture fails, says why once, and every step is still right."""
    model = load_model(tiny_paths["tiny-llama"], "float32")
    pool = KVPool(model.cfg, PoolSize(256, 16), torch.float32)
    runner = ModelRunner(model, pool)
    pages = pool.alloc(4)
    runner.forward([SeqInput(list(range(3, 20)), 0, pages)])
    snapshot = pool.buffer.clone()
    eager = runner.forward([SeqInput([5], 17, pages)]).logits.clone()
    pool.buffer.copy_(snapshot)
    runner.enable_decode_graphs(max_context=64, max_batch=4, use_graphs=True)
    with caplog.at_level("WARNING"):
        got = runner.forward([SeqInput([5], 17, pages)]).logits
    torch.testing.assert_close(got, eager, rtol=0, atol=1e-5)  # the static path's own tolerance (fp32 GEMMs)
    assert "aten." in runner.graph_runner.capture_error and not runner.graph_runner.cpu_graphs
    assert sum("CPU decode graphs are off" in r.message for r in caplog.records) == 1


@pytest.mark.parametrize("options", [{}, {"kv_cache_dtype": "int8"}, {"quantization": "int8"},
                                     {"enable_hierarchical_cache": True, "max_total_tokens": 256}],
                         ids=["bf16", "int8-kv", "w8a8", "host-tier"])
def test_engine_output_is_the_same_with_and_without_cpu_graphs(tiny_paths, options):
    """Greedy bf16 generation through the engine: graphs on (the default with the C kernels) and off give the
    same tokens, for a batch whose size changes as requests finish; with a quantized KV pool (its scales are
    replayed pointers too), with int8 linears, and with a host tier under a pool too small for the batch (KV
    copied back into the pool that replayed calls read by address)."""
    prompts = [list(range(3 + i, 40 + 3 * i)) for i in range(5)]
    params = [{"max_new_tokens": 6 + 4 * i, "temperature": 0, "ignore_eos": True} for i in range(5)]
    outputs = {}
    for disable in (True, False):
        with Engine(str(tiny_paths["tiny-llama"]), dtype="bfloat16", disable_cuda_graph=disable, random_seed=0,
                    **{"max_total_tokens": 2048, **options}) as engine:
            outputs[disable] = [r["output_ids"] for r in engine.generate(input_ids=prompts, sampling_params=params)]
            runner = engine.core.runner.graph_runner
            if not disable:
                assert runner is not None and runner.cpu_graphs and runner.capture_error is None
    assert outputs[False] == outputs[True]
