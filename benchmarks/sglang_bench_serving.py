"""SGLang's own `python -m sglang.bench_serving`, unchanged, against `sprig serve` (issue 17's manual check).

Installs sglang 0.5.23 the light way (`--no-deps` into a cache folder, never a second torch), writes a local
ShareGPT-format file from sprig's bundled corpus (no download), starts `sprig serve` on the demo model and runs
the benchmark once per backend with no `--tokenizer` (bench_serving reads the tokenizer path from `/model_info`)
and with `--flush-cache` (SGLang's `/flush_cache?timeout=`, vLLM's `/reset_prefix_cache`).

    PYTHONPATH=<folder holding sprig> python benchmarks/sglang_bench_serving.py
    python benchmarks/sglang_bench_serving.py --backends sglang --num-prompts 64 --num-threads 2

bench_serving imports SGLang's server package (for one constant), which imports torchvision. PyPI's x86-64
torchvision wheels link CUDA torch, so on a CPU torch their C ops do not load and torchvision 0.28 then fails at
import on an unguarded fake-kernel registration for `torchvision::nms`. The folder's `sitecustomize.py` declares
the schemas of `torchvision::nms` and `torchvision::qnms` (no kernels; the benchmark never calls them) so that
torchvision imports.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
from pathlib import Path

import torch

from sprig.runtime.model.checkpoints import DATA_DIR
from sprig.runtime.router.launch import launch_replicas, serve_command, stop_replicas

SGLANG = "sglang==0.5.23"
# `import sglang` (the same set tests/test_sglang_client.py installs) ...
LIGHT_DEPS = ["psutil", "pybase64", "msgspec", "pyzmq", "aiohttp", "multidict", "yarl", "propcache",
              "aiohappyeyeballs", "aiosignal", "frozenlist"]
# ... and what sglang.bench_serving imports on top: `datasets` (eagerly, for the MMMU loader) and SGLang's server
# package (torchvision, sentencepiece, compressed-tensors, loguru, gguf).
BENCH_DEPS = ["datasets", "pyarrow", "pandas", "python-dateutil", "tzdata", "dill", "multiprocess", "xxhash",
              "sentencepiece", "compressed-tensors", "loguru", "gguf"]
SITECUSTOMIZE = '''"""Written by sprig's benchmarks/sglang_bench_serving.py: see its docstring."""
import torch

if torch.version.cuda is None:  # a CUDA torchvision's C ops cannot load here; declare what it registers fakes for
    _torchvision = torch.library.Library("torchvision", "DEF")
    _torchvision.define("nms(Tensor dets, Tensor scores, float iou_threshold) -> Tensor")
    _torchvision.define("qnms(Tensor dets, Tensor scores, float iou_threshold) -> Tensor")
'''
SUMMARY = re.compile(r"^=+ Serving Benchmark Result =+$.*?^=+$", re.M | re.S)


def torchvision_release() -> str:
    """The torchvision release paired with the installed torch (2.N pairs with 0.N+15)."""
    major, minor = (int(x) for x in torch.__version__.split("+")[0].split(".")[:2])
    if major != 2:
        raise SystemExit(f"error: no known torchvision release for torch {torch.__version__}")
    return f"torchvision==0.{minor + 15}.*"


def install(target: Path) -> None:
    """sglang and the packages bench_serving imports, without dependencies, into `target` (once)."""
    if (target / ".complete").exists():
        return
    packages = [SGLANG, *LIGHT_DEPS, *BENCH_DEPS, torchvision_release()]
    print(f"installing {len(packages)} packages into {target} (--no-deps)", file=sys.stderr)
    proc = subprocess.run([sys.executable, "-m", "pip", "install", "-q", "--no-deps", "--target", str(target),
                           *packages])
    if proc.returncode != 0:
        raise SystemExit(f"error: pip could not install {SGLANG} and its imports into {target}")
    (target / "sitecustomize.py").write_text(SITECUSTOMIZE)
    (target / ".complete").touch()


def write_dataset(path: Path) -> None:
    """ShareGPT's layout (two-turn conversations) over consecutive paragraphs of sprig's corpus."""
    paragraphs = [p.strip() for p in re.split(r"\n\s*\n", (DATA_DIR / "corpus.txt").read_text()) if len(p) > 40]
    rows = [{"id": str(i), "conversations": [{"from": "human", "value": a}, {"from": "gpt", "value": b}]}
            for i, (a, b) in enumerate(zip(paragraphs[::2], paragraphs[1::2], strict=False))]
    path.write_text(json.dumps(rows))


def bench(target: Path, url: str, backend: str, dataset: Path, args: argparse.Namespace) -> str:
    """One unchanged `python -m sglang.bench_serving` run; its whole output."""
    host, port = url.removeprefix("http://").rsplit(":", 1)
    cmd = [sys.executable, "-m", "sglang.bench_serving", "--backend", backend, "--host", host, "--port", port,
           "--dataset-name", "random", "--dataset-path", str(dataset), "--random-input-len", str(args.input_len),
           "--random-output-len", str(args.output_len), "--num-prompts", str(args.num_prompts), "--disable-tqdm",
           "--flush-cache"]  # each run starts from an empty prefix cache (after its warm-up request)
    # Offline hub: the tokenizer must come from the path /model_info names, not from a download.
    env = {**os.environ, "PYTHONPATH": str(target), "TOKENIZERS_PARALLELISM": "false", "HF_HUB_OFFLINE": "1"}
    print("$ " + " ".join(cmd), file=sys.stderr)
    proc = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=args.timeout)
    if proc.returncode != 0:
        raise SystemExit(f"error: bench_serving --backend {backend} exited with {proc.returncode}:\n"
                         f"{(proc.stdout + proc.stderr)[-4000:]}")
    return proc.stdout


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                     formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    cache = Path(os.environ.get("SPRIG_CACHE_DIR", Path.home() / ".cache" / "sprig"))
    parser.add_argument("--target", type=Path, default=cache / "sglang-0.5.23-bench", help="install folder")
    parser.add_argument("--backends", nargs="+", default=["sglang", "vllm"], help="bench_serving --backend values")
    parser.add_argument("--num-prompts", type=int, default=32, help="requests per run")
    parser.add_argument("--input-len", type=int, default=128, help="--random-input-len")
    parser.add_argument("--output-len", type=int, default=64, help="--random-output-len")
    parser.add_argument("--num-threads", type=int, default=1, help="sprig serve --num-threads")
    parser.add_argument("--timeout", type=float, default=900.0, help="seconds per bench_serving run")
    args = parser.parse_args()
    install(args.target)
    dataset = args.target / "sharegpt_corpus.json"
    write_dataset(dataset)
    replicas = launch_replicas([serve_command(["--num-threads", str(args.num_threads)])])
    try:
        for backend in args.backends:
            out = bench(args.target, replicas[0].url, backend, dataset, args)
            match = SUMMARY.search(out)
            print(match.group(0) if match else out)
    finally:
        stop_replicas(replicas)


if __name__ == "__main__":
    main()
