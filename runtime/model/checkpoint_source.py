"""What a model path holds, a Hugging Face checkpoint folder or a GGUF file: its config and its format."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from sprig.runtime.model.config import ModelConfig, load_model_config
from sprig.runtime.model.gguf_config import gguf_model_config
from sprig.runtime.model.gguf_file import is_gguf_path, open_gguf


@dataclass(frozen=True)
class CheckpointFormat:
    """The kind of checkpoint, for the start-up block and /model_info."""

    name: str  # "safetensors" (a Hugging Face folder) or "gguf"
    file_type: str | None  # a GGUF file's quantization as llama.cpp names it (`Q4_1`); None for a folder

    def describe(self) -> str:
        return self.name if self.file_type is None else f"{self.name} {self.file_type}"


def checkpoint_format(path: str | Path) -> CheckpointFormat:
    if is_gguf_path(path):
        return CheckpointFormat("gguf", open_gguf(path).file_type)
    return CheckpointFormat("safetensors", None)


def checkpoint_config(path: str | Path) -> ModelConfig:
    """The model description of a checkpoint folder or a GGUF file; one-line CheckpointErrors."""
    return gguf_model_config(open_gguf(path)) if is_gguf_path(path) else load_model_config(path)
