"""Shared logic of the backends that speak sprig's native generate protocol (in-process or over HTTP).

Subclasses provide the primitives (generate a batch, stream one, tokenize when they can); this class builds
`generate`, `stream`, `select` scoring and prefix caching on them, so both backends behave the same.

Prompts go as token ids when the backend can tokenize: model output keeps the exact ids it was generated
as, so the next call's prefix matches the KV cache token for token (re-tokenizing generated text can split it
differently and lose the cache from that point on). Without a tokenizer, prompts go as text.
"""

from __future__ import annotations

from abc import abstractmethod
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any

from sprig.lang.backends.base import (
    Backend,
    ChoiceLogprobs,
    GenOutput,
    Piece,
    Prompt,
    StreamChunk,
    split_priority,
)
from sprig.lang.errors import BackendError, ProgramStateError
from sprig.lang.select_scoring import BOUNDARY_LOOKBACK, seam

PREFILL_ONLY: dict[str, Any] = {"max_new_tokens": 0}
NativePrompt = str | list[int]


@dataclass(frozen=True)
class PromptTokens:
    """What select scoring needs to know about a prompt's tokenization."""

    count: int
    tail: tuple[int, ...]  # the last min(count, BOUNDARY_LOOKBACK) token ids
    first: int | None  # the first token id, when asked for


class NativeBackend(Backend):
    """A backend whose calls are SGLang-style native `generate` requests."""

    @abstractmethod
    def native_generate(self, prompts: Sequence[NativePrompt], sampling_params: dict[str, Any],
                        return_logprob: bool = False, logprob_start_len: int = -1,
                        priority: int | None = None) -> list[dict[str, Any]]:
        """One native result dict per prompt (text, output_ids, meta_info); `priority` None: the default."""

    @abstractmethod
    def native_stream(self, prompt: NativePrompt, sampling_params: dict[str, Any],
                      priority: int | None = None) -> Iterator[dict[str, Any]]:
        """Native result dicts with cumulative text as generation proceeds; the last one has the finish."""

    @abstractmethod
    def prompt_tokens(self, text: str, need_first: bool) -> PromptTokens:
        """The token count, tail and (when asked) first token of `text` as the backend tokenizes it."""

    def encode(self, text: str, add_special_tokens: bool) -> list[int] | None:
        """Token ids of `text` as the model's tokenizer gives them; None when no tokenizer is at hand."""
        return None

    def decode(self, token_ids: list[int]) -> str | None:
        """The text of `token_ids` (special tokens kept); None when no tokenizer is at hand."""
        return None

    # --- prompts -------------------------------------------------------------------------------------
    def native_prompt(self, prompt: Prompt, suffix: str = "") -> NativePrompt:
        """The prompt (plus `suffix`) as token ids when possible, else as text."""
        pieces = list(prompt.pieces) or [Piece(prompt.text)]
        if suffix:
            last = pieces[-1]
            pieces = [*pieces[:-1], Piece(last.text + suffix)] if last.token_ids is None else [*pieces,
                                                                                               Piece(suffix)]
        if all(p.token_ids is None for p in pieces):
            return prompt.text + suffix  # nothing generated to preserve: let the backend tokenize
        ids: list[int] = []
        for i, piece in enumerate(pieces):
            part = list(piece.token_ids) if piece.token_ids is not None else self.encode(piece.text, i == 0)
            if part is None:
                return prompt.text + suffix
            ids.extend(part)
        return ids

    def _token_ids_of(self, result: dict[str, Any]) -> tuple[int, ...] | None:
        """The output ids that spell exactly the output text (without a matched stop token), if known."""
        ids = list(result.get("output_ids") or [])
        finish = (result.get("meta_info") or {}).get("finish_reason") or {}
        if ids and isinstance(finish, dict) and isinstance(finish.get("matched"), int):
            ids = ids[:-1]  # the stop token is not part of the text
        if not ids:
            return None
        return tuple(ids) if self.decode(ids) == result.get("text") else None

    # --- Backend -------------------------------------------------------------------------------------
    def generate(self, prompt: Prompt, sampling_params: dict[str, Any]) -> GenOutput:
        params, priority = split_priority(sampling_params)
        result = self.native_generate([self.native_prompt(prompt)], params, priority=priority)[0]
        return GenOutput(result["text"], _meta(result), self._token_ids_of(result))

    def stream(self, prompt: Prompt, sampling_params: dict[str, Any]) -> Iterator[StreamChunk]:
        sent = ""
        params, priority = split_priority(sampling_params)
        for chunk in self.native_stream(self.native_prompt(prompt), params, priority):
            text = chunk.get("text", "")
            # Cumulative text normally extends what was sent; a server sending deltas is handled too.
            delta = text[len(sent):] if text.startswith(sent) else text
            sent = text if text.startswith(sent) else sent + text
            finished = (chunk.get("meta_info") or {}).get("finish_reason") is not None
            if finished:
                yield StreamChunk(delta, _meta(chunk), self._token_ids_of({**chunk, "text": sent}))
            elif delta:
                yield StreamChunk(delta)

    def cache_prefix(self, prompt: Prompt) -> dict[str, Any]:
        if not prompt.text:
            return {}
        return _meta(self.native_generate([self.native_prompt(prompt)], PREFILL_ONLY)[0])

    def score_choices(self, prompt: Prompt, choices: tuple[str, ...], unconditional: bool) -> list[ChoiceLogprobs]:
        if not prompt.text:
            raise ProgramStateError("select needs some prompt text before it")
        base = self.native_prompt(prompt)
        if isinstance(base, list):
            info = PromptTokens(len(base), tuple(base[-BOUNDARY_LOOKBACK:]), base[0])
        else:
            info = self.prompt_tokens(prompt.text, need_first=unconditional)
        tail = info.tail[1:] if len(info.tail) == info.count else info.tail  # position 0 has no logprob
        start = info.count - len(tail)
        results = self.native_generate([self.native_prompt(prompt, c) for c in choices], PREFILL_ONLY, True, start)
        scored = [_choice_window(r, tail) for r in results]
        uncond: list[tuple[float, ...] | None] = [None] * len(choices)
        if unconditional:
            assert info.first is not None
            ids = [[info.first, *(int(t) for t in toks)] for toks, _, _ in scored]
            uncond = [tuple(_logprobs(r)[1]) for r in self.native_generate(ids, PREFILL_ONLY, True, 1)]
        return [ChoiceLogprobs(tuple(toks), tuple(lps), u, meta) for (toks, lps, meta), u in
                zip(scored, uncond, strict=True)]


def _choice_window(result: dict[str, Any], tail: tuple[int, ...]) -> tuple[list[int], list[float], dict[str, Any]]:
    tokens, logprobs = _logprobs(result)
    if not tokens:
        raise BackendError("the backend returned no prompt logprobs for a choice")
    k = seam(tail, tokens)
    return tokens[k:], logprobs[k:], _meta(result)


def _logprobs(result: dict[str, Any]) -> tuple[list[int], list[float]]:
    """Token ids and logprobs from `input_token_logprobs` entries (logprob, token_id[, text])."""
    entries = (result.get("meta_info") or {}).get("input_token_logprobs") or []
    pairs = [(int(e[1]), float(e[0])) for e in entries if e[0] is not None]
    return [t for t, _ in pairs], [lp for _, lp in pairs]


def _meta(result: dict[str, Any]) -> dict[str, Any]:
    meta = {k: v for k, v in (result.get("meta_info") or {}).items()
            if k not in ("input_token_logprobs", "output_token_logprobs", "input_top_logprobs",
                         "output_top_logprobs")}
    if "output_ids" in result:
        meta["output_ids"] = result["output_ids"]
    return meta
