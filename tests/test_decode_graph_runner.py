"""The static-buffer decode path (what CUDA graphs replay) gives the logits of the normal path.

On a CPU it runs eagerly (no capture), which checks the padding to captured batch sizes, the scratch page that
padding rows write to, and the padded page tables and masks.
"""

from __future__ import annotations

import torch

from sprig.runtime.model.kv_pool import KVPool, PoolSize
from sprig.runtime.model.loader import load_model
from sprig.runtime.model.runner import ModelRunner, SeqInput


def test_padded_static_decode_matches_dynamic_decode(tiny_paths):
    model = load_model(tiny_paths["tiny-qwen2"], "float32")
    pool = KVPool(model.cfg, PoolSize(64, 16), torch.float32)
    runner = ModelRunner(model, pool)
    gen = torch.Generator().manual_seed(0)
    seqs = []
    for n in (5, 33, 17):  # three sequences: the static path pads them to a batch of 4
        ids = torch.randint(3, 2000, (n,), generator=gen).tolist()
        pages = pool.alloc(4)
        runner.forward([SeqInput(ids, 0, pages)])
        seqs.append(SeqInput([7], n, pages))
    before = pool.buffer[:, :, : pool.size.num_tokens].clone()
    dynamic = runner.forward(seqs).logits
    pool.buffer[:, :, : pool.size.num_tokens] = before  # undo the K/V writes of that step
    runner.enable_decode_graphs(max_context=64, max_batch=8, use_graphs=False)
    assert runner.graph_runner.bucket(3) == 4
    static = runner.forward(seqs).logits
    assert static.shape == dynamic.shape
    assert (static - dynamic).abs().max().item() < 1e-5
    # The padding row wrote only into the scratch page: every real page holds what the dynamic step wrote.
    after_static = pool.buffer[:, :, : pool.size.num_tokens].clone()
    pool.buffer[:, :, : pool.size.num_tokens] = before
    runner.graph_runner = None
    runner.forward(seqs)
    # Not bitwise: fp32 GEMMs over 3 and over 4 rows may block their sums differently (3.3e-6 seen on an AMD
    # EPYC). A stray write of the padding row would change whole K/V rows by O(1), far above this tolerance.
    torch.testing.assert_close(after_static, pool.buffer[:, :, : pool.size.num_tokens], rtol=0, atol=1e-5)
