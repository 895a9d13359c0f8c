"""The small interface every backend implements, and the values that cross it."""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

from sprig.lang.chat import ChatFormatter
from sprig.lang.ir import Role


@dataclass(frozen=True)
class Piece:
    """A run of prompt text; model output keeps the token ids it was generated as (None: tokenize the text)."""

    text: str
    token_ids: tuple[int, ...] | None = None


@dataclass(frozen=True)
class Prompt:
    """What a model call sees: the full text, and the same conversation as messages for chat APIs."""

    text: str
    messages: tuple[dict[str, str], ...] = ()
    open_role: Role | None = None  # the role whose message is being written, if any
    open_content: str = ""  # what that message holds so far
    has_loose_text: bool = False  # text outside any role (chat APIs cannot express it)
    pieces: tuple[Piece, ...] = ()  # the same text in runs; empty means one run of `text`


@dataclass(frozen=True)
class GenOutput:
    """The text a call produced and its meta info (tokens, cached tokens, finish reason, ...)."""

    text: str
    meta: dict[str, Any] = field(default_factory=dict)
    token_ids: tuple[int, ...] | None = None  # exactly the tokens of `text`, when the backend knows them


@dataclass(frozen=True)
class StreamChunk:
    """A piece of streamed output; `meta` (and `token_ids`, as in `GenOutput`) are set on the last chunk."""

    delta: str
    meta: dict[str, Any] | None = None
    token_ids: tuple[int, ...] | None = None


@dataclass(frozen=True)
class ChoiceLogprobs:
    """The logprobs of one choice's tokens after the prompt (and, when asked, without it)."""

    tokens: tuple[int | str, ...]
    logprobs: tuple[float, ...]
    unconditional: tuple[float, ...] | None = None
    meta: dict[str, Any] = field(default_factory=dict)


def split_priority(sampling_params: dict[str, Any]) -> tuple[dict[str, Any], int | None]:
    """The params without `priority`, and the priority (None when unset): native protocols send it per request."""
    params = dict(sampling_params)
    return params, params.pop("priority", None)


class Backend(ABC):
    """Runs the model calls of programs. Implementations must be safe to call from many threads at once."""

    @property
    @abstractmethod
    def chat_formatter(self) -> ChatFormatter:
        """How roles render for this backend's model."""

    @abstractmethod
    def generate(self, prompt: Prompt, sampling_params: dict[str, Any]) -> GenOutput:
        """Generate after `prompt` with SGLang-style `sampling_params`."""

    def stream(self, prompt: Prompt, sampling_params: dict[str, Any]) -> Iterator[StreamChunk]:
        """Generate and yield text as it is produced (default: one chunk at the end)."""
        out = self.generate(prompt, sampling_params)
        yield StreamChunk(out.text, out.meta, out.token_ids)

    @abstractmethod
    def score_choices(self, prompt: Prompt, choices: tuple[str, ...], unconditional: bool) -> list[ChoiceLogprobs]:
        """Token logprobs of each choice right after `prompt`; raise `UnsupportedError` when impossible."""

    def cache_prefix(self, prompt: Prompt) -> dict[str, Any]:
        """Make the backend hold the prompt's KV so that later calls reuse it (default: nothing to do)."""
        return {}

    def close(self) -> None:  # noqa: B027 - optional hook: most backends hold nothing
        """Release what the backend holds (connections); the default holds nothing."""
