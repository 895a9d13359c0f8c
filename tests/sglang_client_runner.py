"""Run SGLang's own program tests (`sglang/test/test_programs.py`, unchanged) against a server through SGLang's
`RuntimeEndpoint`; print one JSON object: {function: [outcome, detail]} with outcome "passed", "assertion" (an
`assert` in the program failed: the detail says which) or "error" (anything else: a protocol failure).

Usage: python sglang_client_runner.py URL FUNCTION... (with SGLang's frontend importable); no FUNCTION: list them.
A failed program can leave SGLang's interpreter waiting forever, so the caller runs one function per process."""

from __future__ import annotations

import inspect
import json
import sys
import traceback

import sglang as sgl
from sglang.test import test_programs as programs

NOT_RUN = {
    "test_image_qa": "needs an image model",
    "test_completion_speculative": "API speculative execution needs an OpenAI backend",
    "test_chat_completion_speculative": "API speculative execution needs an OpenAI backend",
    "test_parallel_encoding": "sgl.concatenate needs /concate_and_append_request, which SGLang's server lacks too",
    "test_gen_min_new_tokens": "loads its tokenizer through sglang.srt, which needs torchvision (not a light install)",
}


def run_one(fn) -> list[str]:
    kwargs = {"check_answer": True} if "check_answer" in inspect.signature(fn).parameters else {}
    try:
        fn(**kwargs)
    except AssertionError as e:
        frame = traceback.extract_tb(e.__traceback__)[-1]
        return ["assertion", f"line {frame.lineno}: {frame.line}: {str(e)[:300]}"]
    except Exception as e:  # noqa: BLE001 - reported, and the test fails on it
        return ["error", f"{type(e).__name__}: {str(e)[:500]}\n{traceback.format_exc()[-1500:]}"]
    return ["passed", ""]


def main(url: str, names: list[str]) -> None:
    found = {name: fn for name, fn in inspect.getmembers(programs, inspect.isfunction)
             if name.startswith("test_") and fn.__module__ == programs.__name__}
    if not names:
        print(json.dumps({name: NOT_RUN.get(name) for name in found}))
        return
    sgl.set_default_backend(sgl.RuntimeEndpoint(url))
    print(json.dumps({name: ["not run", NOT_RUN[name]] if name in NOT_RUN else run_one(found[name])
                      for name in names}))


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2:])
