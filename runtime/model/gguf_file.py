"""A GGUF file opened with the `gguf` package's reader: metadata values, tensors, and one-line errors.

The reader memory-maps the file and parses every metadata field eagerly, a numpy view per array element (about
250,000 for a 49k vocabulary). On a `numpy.memmap` each view pays memmap's `__array_finalize__`; `_Reader` keeps
the mapping as a plain ndarray (the memmap stays alive as its base): SmolLM2's file opens in 1.7-2.1 s, not 5.6 s
(2-core dev machine, load average ~10). An opened file is cached per path, size and mtime, so the config, tokenizer and weights read it once.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
from gguf import GGML_QUANT_SIZES, GGMLQuantizationType, GGUFReader, GGUFValueType
from gguf.gguf_reader import ReaderField, ReaderTensor

from sprig.runtime.errors import CheckpointError

GGUF_SUFFIX = ".gguf"
GGUF_MAGIC = b"GGUF"
# llama.cpp's `general.file_type` (enum llama_ftype): the names of the ones sprig can load, for the start-up log.
FILE_TYPES = {0: "F32", 1: "F16", 2: "Q4_0", 3: "Q4_1", 7: "Q8_0", 14: "Q4_K_S", 15: "Q4_K_M", 16: "Q5_K_S",
              17: "Q5_K_M", 18: "Q6_K", 32: "BF16"}


def is_gguf_path(path: str | Path | None) -> bool:
    """Whether `path` names a GGUF file (by its suffix; a folder is a Hugging Face checkpoint)."""
    return path is not None and str(path).lower().endswith(GGUF_SUFFIX) and not Path(path).is_dir()


class _Reader(GGUFReader):
    """`GGUFReader` over a plain ndarray view of its memory map (see the module docstring), checking each
    tensor's type and extent before the reader builds its views, so the errors name the tensor."""

    @property  # type: ignore[override]
    def data(self) -> np.ndarray:
        return self._plain

    @data.setter
    def data(self, value: np.ndarray) -> None:
        self._plain = value.view(np.ndarray)

    def _build_tensors(self, start_offs: int, fields: list[ReaderField]) -> None:
        for field in fields:
            _check_tensor_field(field, start_offs, len(self._plain))
        super()._build_tensors(start_offs, fields)


def _check_tensor_field(field: ReaderField, start_offs: int, file_size: int) -> None:
    _, name_data, _, dims, raw_type, offset = field.parts
    name = bytes(name_data).decode("utf-8", "replace")
    try:
        qtype = GGMLQuantizationType(int(raw_type[0]))
    except ValueError:
        raise CheckpointError(f"tensor {name} has unknown GGML type {int(raw_type[0])}") from None
    block, type_size = GGML_QUANT_SIZES[qtype]
    elements = int(np.prod(dims.astype(np.int64))) if len(dims) else 1
    end = start_offs + int(offset[0]) + elements // block * type_size
    if end > file_size:
        raise CheckpointError(f"truncated GGUF file: tensor {name} ends at byte {end}, the file has {file_size}")


@dataclass(frozen=True)
class GGUFTensor:
    """One tensor: its GGML type, shape in torch order ([rows, cols]: GGUF lists dimensions innermost first) and
    raw data (a typed array for F32 / F16, else bytes [rows, row_bytes])."""

    name: str
    qtype: GGMLQuantizationType
    shape: tuple[int, ...]
    data: np.ndarray


class GGUFFile:
    """An opened GGUF file: `general.architecture`, metadata by key, tensors by name."""

    def __init__(self, path: Path, reader: GGUFReader) -> None:
        self.path = path
        self.reader = reader
        self.fields: dict[str, ReaderField] = dict(reader.fields)
        self.tensors: dict[str, GGUFTensor] = {t.name: _tensor(t) for t in reader.tensors}
        arch = self.get("general.architecture")
        if not isinstance(arch, str):
            raise CheckpointError(f"{path.name}: GGUF metadata lacks general.architecture")
        self.arch = arch

    def get(self, key: str, default: Any = None) -> Any:
        """A metadata value (int, float, bool, str, or a list of them); `default` when absent."""
        field = self.fields.get(key)
        return default if field is None else _value(field)

    def arch_get(self, suffix: str, default: Any = None) -> Any:
        """`{general.architecture}.{suffix}`, e.g. `llama.block_count`."""
        return self.get(f"{self.arch}.{suffix}", default)

    def require(self, key: str) -> Any:
        value = self.get(key)
        if value is None:
            raise CheckpointError(f"{self.path.name}: GGUF metadata lacks {key}")
        return value

    @property
    def file_type(self) -> str:
        """llama.cpp's name of the file's quantization (`general.file_type`), e.g. `Q4_1`."""
        raw = self.get("general.file_type")
        if raw is None:
            return "unknown"
        return FILE_TYPES.get(int(raw), f"file type {int(raw)}")


def _tensor(t: ReaderTensor) -> GGUFTensor:
    return GGUFTensor(t.name, t.tensor_type, tuple(int(d) for d in reversed(t.shape.tolist())), t.data)


def _value(field: ReaderField) -> Any:
    main = field.types[0]
    if main == GGUFValueType.ARRAY:
        if len(field.types) > 1 and field.types[1] == GGUFValueType.STRING:
            return [bytes(field.parts[i]).decode("utf-8", "replace") for i in field.data]
        return [field.parts[i].tolist()[0] for i in field.data]
    part = field.parts[field.data[0]]
    if main == GGUFValueType.STRING:
        return bytes(part).decode("utf-8", "replace")
    value = part.tolist()[0]
    return bool(value) if main == GGUFValueType.BOOL else value


def open_gguf(path: str | Path) -> GGUFFile:
    """Open a GGUF file (cached while it is unchanged); a one-line CheckpointError when it cannot be read."""
    path = Path(path)
    try:
        stat = path.stat()
    except OSError as e:
        raise CheckpointError(f"GGUF file not found: {path} ({e.strerror})") from None
    return _open(path.resolve(), stat.st_size, stat.st_mtime_ns)


@functools.lru_cache(maxsize=2)
def _open(path: Path, size: int, mtime_ns: int) -> GGUFFile:
    del mtime_ns  # part of the cache key only
    with path.open("rb") as f:
        magic = f.read(4)
    if magic != GGUF_MAGIC:
        raise CheckpointError(f"{path.name} is not a GGUF file (magic number {magic!r}, expected {GGUF_MAGIC!r})")
    try:
        reader = _Reader(path, "r")
    except CheckpointError:
        raise
    except (ValueError, IndexError, KeyError, OverflowError, TypeError, UnicodeDecodeError, MemoryError) as e:
        raise CheckpointError(f"corrupt or truncated GGUF file {path.name} ({size} bytes): "
                              f"{type(e).__name__}: {e}") from None
    except OSError as e:
        raise CheckpointError(f"cannot read {path.name}: {e}") from None
    return GGUFFile(path, reader)
