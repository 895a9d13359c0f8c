"""A broken GGUF file is one CheckpointError line naming the problem; `sprig serve` and `sprig generate` exit 2 with
that line and no traceback, before the port is served. Every file here is written by the test."""

from __future__ import annotations

import re
import socket
import subprocess
import sys
from pathlib import Path

import gguf
import pytest
from gguf_helpers import write_tiny_gguf
from test_server_helpers import free_port

from sprig.runtime.cli import main
from sprig.runtime.errors import CheckpointError
from sprig.runtime.model.loader import load_model

Q = gguf.GGMLQuantizationType


@pytest.fixture(scope="module")
def good(tiny_paths, tmp_path_factory) -> Path:
    return write_tiny_gguf(tiny_paths["tiny-llama"], tmp_path_factory.mktemp("gguf") / "good.gguf", Q.Q8_0)


def broken(tmp_path: Path, good: Path, data: bytes, name: str = "bad.gguf") -> Path:
    path = tmp_path / name
    path.write_bytes(data)
    return path


def with_tensor_type(tmp_path: Path, good: Path, tensor: str, type_id: int) -> Path:
    """A copy of `good` whose tensor info for `tensor` says GGML type `type_id` (patched in place)."""
    path = broken(tmp_path, good, good.read_bytes(), f"type{type_id}.gguf")
    reader = gguf.GGUFReader(path, "r+")
    info = next(t for t in reader.tensors if t.name == tensor)
    info.field.parts[4][0] = type_id  # why: the memory map is writable; the file changes with it
    reader.data.flush()
    del reader
    return path


def make(name: str, tmp_path: Path, good: Path, tiny: Path) -> tuple[Path, str]:
    """The broken file `name` and the message it must give."""
    data = good.read_bytes()

    def other_arch(meta, tensors):
        del tensors
        for key in [k for k in meta if k.startswith("llama.")]:
            meta["gemma." + key.removeprefix("llama.")] = meta.pop(key)

    def short_vocab(meta, tensors):
        del tensors
        for key in ("tokenizer.ggml.tokens", "tokenizer.ggml.token_type"):
            meta[key] = meta[key][:-10]

    def experts(meta, tensors):
        del tensors
        meta["llama.expert_count"] = 8  # how llama.cpp files a Mixtral

    files = {
        "truncated": lambda: (broken(tmp_path, good, data[: len(data) * 2 // 3], "truncated.gguf"),
                      r"truncated GGUF file: tensor \S+ ends at byte \d+, the file has \d+"),
        "cut in the header": lambda: (broken(tmp_path, good, data[:2000], "header.gguf"),
                              r"corrupt or truncated GGUF file header.gguf"),
        "wrong magic": lambda: (broken(tmp_path, good, b"GGML" + data[4:], "magic.gguf"),
                        r"magic.gguf is not a GGUF file \(magic number b'GGML', expected b'GGUF'\)"),
        "corrupt key length": lambda: (broken(tmp_path, good, data[:24] + b"\xff" * 8 + data[32:], "corrupt.gguf"),
                               r"corrupt or truncated GGUF file corrupt.gguf"),
        "unknown type id": lambda: (with_tensor_type(tmp_path, good, "blk.1.ffn_up.weight", 99),
                            r"tensor blk\.1\.ffn_up\.weight has unknown GGML type 99"),
        "unsupported type": lambda: (with_tensor_type(tmp_path, good, "blk.0.attn_k.weight", int(Q.IQ4_NL)),
                             r"tensor blk\.0\.attn_k\.weight: GGML tensor type IQ4_NL is not supported"),
        "unknown architecture": lambda: (write_tiny_gguf(tiny, tmp_path / "arch.gguf", arch="gemma", edit=other_arch),
                                 r"unsupported GGUF architecture 'gemma'; supported: llama, mistral, qwen2, qwen3"),
        "vocabulary": lambda: (write_tiny_gguf(tiny, tmp_path / "vocab.gguf", edit=short_vocab),
                       r"vocab.gguf: the tokenizer has 2090 tokens but token_embd.weight has 2100 rows"),
        "experts": lambda: (write_tiny_gguf(tiny, tmp_path / "moe.gguf", edit=experts),
                    r"moe.gguf: mixture-of-experts GGUF files are not supported yet"),
    }
    return files[name]()


CASES = ["truncated", "cut in the header", "wrong magic", "corrupt key length", "unknown type id", "unsupported type",
         "unknown architecture", "vocabulary", "experts"]


@pytest.mark.parametrize("case", CASES)
def test_load_model_names_the_problem(case, good, tiny_paths, tmp_path):
    path, message = make(case, tmp_path, good, tiny_paths["tiny-llama"])
    with pytest.raises(CheckpointError, match=message):
        load_model(path, "float32")


@pytest.mark.parametrize("case", CASES)
@pytest.mark.parametrize("command", ["serve", "generate"])
def test_commands_exit_2_with_one_line(case, command, good, tiny_paths, tmp_path, capsys):
    path, message = make(case, tmp_path, good, tiny_paths["tiny-llama"])
    args = ["--port", "0"] if command == "serve" else ["--prompt", "hi", "--max-new-tokens", "2"]
    assert main([command, "--model", str(path), *args]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith("sprig: error: ") and "Traceback" not in err
    assert re.search(message, err)


def test_a_broken_file_never_serves_its_port(good, tmp_path):
    path = broken(tmp_path, good, good.read_bytes()[:5000], "cut.gguf")
    port = free_port()
    proc = subprocess.Popen([sys.executable, "-m", "sprig.runtime.cli", "serve", "--model", str(path),
                             "--port", str(port)], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    refused = 0
    while proc.poll() is None:  # until it exits, nothing may answer on the port
        with socket.socket() as s:
            refused += s.connect_ex(("127.0.0.1", port)) != 0
    out, err = proc.communicate(timeout=60)
    assert proc.returncode == 2 and refused > 0 and out == ""
    assert err.count("\n") == 1 and "corrupt or truncated GGUF file cut.gguf" in err


def test_tensor_parallel_over_gguf_is_refused(good):
    from sprig.runtime.model.parallel import TPContext

    with pytest.raises(CheckpointError, match="tensor and pipeline parallelism over a GGUF file"):
        load_model(good, "float32", tp=TPContext(rank=0, size=2))


def test_serve_refuses_tensor_parallel_over_gguf(good, capsys):
    assert main(["serve", "--model", str(good), "--tp-size", "2", "--port", "0"]) == 2
    assert "parallelism over a GGUF file are not supported" in capsys.readouterr().err


def test_quantization_flag_does_not_apply(good):
    with pytest.raises(CheckpointError, match="--quantization int8 does not apply to a GGUF file"):
        load_model(good, "float32", quantization="int8")
