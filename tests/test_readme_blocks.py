"""Every code block of README.md and lang/README.md runs as written. Blocks that talk to
http://127.0.0.1:30000 get a `sprig serve` (the default model) started here; a block is skipped, with the reason, only
when it cannot run offline (it installs packages) or the port it names is taken."""

from __future__ import annotations

import os
import re
import socket
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest

ROOT = Path(__file__).resolve().parent.parent
FENCE = re.compile(r"^```(\w+)\n(.*?)^```", re.M | re.S)
SERVER_URL = "http://127.0.0.1:30000"


def blocks() -> list[tuple[str, str, str]]:
    out = []
    for name in ("README.md", "lang/README.md"):
        for i, m in enumerate(FENCE.finditer((ROOT / name).read_text())):
            out.append((f"{name}#{i}", m.group(1), m.group(2)))
    return out


BLOCKS = blocks()


def env() -> dict[str, str]:
    return {**os.environ, "OMP_NUM_THREADS": "1", "TOKENIZERS_PARALLELISM": "false"}


@pytest.fixture(scope="module")
def demo_server():
    """`sprig serve` as the README starts it (the default model, port 30000)."""
    with socket.socket() as s:
        if s.connect_ex(("127.0.0.1", 30000)) == 0:
            pytest.skip("port 30000, which the README's blocks name, is in use")
    proc = subprocess.Popen([sys.executable, "-m", "sprig.runtime.cli", "serve", "--num-threads", "1",
                             "--max-total-tokens", "8192"], env=env(), stdout=subprocess.DEVNULL,
                            stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.monotonic() + 300
        while True:
            assert proc.poll() is None, proc.stderr.read() if proc.stderr else ""
            assert time.monotonic() < deadline, "sprig serve did not start"
            try:
                if httpx.get(SERVER_URL + "/health", timeout=2).status_code == 200:
                    break
            except httpx.HTTPError:
                time.sleep(0.3)
        yield SERVER_URL
    finally:
        proc.terminate()
        proc.wait(30)


def test_the_readmes_have_the_blocks_this_test_expects():
    assert len(BLOCKS) >= 6 and {lang for _, lang, _ in BLOCKS} == {"bash", "python"}


@pytest.mark.parametrize(("where", "lang", "code"), BLOCKS, ids=[b[0] for b in BLOCKS])
def test_block_runs_as_written(where: str, lang: str, code: str, request: pytest.FixtureRequest, tmp_path: Path):
    if "pip install" in code:
        pytest.skip("installs packages: needs the network and changes the environment")
    if SERVER_URL in code:
        request.getfixturevalue("demo_server")
    command = [sys.executable, "-c", code] if lang == "python" else ["bash", "-euo", "pipefail", "-c", code]
    proc = subprocess.run(command, capture_output=True, text=True, timeout=300, env=env(), cwd=tmp_path)
    assert proc.returncode == 0, f"{where}:\n{proc.stderr[-3000:]}"
    assert proc.stdout.strip(), f"{where} printed nothing"
    if "capital of France" in code:  # the default model is a real one: the README's question gets its answer
        assert "Paris" in proc.stdout, f"{where}: {proc.stdout[-1000:]}"
