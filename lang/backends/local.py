"""The in-process backend: a `sprig.Engine` called directly."""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import TYPE_CHECKING, Any

from sprig.lang.backends.native import NativeBackend, NativePrompt, PromptTokens
from sprig.lang.chat import ChatFormatter, chatml_formatter
from sprig.lang.select_scoring import BOUNDARY_LOOKBACK

if TYPE_CHECKING:
    from sprig.runtime.engine.engine import Engine


class LocalBackend(NativeBackend):
    """Runs program calls on an in-process `sprig.Engine` (thread-safe: the engine batches them)."""

    def __init__(self, engine: Engine) -> None:
        self.engine = engine
        tok = engine.tokenizer
        if tok.chat_template:
            self._formatter = ChatFormatter(lambda msgs, gen: tok.apply_chat_template(msgs, add_generation_prompt=gen))
        else:
            self._formatter = chatml_formatter()

    @property
    def chat_formatter(self) -> ChatFormatter:
        return self._formatter

    def native_generate(self, prompts: Sequence[NativePrompt], sampling_params: dict[str, Any],
                        return_logprob: bool = False, logprob_start_len: int = -1,
                        priority: int | None = None) -> list[dict[str, Any]]:
        key = "input_ids" if prompts and isinstance(prompts[0], list) else "prompt"
        batch: dict[str, Any] = {key: list(prompts)}
        return self.engine.generate(**batch, sampling_params=sampling_params, return_logprob=return_logprob,
                                    logprob_start_len=logprob_start_len, priority=priority or 0)

    def native_stream(self, prompt: NativePrompt, sampling_params: dict[str, Any],
                      priority: int | None = None) -> Iterator[dict[str, Any]]:
        if isinstance(prompt, list):
            yield from self.engine.generate(input_ids=prompt, sampling_params=sampling_params, stream=True,
                                            priority=priority or 0)
        else:
            yield from self.engine.generate(prompt, sampling_params, stream=True, priority=priority or 0)

    def encode(self, text: str, add_special_tokens: bool) -> list[int] | None:
        return self.engine.tokenizer.encode(text, add_special_tokens=add_special_tokens)

    def decode(self, token_ids: list[int]) -> str | None:
        return self.engine.tokenizer.decode(token_ids, skip_special_tokens=False)

    def prompt_tokens(self, text: str, need_first: bool) -> PromptTokens:
        ids = self.engine.tokenizer.encode(text)
        return PromptTokens(len(ids), tuple(ids[-BOUNDARY_LOOKBACK:]), ids[0] if ids else None)

    def stats(self) -> dict[str, Any]:
        """The engine's counters (cache hit rate, tokens)."""
        return self.engine.stats()
