"""`OpenAICompatible`: any server with the OpenAI chat/completions API (sprig, SGLang, vLLM, OpenAI).

A call goes to `/chat/completions` when the prompt is a conversation waiting for an assistant reply (mode
AUTO or CHAT), else to `/completions` with the rendered text. `select` asks `/completions` for the prompt
logprobs of `prompt + choice` (`echo`); servers that do not return them get a clear `UnsupportedError`.
Constraints go as the extra fields sprig and SGLang accept (`regex`, `json_schema`, `choices`) plus
`response_format` for JSON schemas on chat.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from enum import Enum
from typing import Any
from urllib.parse import urlsplit

from sprig.lang.backends.base import Backend, ChoiceLogprobs, GenOutput, Prompt, StreamChunk
from sprig.lang.backends.http import DEFAULT_TIMEOUT_S, HttpClient
from sprig.lang.chat import ChatFormatter, chatml_formatter, jinja_formatter
from sprig.lang.errors import BackendError, ProgramStateError, UnsupportedError
from sprig.lang.ir import Role

_OPENAI_NAMES = {"max_new_tokens": "max_tokens", "min_new_tokens": "min_tokens"}


def api_root(base_url: str) -> str:
    """`base_url` as the API root: `/v1` added to a bare server address, anything else kept as given."""
    url = base_url.rstrip("/")
    return url + "/v1" if urlsplit(url).path == "" else url


class OpenAIMode(str, Enum):
    """Which endpoint generation uses."""

    AUTO = "auto"  # chat for conversations awaiting an assistant reply, completions otherwise
    CHAT = "chat"
    COMPLETIONS = "completions"


class OpenAICompatible(Backend):
    """A backend over an OpenAI-compatible HTTP API. `base_url` is the API's root (`http://host:port/v1`); a bare
    server address (`http://host:port`) gets `/v1` added, as every OpenAI-compatible server serves it there."""

    def __init__(self, base_url: str, model: str | None = None, api_key: str | None = None,
                 mode: OpenAIMode | str = OpenAIMode.AUTO, chat_template: str | None = None,
                 timeout: float = DEFAULT_TIMEOUT_S) -> None:
        self.http = HttpClient(api_root(base_url), api_key, timeout)
        self.mode = OpenAIMode(mode)
        self.model = model or self._first_model()
        # Only rendered text (completions, select) needs the template; give it for exact role text.
        self._formatter = jinja_formatter(chat_template) if chat_template else chatml_formatter()

    def _first_model(self) -> str:
        models = self.http.get("/models").get("data") or []
        if not models:
            raise BackendError("the server lists no models; pass model=...")
        return str(models[0]["id"])

    @property
    def chat_formatter(self) -> ChatFormatter:
        return self._formatter

    # --- generation ----------------------------------------------------------------------------------
    def _use_chat(self, prompt: Prompt) -> bool:
        if self.mode is OpenAIMode.COMPLETIONS:
            return False
        chat_ready = (prompt.open_role is Role.ASSISTANT and not prompt.open_content and not prompt.has_loose_text
                      and bool(prompt.messages))
        if self.mode is OpenAIMode.CHAT and not chat_ready:
            raise UnsupportedError("a chat API generates only a whole assistant message: put the gen alone "
                                   "inside an assistant role, with no text outside roles")
        return chat_ready

    def _body(self, prompt: Prompt, params: dict[str, Any], chat: bool, stream: bool) -> dict[str, Any]:
        body: dict[str, Any] = {"model": self.model, "stream": stream}
        for key, value in params.items():
            body[_OPENAI_NAMES.get(key, key)] = value
        if chat:
            body["messages"] = list(prompt.messages)
            if "json_schema" in params:
                body["response_format"] = {"type": "json_schema", "json_schema": {
                    "name": "output", "schema": json.loads(params["json_schema"])}}
        else:
            body["prompt"] = prompt.text
        if stream:
            body["stream_options"] = {"include_usage": True}
        return body

    def generate(self, prompt: Prompt, sampling_params: dict[str, Any]) -> GenOutput:
        chat = self._use_chat(prompt)
        result = self.http.post("/chat/completions" if chat else "/completions",
                                self._body(prompt, sampling_params, chat, stream=False))
        choice = _first_choice(result)
        text = (choice.get("message") or {}).get("content") if chat else choice.get("text")
        return GenOutput(text or "", _meta(result, choice))

    def stream(self, prompt: Prompt, sampling_params: dict[str, Any]) -> Iterator[StreamChunk]:
        chat = self._use_chat(prompt)
        finish: dict[str, Any] = {}
        last: dict[str, Any] = {}
        for event in self.http.stream("/chat/completions" if chat else "/completions",
                                      self._body(prompt, sampling_params, chat, stream=True)):
            last = event
            for choice in event.get("choices") or []:
                delta = (choice.get("delta") or {}).get("content") if chat else choice.get("text")
                finish = choice if choice.get("finish_reason") else finish
                if delta:
                    yield StreamChunk(delta)
        yield StreamChunk("", _meta(last, finish))

    # --- select --------------------------------------------------------------------------------------
    def score_choices(self, prompt: Prompt, choices: tuple[str, ...], unconditional: bool) -> list[ChoiceLogprobs]:
        if unconditional:
            raise UnsupportedError("unconditional_likelihood_normalized select is not available over the "
                                   "OpenAI API; use token_length_normalized or greedy_token")
        if not prompt.text:
            raise ProgramStateError("select needs some prompt text before it")
        return [self._score_one(prompt.text, c) for c in choices]

    def _score_one(self, text: str, choice: str) -> ChoiceLogprobs:
        full = text + choice
        body = {"model": self.model, "prompt": full, "echo": True, "logprobs": 1, "max_tokens": 1,
                "temperature": 0}
        result = self.http.post("/completions", body)
        lp = _first_choice(result).get("logprobs") or {}
        tokens, values, offsets = lp.get("tokens"), lp.get("token_logprobs"), lp.get("text_offset")
        if not tokens or not values or not offsets:
            raise UnsupportedError("this server does not return prompt logprobs (echo + logprobs on "
                                   "/completions), which select needs")
        picked = [(t, v) for t, v, o in zip(tokens, values, offsets, strict=False)
                  # The seam: every token that ends inside the choice, including one straddling the boundary.
                  if o < len(full) and o + len(t) > len(text) and v is not None]
        if not picked:
            raise BackendError("the server's prompt logprobs do not cover the choice")
        usage = result.get("usage") or {}
        return ChoiceLogprobs(tuple(t for t, _ in picked), tuple(float(v) for _, v in picked), None,
                              {"prompt_tokens": usage.get("prompt_tokens"), "cached_tokens": _cached(usage)})

    def close(self) -> None:
        self.http.close()


def _first_choice(result: Any) -> dict[str, Any]:
    choices = result.get("choices") if isinstance(result, dict) else None
    if not choices:
        raise BackendError("the server answered without choices")
    return choices[0]


def _cached(usage: dict[str, Any]) -> int | None:
    details = usage.get("prompt_tokens_details") or {}
    return details.get("cached_tokens")


def _meta(result: dict[str, Any], choice: dict[str, Any]) -> dict[str, Any]:
    usage = result.get("usage") or {}
    reason = choice.get("finish_reason")
    return {
        "id": result.get("id"),
        "prompt_tokens": usage.get("prompt_tokens"),
        "completion_tokens": usage.get("completion_tokens"),
        "cached_tokens": _cached(usage),
        "finish_reason": {"type": reason, "matched": choice.get("matched_stop")} if reason else None,
    }
