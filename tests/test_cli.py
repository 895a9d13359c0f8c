"""`sprig generate` prints results, and bad input gives one line on stderr and exit status 2."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest


def sprig(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "sprig.runtime.cli", *args], capture_output=True, text=True,
                          timeout=300, env={"OMP_NUM_THREADS": "1", "PATH": "/usr/bin:/bin",
                                            **{k: v for k, v in __import__("os").environ.items()
                                               if k in ("HOME", "SPRIG_CACHE_DIR", "PYTHONPATH")}})


def test_generate_json_prints_one_result_per_prompt(tiny_paths):
    out = sprig("generate", "--model", str(tiny_paths["tiny-llama"]), "--prompt", "Hello", "--prompt", "Licensed",
                "--max-new-tokens", "5", "--json", "--num-threads", "1")
    assert out.returncode == 0, out.stderr
    lines = [json.loads(line) for line in out.stdout.splitlines()]
    assert len(lines) == 2
    for res in lines:
        assert set(res) == {"text", "output_ids", "meta_info"}
        assert res["meta_info"]["completion_tokens"] == len(res["output_ids"]) <= 5
        assert res["meta_info"]["finish_reason"]["type"] in ("stop", "length")


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--model", "/no/such/folder"], "model folder not found"),
        (["--dtype", "float8"], "unsupported dtype 'float8'"),
        (["--quantization", "fp4"], "unsupported quantization 'fp4'"),
        (["--temperature", "-1"], "temperature"),
    ],
)
def test_bad_input_is_one_line_and_exit_2(tiny_paths, args, message):
    base = ["generate", "--prompt", "hi", "--num-threads", "1"]
    if "--model" not in args:
        base += ["--model", str(tiny_paths["tiny-llama"])]
    out = sprig(*base, *args)
    assert out.returncode == 2
    assert out.stderr.count("\n") == 1 and message in out.stderr and "Traceback" not in out.stderr


def test_missing_config_and_unsupported_architecture(tmp_path, tiny_paths):
    import shutil

    folder = tmp_path / "m"
    shutil.copytree(tiny_paths["tiny-llama"], folder)
    (folder / "config.json").unlink()
    out = sprig("generate", "--model", str(folder), "--prompt", "hi")
    assert out.returncode == 2 and "no config.json" in out.stderr
    shutil.copy(tiny_paths["tiny-llama"] / "config.json", folder / "config.json")
    cfg = json.loads((folder / "config.json").read_text())
    cfg["architectures"] = ["FalconForCausalLM"]
    (folder / "config.json").write_text(json.dumps(cfg))
    out = sprig("generate", "--model", str(folder), "--prompt", "hi")
    assert out.returncode == 2 and "supported: LlamaForCausalLM" in out.stderr
