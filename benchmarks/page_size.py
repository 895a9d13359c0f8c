"""Decode attention time over the paged KV pool for page sizes 1 and 16 (the choice behind --page-size).

    python benchmarks/page_size.py [--threads 2]
"""

from __future__ import annotations

import argparse
import time

import torch

from sprig.kernels.attention import AttentionMetadata, paged_attention

SHAPES = [  # (kv heads, head dim, layers): the demo model and the ~100M Llama
    (2, 32, 4),
    (4, 64, 12),
]
BATCHES = [(1, 512), (16, 512), (64, 256)]  # (batch, context)


def decode_step_ms(batch: int, ctx: int, kv_heads: int, head_dim: int, layers: int, page_size: int,
                   dtype: torch.dtype, reps: int = 10) -> float:
    pool_tokens = 65536
    k_cache = torch.randn(pool_tokens, kv_heads, head_dim, dtype=dtype)
    v_cache = torch.randn_like(k_cache)
    pages_per_seq = -(-ctx // page_size)
    perm = torch.randperm(pool_tokens // page_size)[: batch * pages_per_seq].view(batch, pages_per_seq)
    meta = AttentionMetadata.build(page_size, [1] * batch, [ctx - 1] * batch, list(perm))
    q = torch.randn(batch, kv_heads * 3, head_dim, dtype=dtype)
    k = torch.randn(batch, kv_heads, head_dim, dtype=dtype)
    paged_attention(q, k, k, k_cache, v_cache, meta, head_dim**-0.5)
    start = time.perf_counter()
    for _ in range(reps):
        for _ in range(layers):
            paged_attention(q, k, k, k_cache, v_cache, meta, head_dim**-0.5)
    return (time.perf_counter() - start) / reps * 1e3


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--threads", type=int, default=2)
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    print(f"{'kv heads x dim x layers':>24} {'batch':>6} {'ctx':>5} {'dtype':>9} {'page 1 ms':>10} "
          f"{'page 16 ms':>11} {'ratio':>6}")
    for kv_heads, head_dim, layers in SHAPES:
        for batch, ctx in BATCHES:
            for dtype in (torch.float32, torch.bfloat16):
                t1, t16 = (decode_step_ms(batch, ctx, kv_heads, head_dim, layers, p, dtype) for p in (1, 16))
                print(f"{f'{kv_heads}x{head_dim}x{layers}':>24} {batch:>6} {ctx:>5} {str(dtype)[6:]:>9} "
                      f"{t1:>10.2f} {t16:>11.2f} {t1 / t16:>6.2f}")


if __name__ == "__main__":
    main()
