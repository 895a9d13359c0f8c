"""The engine's side of constrained decoding: specs from sampling params, compilation off the loop, masks.

Compilation happens in `sprig.grammar`'s worker pool; callers wait for it on their own thread (or event loop)
before a request reaches the engine, so a bad schema is an error at submission and the engine loop never waits.
"""

from __future__ import annotations

import contextlib
import json
import threading
from collections.abc import Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

import torch

from sprig.grammar import GrammarCompiler, GrammarError, GrammarSpec, TokenizerInfo
from sprig.runtime.engine.generate_request import CONSTRAINTS, FieldNames, SamplingParams
from sprig.runtime.engine.request import Request
from sprig.runtime.engine.thinking import MarkerTokens
from sprig.runtime.errors import RequestError

COMPILE_TIMEOUT_S = 30.0


def spec_from_params(params: SamplingParams) -> GrammarSpec | None:
    """The grammar a request asks for through `json_schema`, `regex`, `choices` or `ebnf` (at most one is set)."""
    try:
        if params.ebnf is not None:
            return GrammarSpec.ebnf(params.ebnf)
        if params.json_schema is not None:
            return GrammarSpec.json_schema(params.json_schema)
        if params.regex is not None:
            return GrammarSpec.regex(params.regex)
        if params.choices is not None:
            return GrammarSpec.choices(params.choices)
        if params.structural_tag is not None:
            return structural_spec(params.structural_tag)
    except GrammarError as e:
        raise as_request_error(e) from None
    return None


def structural_spec(tag: str | dict[str, Any]) -> GrammarSpec:
    """A structural tag (a client's object, or its JSON text) checked here, so a bad field fails at once."""
    from sprig.grammar.structural import StructuralTag

    text = tag if isinstance(tag, str) else json.dumps(tag, ensure_ascii=False)
    return GrammarSpec.structural_tag(StructuralTag.from_json(text).to_json())


def as_request_error(e: GrammarError) -> RequestError:
    return RequestError(str(e), param=getattr(e, "param", None) or "json_schema", code=str(getattr(e, "code", "")
                                                                                              or "invalid_grammar"))


class ConstraintService:
    """Compiles grammars for one tokenizer, lazily starting the compile workers on first use."""

    def __init__(self, hf_tokenizer: Any, eos_token_ids: tuple[int, ...], vocab_size: int, workers: int,
                 backend: str = "llguidance") -> None:
        self.backend = backend
        self._hf_tokenizer = hf_tokenizer
        self._eos = eos_token_ids
        self._vocab = vocab_size
        self._workers = workers
        self._compiler: GrammarCompiler | None = None
        self._info: TokenizerInfo | None = None
        self._markers: dict[str, MarkerTokens] = {}
        self._lock = threading.Lock()

    @property
    def info(self) -> TokenizerInfo:
        """Every token's bytes (built once, on first use)."""
        with self._lock:
            if self._info is None:
                self._info = TokenizerInfo.from_tokenizer(self._hf_tokenizer, self._eos, self._vocab)
            return self._info

    @property
    def compiler(self) -> GrammarCompiler:
        info = self.info
        with self._lock:
            if self._compiler is None:
                self._compiler = GrammarCompiler(info, max_workers=self._workers, timeout_s=COMPILE_TIMEOUT_S,
                                                 backend=self.backend)
            return self._compiler

    def marker_tokens(self, marker: str) -> MarkerTokens:
        """The end-of-thinking `marker` against this vocabulary (built once per marker)."""
        info = self.info
        with self._lock:
            if marker not in self._markers:
                self._markers[marker] = MarkerTokens.build(marker, info.token_bytes, self._vocab)
            return self._markers[marker]

    def submit(self, spec: GrammarSpec) -> Future:
        return self.compiler.submit(spec)

    def stats(self) -> dict[str, float]:
        return self._compiler.stats() if self._compiler is not None else {}

    def shutdown(self) -> None:
        if self._compiler is not None:
            self._compiler.shutdown()


def compiled_or_error(future: Future) -> Any:
    """The compiled grammar, or a RequestError for a grammar that cannot be compiled."""
    try:
        return future.result()
    except GrammarError as e:
        raise as_request_error(e) from None


def fill_bitmask(matchers: list[Any], vocab_size: int) -> torch.Tensor | None:
    """One int32 bitmask row per request (all allowed for unconstrained rows), or None if none is constrained."""
    if all(m is None for m in matchers):
        return None
    words = (vocab_size + 31) // 32
    bitmask = torch.full((len(matchers), words), -1, dtype=torch.int32)
    for row, matcher in enumerate(matchers):
        if matcher is not None:
            matcher.fill_bitmask(bitmask, row)
    return bitmask


@dataclass(frozen=True)
class PendingMasks:
    """The bitmask being filled for `reqs` while the forward runs (or, with no future, filled when taken)."""

    reqs: list[Request]
    future: Future | None

    def take(self, reqs: list[Request], vocab_size: int) -> torch.Tensor | None:
        """The bitmask rows of `reqs`: the pending fill, or a fresh one if the rows changed (an abort)."""
        if self.future is None and all(r.matcher is None for r in reqs):
            return None
        if self.future is not None and reqs == self.reqs:
            return self.future.result()
        if self.future is not None:
            self.future.result()  # why: the worker must be done with the matchers before they are used here
        return fill_bitmask([r.matcher for r in reqs], vocab_size)


class MaskFiller:
    """Fills a step's grammar bitmask beside the forward where that pays, else leaves it to the sampler.

    The masks of step N depend only on tokens accepted up to step N-1, so they are known before the forward.
    On CUDA the forward is kernel launches and a wait without the GIL, so a worker thread fills the rows in
    native code meanwhile. On the CPU the forward is torch ops that each take and drop the GIL: a filling
    thread then trades the GIL with it per op and per row and slowed the forward by more than the fill costs
    (demo model, batch 32: +1.8 ms per step for a 0.3 ms fill; constrained decode overhead 19 % overlapped
    against 11 % filled on the engine thread), so there `start` returns None and the sampler's `take` fills.
    The engine thread does not touch a matcher until it has taken the result.
    """

    def __init__(self, overlap: bool) -> None:
        self.overlap = overlap
        self._pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="sprig-mask") if overlap else None

    def start(self, matchers: list[Any], vocab_size: int) -> Future | None:
        """Begin filling one row per matcher (None: unconstrained row) on the worker; None when no row is
        constrained or masks are not overlapped (the caller then fills when it needs them)."""
        if self._pool is None or all(m is None for m in matchers):
            return None
        return self._pool.submit(fill_bitmask, matchers, vocab_size)

    def shutdown(self) -> None:
        if self._pool is not None:
            self._pool.shutdown(wait=True)


def advance_grammar(req: Request, token: int, jump_forward: bool) -> list[int]:
    """Feed the sampled token to the request's matcher; returns the tokens to append: the sampled one, then the
    text the grammar forces next (jump-forward), re-tokenized with the sampled token when that reads better."""
    matcher = req.matcher
    if not matcher.accept_token(token):
        raise RuntimeError(f"grammar rejected sampled token {token}")
    if not jump_forward or matcher.is_terminated():
        return [token]
    jump = matcher.find_jump_forward_tokens()
    if jump is None:
        return [token]
    # The forced text is re-tokenized together with the sampled token (rollback 1) or after it (rollback 0).
    matcher.rollback(jump.rollback)
    if not matcher.accept_tokens(jump.token_ids):
        if jump.rollback:
            matcher.accept_token(token)
        return [token]
    if req.logprobs.return_logprob:
        if jump.rollback:
            req.output_logprobs.pop()
        req.output_logprobs.extend((0.0, t, []) for t in jump.token_ids)  # forced: probability one
    return ([] if jump.rollback else [token]) + list(jump.token_ids)


@contextlib.contextmanager
def constraint_named(names: FieldNames) -> Iterator[None]:
    """Grammar errors name the field the client put the constraint in (`response_format`, `tools`, ...)."""
    try:
        yield
    except RequestError as e:
        if names.constraint is None or (e.param or "").split(".")[0] not in CONSTRAINTS:
            raise
        raise RequestError(e.message, param=_client_param(e.param or "", names), code=e.code) from None


def _client_param(param: str, names: FieldNames) -> str:
    """The client's name of the field a grammar error is about (a tool's parameters, for a structure's schema)."""
    parts = param.split(".")
    if parts[:2] == ["structural_tag", "structures"] and len(parts) > 2 and parts[2].isdigit() \
            and int(parts[2]) < len(names.structures):
        return names.structures[int(parts[2])]
    return names.constraint or param
