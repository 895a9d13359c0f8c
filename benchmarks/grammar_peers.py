"""The same compile + masked walk with sprig, xgrammar and llguidance, for `grammar_bench.py`.

Each engine compiles a JSON schema for one tokenizer (cold: its caches off or fresh; sprig in its compile
worker, with the engine's limits of 60 s and 4 GiB, so a schema over them is reported as refused). Compile time
is what a caller waits for until it can ask for the first mask: for sprig the worker's translation, the round
trip and llguidance's `LLMatcher` build (which computes the initial mask); for llguidance its `LLMatcher` build
from the schema (the same initial mask); for xgrammar `compile_json_schema` (its token mask cache). Then it walks a valid
instance token by token: fill the next-token bitmask (timed), check the token is allowed, accept it. A peer
that is not installed is skipped with a note; one that rejects the instance records where. xgrammar gets the
tokenizer's raw token bytes (VocabType.RAW), llguidance the tokenizer through its Hugging Face wrapper; both
are told to write compact JSON (`,` and `:` separators, no free whitespace), sprig's default.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from typing import Any

import torch

from sprig.grammar import GrammarCompiler, GrammarError, GrammarSpec, JsonOptions, TokenizerInfo, matcher_for
from sprig.grammar.matcher import allocate_token_bitmask


@dataclass
class WalkResult:
    """One engine on one schema and vocabulary."""

    engine: str
    vocab: int
    schema: str
    compile_s: float | None = None  # wall time of the whole compile, as the caller waits for it
    translate_s: float | None = None  # sprig (llguidance backend): spec -> Lark text, in the compile worker
    build_s: float | None = None  # sprig: llguidance's LLMatcher build (lexer, initial mask) in this process
    mask_p50_us: float | None = None
    mask_p99_us: float | None = None
    cold_p99_us: float | None = None  # the first walk, where row caches are empty
    accept_us: float | None = None
    tokens: int = 0
    accepted: bool | None = None  # the whole valid instance walked and EOS allowed
    error: str = ""
    fills: list[float] = field(default_factory=list, repr=False)

    def row(self) -> dict[str, Any]:
        out = asdict(self)
        out.pop("fills")
        return out


def percentile(xs: list[float], q: float) -> float:
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(q * len(xs)))]


def finish(result: WalkResult, fills: list[float], accepts: list[float]) -> WalkResult:
    """p50/p99 over the walks after the first (all walks if there was one), cold p99 over the first."""
    n = result.tokens
    warm = fills[n:] or fills
    if fills:
        result.mask_p50_us = percentile(warm, 0.5) * 1e6
        result.mask_p99_us = percentile(warm, 0.99) * 1e6
        result.cold_p99_us = percentile(fills[:n], 0.99) * 1e6
    if accepts:
        result.accept_us = sum(accepts) / len(accepts) * 1e6
    result.fills = fills
    return result


# A walker: (fill the bitmask row 0, is token allowed per the bitmask, accept token, can finish).
Walker = tuple[Callable[[], None], Callable[[int], bool], Callable[[int], bool], Callable[[], bool]]


def timed_walk(result: WalkResult, ids: list[int], walker: Walker, rounds: int) -> WalkResult:
    """Walk `ids` `rounds` times through fresh matchers (the first walk is the cold one, also timed)."""
    fills: list[float] = []
    accepts: list[float] = []
    result.tokens = len(ids)
    for _ in range(rounds):
        fill, allowed, accept, can_finish = walker()  # type: ignore[operator]
        for pos, tok in enumerate(ids):
            t0 = time.perf_counter()
            fill()
            fills.append(time.perf_counter() - t0)
            if not allowed(tok):
                result.accepted = False
                result.error = f"token {pos} of {len(ids)} masked out"
                return finish(result, fills, accepts)
            t1 = time.perf_counter()
            if not accept(tok):
                result.accepted = False
                result.error = f"token {pos} of {len(ids)} refused"
                return finish(result, fills, accepts)
            accepts.append(time.perf_counter() - t1)
        result.accepted = can_finish()
    return finish(result, fills, accepts)


def bit_set(bitmask: torch.Tensor, tok: int) -> bool:
    return bool((int(bitmask[0, tok // 32]) >> (tok % 32)) & 1)


def sprig_walk(compiler: GrammarCompiler, name: str, schema: dict, ids: list[int], rounds: int,
               options: JsonOptions) -> WalkResult:
    """Through the production path: a compile worker process with its time and memory limits (for the
    llguidance backend, the grammar is then built in this process, as the engine does)."""
    info = compiler.tokenizer_info
    tag = "sprig" if options.allow_extra_properties else "sprig-strict"
    if compiler.backend != "llguidance":
        tag += f"-{compiler.backend}"
    result = WalkResult(tag, info.vocab_size, name)
    t0 = time.perf_counter()
    try:
        compiled = compiler.compile(GrammarSpec.json_schema(schema, options))
    except GrammarError as exc:
        result.error = f"{exc.code} after {time.perf_counter() - t0:.0f} s: {exc.message[:70]}"
        return result
    result.compile_s = time.perf_counter() - t0
    translate = getattr(compiled, "translate_time_s", None)  # why: only the llguidance backend splits its time
    if translate is not None:
        result.translate_s, result.build_s = translate, compiled.compile_time_s - translate
    bitmask = allocate_token_bitmask(1, info.vocab_size)

    def walker():
        m = matcher_for(compiled)
        return (lambda: m.fill_bitmask(bitmask, 0), lambda t: bit_set(bitmask, t), m.accept_token, m.can_finish)

    return timed_walk(result, ids, walker, rounds)


def xgrammar_walk(info: TokenizerInfo, name: str, schema: dict, ids: list[int], rounds: int,
                  strict: bool) -> WalkResult:
    result = WalkResult("xgrammar-strict" if strict else "xgrammar", info.vocab_size, name)
    try:
        import xgrammar as xgr
    except ImportError as exc:
        result.error = f"not installed ({exc.name})"
        return result
    compiler = xgr.GrammarCompiler(_xgrammar_tokenizer(info), max_threads=1, cache_enabled=False)
    t0 = time.perf_counter()
    try:
        compiled = compiler.compile_json_schema(json.dumps(schema), any_whitespace=False,
                                                separators=(",", ":"), strict_mode=strict)
    except Exception as exc:  # a peer's compile error is a result, not a crash
        result.error = f"compile error: {str(exc)[:100]}"
        return result
    result.compile_s = time.perf_counter() - t0
    bitmask = xgr.allocate_token_bitmask(1, info.vocab_size)

    def walker():
        m = xgr.GrammarMatcher(compiled)  # why: xgrammar's own class, not sprig's matcher_for
        return (lambda: m.fill_next_token_bitmask(bitmask, 0), lambda t: bit_set(bitmask, t), m.accept_token,
                lambda: m.accept_token(info.eos_token_ids[0]))

    return timed_walk(result, ids, walker, rounds)


def llguidance_walk(info: TokenizerInfo, name: str, schema: dict, ids: list[int], rounds: int) -> WalkResult:
    result = WalkResult("llguidance", info.vocab_size, name)
    try:
        import llguidance
        import llguidance.hf
        import llguidance.torch as lt
        import transformers  # noqa: F401
    except ImportError as exc:
        result.error = f"not installed ({exc.name})"
        return result
    tokenizer = _llguidance_tokenizer(info)
    grammar = llguidance.LLMatcher.grammar_from_json_schema(
        json.dumps(schema), defaults={"whitespace_flexible": False, "item_separator": ",", "key_separator": ":"})
    t0 = time.perf_counter()
    matcher = llguidance.LLMatcher(tokenizer, grammar)  # why: llguidance compiles here, lazily after
    seconds = time.perf_counter() - t0
    if matcher.is_error():  # why: a refused schema has no compile time (it counts as not compiled)
        result.error = f"compile error: {matcher.get_error()[:100]}"
        return result
    result.compile_s = seconds
    bitmask = lt.allocate_token_bitmask(1, info.vocab_size)

    def walker():
        m = llguidance.LLMatcher(tokenizer, grammar)
        return (lambda: lt.fill_next_token_bitmask(m, bitmask, 0), lambda t: bit_set(bitmask, t),
                lambda t: m.consume_token(t) and not m.is_error(), m.is_accepting)

    return timed_walk(result, ids, walker, rounds)


_TOKENIZERS: dict[tuple[str, str], Any] = {}  # (engine, fingerprint): built once, not per schema (seconds at 128k)


def _xgrammar_tokenizer(info: TokenizerInfo) -> Any:
    import xgrammar as xgr

    if ("xgrammar", info.fingerprint) in _TOKENIZERS:
        return _TOKENIZERS["xgrammar", info.fingerprint]

    vocab = [raw or b"" for raw in info.token_bytes] + [b""] * (info.vocab_size - len(info.token_bytes))
    out = _TOKENIZERS["xgrammar", info.fingerprint] = xgr.TokenizerInfo(
        vocab, xgr.VocabType.RAW, vocab_size=info.vocab_size, stop_token_ids=list(info.eos_token_ids))
    return out


def _llguidance_tokenizer(info: TokenizerInfo) -> Any:
    import llguidance.hf
    from transformers import PreTrainedTokenizerFast

    if ("llguidance", info.fingerprint) not in _TOKENIZERS:
        hf = PreTrainedTokenizerFast(tokenizer_object=info.tokenizer)
        _TOKENIZERS["llguidance", info.fingerprint] = llguidance.hf.from_tokenizer(
            hf, n_vocab=info.vocab_size, eos_token=info.eos_token_ids[0])
    return _TOKENIZERS["llguidance", info.fingerprint]
