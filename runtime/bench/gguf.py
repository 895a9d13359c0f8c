"""Convert a sprig checkpoint to GGUF with the converter that ships with llama.cpp (`convert_hf_to_gguf.py`).

Run as a script in a child process: ``python -m sprig.runtime.bench.gguf LLAMA_CPP_DIR MODEL_DIR OUT.gguf bf16``.

Two things stop the stock converter on sprig's random checkpoints, and both are worked around here without
touching llama.cpp's files:
1. ``ModuleNotFoundError: No module named 'sentencepiece'``: the Llama converter tries a SentencePiece vocab first
   and only falls back to tokenizer.json on FileNotFoundError. With no ``tokenizer.model`` in the folder the
   SentencePiece path is treated as absent (FileNotFoundError), which is what it would find.
2. ``NotImplementedError: BPE pre-tokenizer was not recognized``: the converter recognizes a BPE tokenizer by
   the hash of its encoding of a probe text, which only known published tokenizers match. sprig's tokenizer is
   byte-level BPE with GPT-2's pre-tokenizer (``ByteLevel(add_prefix_space=False)``), so the unknown hash is
   mapped to llama.cpp's ``gpt-2`` pre-tokenizer.
"""

from __future__ import annotations

import logging
import runpy
import sys
from pathlib import Path
from typing import Any

logger = logging.getLogger(__name__)

GPT2_PRE = "gpt-2"  # llama.cpp's name for GPT-2's byte-level pre-tokenizer regex


def find_converter(llama_dir: Path) -> Path:
    """The converter script of a llama.cpp source tree."""
    script = llama_dir / "convert_hf_to_gguf.py"
    if not script.is_file():
        raise FileNotFoundError(f"no convert_hf_to_gguf.py in {llama_dir}")
    return script


def _patch(llama_dir: Path, model_dir: Path) -> None:
    """Install the two workarounds on the converter's base class."""
    sys.path[:0] = [str(llama_dir), str(llama_dir / "gguf-py")]
    try:
        from conversion.base import TextModel  # llama.cpp >= mid-2025 keeps model classes in conversion/
    except ImportError as e:
        raise RuntimeError(f"this llama.cpp converter layout is not supported ({e}); convert by hand, see "
                           "benchmarks/README.md") from None
    original_pre = TextModel.get_vocab_base_pre
    original_sp = TextModel._set_vocab_sentencepiece

    def vocab_base_pre(self: Any, tokenizer: Any) -> str:
        try:
            return original_pre(self, tokenizer)
        except NotImplementedError:
            logger.warning("unknown BPE pre-tokenizer hash: using %r (sprig's tokenizer is byte-level GPT-2)",
                           GPT2_PRE)
            return GPT2_PRE

    def set_vocab_sentencepiece(self: Any, *args: Any, **kwargs: Any) -> Any:
        if not (model_dir / "tokenizer.model").exists():
            raise FileNotFoundError("no tokenizer.model: not a SentencePiece vocab")
        return original_sp(self, *args, **kwargs)

    TextModel.get_vocab_base_pre = vocab_base_pre
    TextModel._set_vocab_sentencepiece = set_vocab_sentencepiece


def convert(llama_dir: Path, model_dir: Path, out: Path, outtype: str) -> None:
    """Run llama.cpp's converter in this process with the workarounds installed."""
    script = find_converter(llama_dir)
    _patch(llama_dir, model_dir)
    out.parent.mkdir(parents=True, exist_ok=True)
    sys.argv = [str(script), str(model_dir), "--outtype", outtype, "--outfile", str(out)]
    runpy.run_path(str(script), run_name="__main__")


def main(argv: list[str]) -> int:
    if len(argv) != 4:
        print("usage: python -m sprig.runtime.bench.gguf LLAMA_CPP_DIR MODEL_DIR OUT.gguf OUTTYPE", file=sys.stderr)
        return 2
    logging.basicConfig(level=logging.INFO)
    llama_dir, model_dir, out, outtype = Path(argv[0]), Path(argv[1]), Path(argv[2]), argv[3]
    convert(llama_dir, model_dir, out, outtype)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
