"""Perplexity of the real SmolLM2-135M model on a short text, for the low-precision tests' quality bounds.

The text is the first SHORT_TOKENS tokens of benchmarks/data/licenses.txt (the GPL v3's opening), scored in one
window through sprig's prompt logprobs: a few seconds per engine; the long text is the first LONG_TOKENS tokens, as
the quality benchmark scores them. Bounds are ratios to sprig fp32 on the same ids.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from sprig.runtime.bench.perplexity import Perplexity, sliding_windows, sprig_perplexity

TEXT = Path(__file__).resolve().parent.parent / "benchmarks" / "data" / "licenses.txt"
SHORT_TOKENS = 512
# The first 2,048 tokens in windows of 1024 at stride 512 (2,047 scored): benchmarks/quality.py --max-windows 3. Errors
# that grow with the context (an fp8 KV cache's) show here and not over the short text.
LONG_TOKENS, LONG_WINDOW, LONG_STRIDE = 2048, 1024, 512


def short_ids(engine: Any) -> list[int]:
    """The short text's ids in `engine`'s tokenizer (no special tokens)."""
    return engine.core.tokenizer.encode(TEXT.read_text()[:8000], add_special_tokens=False)[:SHORT_TOKENS]


def short_perplexity(path: Path, **options: Any) -> Perplexity:
    """sprig's perplexity of the short text with the model at `path` loaded with `options`."""
    from sprig import Engine

    with Engine(str(path), max_total_tokens=2048, disable_radix_cache=True, num_threads=1, **options) as engine:
        ids = short_ids(engine)
        return sprig_perplexity(engine, ids, sliding_windows(len(ids), SHORT_TOKENS, SHORT_TOKENS))


def long_perplexity(path: Path, **options: Any) -> Perplexity:
    """sprig's perplexity of the text's first LONG_TOKENS tokens with the model at `path` loaded with `options`."""
    from sprig import Engine

    with Engine(str(path), max_total_tokens=4096, disable_radix_cache=True, num_threads=1, **options) as engine:
        ids = engine.core.tokenizer.encode(TEXT.read_text(), add_special_tokens=False)[:LONG_TOKENS]
        return sprig_perplexity(engine, ids, sliding_windows(len(ids), LONG_WINDOW, LONG_STRIDE))


def assert_perplexity_near(ppl: float, reference: float, bound_pct: float) -> None:
    """|ppl / reference - 1| within bound_pct percent (a change either way is a change)."""
    change = 100 * (ppl / reference - 1)
    assert abs(change) <= bound_pct, f"perplexity {ppl:.4f} is {change:+.2f} % from fp32's {reference:.4f}"
