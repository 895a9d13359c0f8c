"""Tokenizing lets other threads run: a multi-megabyte prompt tokenized in a worker thread must not hold the GIL,
or the server's event loop (health probes, every other stream) stops for as long as it takes."""

from __future__ import annotations

import threading
import time

from sprig.runtime.model.checkpoints import checkpoint_path
from sprig.runtime.model.tokenizer import Tokenizer

TICK_S = 0.005


def test_encoding_a_long_prompt_leaves_the_gil_to_other_threads():
    tokenizer = Tokenizer(checkpoint_path("tiny-llama"))
    text = "hello world, numbers 12345 and words; " * 30_000  # about 1 MB
    gaps: list[float] = []
    done = threading.Event()

    def ticker() -> None:
        last = time.monotonic()
        while not done.is_set():
            time.sleep(TICK_S)
            now = time.monotonic()
            gaps.append(now - last)
            last = now

    thread = threading.Thread(target=ticker)
    thread.start()
    started = time.monotonic()
    ids = tokenizer.encode(text)
    elapsed = time.monotonic() - started
    done.set()
    thread.join()
    assert len(ids) > 100_000
    # Holding the GIL, the ticker would sleep once and wake only after the whole encode (one gap ~ elapsed).
    assert max(gaps) < max(0.5, elapsed / 4), (max(gaps), elapsed)
