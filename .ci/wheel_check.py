"""CI's check of a non-editable install: run by the Python of a fresh virtual environment holding only the wheel and
what it declares, from a folder outside the checkout, with its own cache (so the C kernels compile from the
installed sources). It generates in process with `sprig.Engine()`, then serves one chat request with `sprig serve`."""

from __future__ import annotations

import socket
import subprocess
import sys
import time
from pathlib import Path

import httpx

import sprig


def check_installed_outside_checkout() -> None:
    where = Path(sprig.__file__).resolve()
    assert "site-packages" in where.parts, f"sprig imported from {where}, not from the installed wheel"
    print(f"sprig from {where.parent}")


QUESTION = [{"role": "user", "content": "What is the capital of France?"}]


def check_engine_generate() -> None:
    engine = sprig.Engine(num_threads=1)  # the default model, SmolLM2-135M-Instruct
    try:
        prompt = engine.tokenizer.apply_chat_template(QUESTION)
        out = engine.generate(prompt, {"max_new_tokens": 24, "temperature": 0})
    finally:
        engine.shutdown()
    assert "Paris" in out["text"], out
    print(f"Engine().generate: {out['text']!r}")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def check_serve_one_request() -> None:
    port = free_port()
    sprig_cli = Path(sys.executable).with_name("sprig")
    proc = subprocess.Popen([str(sprig_cli), "serve", "--port", str(port), "--num-threads", "1"],
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 300
        while not _healthy(url):
            assert proc.poll() is None, f"sprig serve exited {proc.returncode}: {proc.stderr.read()[-3000:]}"
            assert time.monotonic() < deadline, "sprig serve did not become healthy in 300 s"
            time.sleep(0.5)
        body = {"messages": QUESTION, "max_tokens": 24, "temperature": 0}
        reply = httpx.post(f"{url}/v1/chat/completions", json=body, timeout=120)
        assert reply.status_code == 200, reply.text
        answer = reply.json()["choices"][0]["message"]["content"]
        assert "Paris" in answer, answer
        print(f"sprig serve: {answer!r}")
    finally:
        proc.terminate()
        proc.wait(60)


def _healthy(url: str) -> bool:
    try:
        return httpx.get(f"{url}/health", timeout=2).status_code == 200
    except httpx.HTTPError:
        return False


if __name__ == "__main__":
    check_installed_outside_checkout()
    check_engine_generate()
    check_serve_one_request()
    print("wheel check: passed")
