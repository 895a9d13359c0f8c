"""`RuntimeEndpoint`: a `sprig serve` (or SGLang) server over its native `/generate` protocol."""

from __future__ import annotations

import logging
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

from sprig.lang.backends.http import DEFAULT_TIMEOUT_S, HttpClient
from sprig.lang.backends.native import PREFILL_ONLY, NativeBackend, NativePrompt, PromptTokens
from sprig.lang.chat import ChatFormatter, chatml_formatter, jinja_formatter
from sprig.lang.errors import BackendError
from sprig.lang.select_scoring import BOUNDARY_LOOKBACK

logger = logging.getLogger(__name__)
FIRST_TOKEN_PROBE_CHARS = 64  # enough text to contain the first token of any prompt


class RuntimeEndpoint(NativeBackend):
    """Program calls as POST /generate requests; the chat template and tokenizer come from the model.

    The chat template is `chat_template` if given, else the server's model info (`chat_template`), else the
    tokenizer files at the model path it reports when this machine can read them, else ChatML.
    """

    def __init__(self, base_url: str, api_key: str | None = None, timeout: float = DEFAULT_TIMEOUT_S,
                 chat_template: str | None = None) -> None:
        self.http = HttpClient(base_url, api_key, timeout)
        self.model_info: dict[str, Any] = self.http.get("/get_model_info")
        self._tokenizer = _local_tokenizer(self.model_info.get("model_path"))
        self._formatter = self._pick_formatter(chat_template)

    def _pick_formatter(self, chat_template: str | None) -> ChatFormatter:
        source = chat_template or self.model_info.get("chat_template")
        if source:
            return jinja_formatter(source)
        tok = self._tokenizer
        if tok is not None and tok.chat_template:
            return ChatFormatter(lambda msgs, gen: tok.apply_chat_template(msgs, add_generation_prompt=gen))
        logger.warning("the server's chat template is unknown; roles render as ChatML")
        return chatml_formatter()

    @property
    def chat_formatter(self) -> ChatFormatter:
        return self._formatter

    def native_generate(self, prompts: Sequence[NativePrompt], sampling_params: dict[str, Any],
                        return_logprob: bool = False, logprob_start_len: int = -1,
                        priority: int | None = None) -> list[dict[str, Any]]:
        key = "input_ids" if prompts and isinstance(prompts[0], list) else "text"
        body: dict[str, Any] = {key: prompts if len(prompts) > 1 else prompts[0],
                                "sampling_params": sampling_params}
        if priority is not None:
            body["priority"] = priority
        if return_logprob:
            body.update(return_logprob=True, logprob_start_len=logprob_start_len)
        result = self.http.post("/generate", body)
        results = result if isinstance(result, list) else [result]
        if len(results) != len(prompts) or not all(isinstance(r, dict) and "text" in r for r in results):
            raise BackendError("/generate answered with an unexpected shape")
        return results

    def native_stream(self, prompt: NativePrompt, sampling_params: dict[str, Any],
                      priority: int | None = None) -> Iterator[dict[str, Any]]:
        key = "input_ids" if isinstance(prompt, list) else "text"
        body: dict[str, Any] = {key: prompt, "sampling_params": sampling_params, "stream": True}
        if priority is not None:
            body["priority"] = priority
        yield from self.http.stream("/generate", body)

    def encode(self, text: str, add_special_tokens: bool) -> list[int] | None:
        return None if self._tokenizer is None else self._tokenizer.encode(text, add_special_tokens)

    def decode(self, token_ids: list[int]) -> str | None:
        return None if self._tokenizer is None else self._tokenizer.decode(token_ids, skip_special_tokens=False)

    def prompt_tokens(self, text: str, need_first: bool) -> PromptTokens:
        if self._tokenizer is not None:
            ids = self._tokenizer.encode(text)
            return PromptTokens(len(ids), tuple(ids[-BOUNDARY_LOOKBACK:]), ids[0] if ids else None)
        count = int(self.native_generate([text], PREFILL_ONLY)[0]["meta_info"]["prompt_tokens"])
        start = max(count - BOUNDARY_LOOKBACK, 0)
        tail = self._token_ids(text, start)
        first = tail[0] if start == 0 and tail else None
        if need_first and first is None:
            first = self._token_ids(text[:FIRST_TOKEN_PROBE_CHARS], 0)[0]
        return PromptTokens(count, tuple(tail), first)

    def _token_ids(self, text: str, start: int) -> list[int]:
        result = self.native_generate([text], PREFILL_ONLY, True, start)[0]
        return [int(e[1]) for e in result["meta_info"].get("input_token_logprobs") or []]

    def close(self) -> None:
        self.http.close()


def _local_tokenizer(model_path: Any) -> Any:
    """The server's tokenizer when its files are readable here (same machine), else None."""
    if not isinstance(model_path, str) or not (Path(model_path) / "tokenizer.json").is_file():
        return None
    try:
        from sprig.runtime.model.tokenizer import Tokenizer

        return Tokenizer(model_path)
    except Exception:  # noqa: BLE001 - an unreadable tokenizer only costs extra requests
        return None
