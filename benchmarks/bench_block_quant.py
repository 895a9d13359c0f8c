"""GGML block-quantized linears (kernels/cpu_block_quant.py) against the bf16 vector kernel (kernels/cpu_gemm.py) on
SmolLM2-135M's shapes, one and two threads, GEMV at M = 1 and GEMM at M = 128 and 512.

    python benchmarks/bench_block_quant.py                     # the table for benchmarks/README.md
    python benchmarks/bench_block_quant.py --threads 1 --m 1 --types Q4_1

Each cell is the minimum over repeated calls for `--seconds` (the machine is shared: the minimum is the call the
other processes left alone), in microseconds; the weights are random blocks of each format (the speed does not
depend on the values) and the activations bf16. K-quants need whole 256-weight super-blocks, so shapes with 576
inputs have no Q4_K cell.
"""

from __future__ import annotations

import argparse
import time
from collections.abc import Callable

import torch

from sprig.kernels.cpu_block_quant import bq_linear
from sprig.kernels.cpu_gemm import vec_isa, vec_linear, vnni_pack
from sprig.kernels.cpu_int8 import int8_isa
from sprig.kernels.ggml_quants import GGMLType

SHAPES = [(576, 576), (192, 576), (1536, 576), (576, 1536), (49152, 576)]  # [out, in]: q/o, k/v, gate/up, down, head
TYPES = ("Q4_1", "Q8_0", "Q4_K")


def best_us(fn: Callable[[], object], seconds: float) -> float:
    fn()
    best, start = float("inf"), time.perf_counter()
    while time.perf_counter() - start < seconds:
        t0 = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - t0)
    return best * 1e6


def random_blocks(qtype: GGMLType, rows: int, cols: int) -> torch.Tensor:
    """Random bytes with small finite float16 scales (a NaN scale would make every product NaN)."""
    raw = torch.randint(0, 256, (rows, qtype.row_bytes(cols)), dtype=torch.uint8)
    blocks = raw.view(-1, qtype.type_size)
    scale_at = 208 if qtype is GGMLType.Q6_K else 0
    blocks[:, scale_at : scale_at + 2] = torch.full((blocks.shape[0],), 0.01, dtype=torch.float16).view(
        torch.uint8).view(-1, 2)
    if qtype in (GGMLType.Q4_1, GGMLType.Q4_K, GGMLType.Q5_K):  # the second float16 (min / dmin)
        blocks[:, 2:4] = blocks[:, 0:2]
    return raw


def run(threads: list[int], ms: list[int], types: list[str], seconds: float) -> None:
    print(f"bf16 kernel: {vec_isa().name.lower() if vec_isa() else 'torch'}; block kernel: "
          f"{int8_isa().name.lower() if int8_isa() is not None else 'torch'}; microseconds, min of repeats")
    header = ["threads", "M", "shape [out x in]", "bf16", *types, *(f"bf16/{t}" for t in types)]
    print("| " + " | ".join(header) + " |")
    print("|" + "---|" * len(header))
    for nt in threads:
        torch.set_num_threads(nt)
        for m in ms:
            for n, k in SHAPES:
                x = torch.randn(m, k).bfloat16()
                packed = vnni_pack(torch.randn(n, k).bfloat16())
                bf16 = best_us(lambda: vec_linear(x, packed, None), seconds)  # noqa: B023 - called right away
                cells, ratios = [], []
                for name in types:
                    qtype = GGMLType[name]
                    if k % qtype.block_size:
                        cells.append("-")
                        ratios.append("-")
                        continue
                    raw = random_blocks(qtype, n, k)
                    us = best_us(lambda: bq_linear(x, raw, qtype, None), seconds)  # noqa: B023
                    cells.append(f"{us:.0f}")
                    ratios.append(f"{bf16 / us:.2f}")
                print(f"| {nt} | {m} | {n} x {k} | {bf16:.0f} | " + " | ".join(cells + ratios) + " |", flush=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--threads", type=int, nargs="+", default=[1, 2])
    parser.add_argument("--m", type=int, nargs="+", default=[1, 128, 512])
    parser.add_argument("--types", nargs="+", default=list(TYPES), choices=[t.name for t in GGMLType if t.quantized])
    parser.add_argument("--seconds", type=float, default=0.5, help="time spent per cell")
    args = parser.parse_args()
    run(args.threads, args.m, args.types, args.seconds)


if __name__ == "__main__":
    main()
