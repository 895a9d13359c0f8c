"""The typed request a caller hands the engine (`GenerateRequest`) and what `Engine.prepare` makes of it.

The server builds a `GenerateRequest` from its protocol's fields; `Engine.generate`'s dict API parses its
keyword arguments into one. `Engine.prepare` validates it once (the client's field names come with it, in
`FieldNames`) and builds the engine's `Request`s; `Engine.open_stream` submits those and answers the call's
output as `StepDelta`s (request.py).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from sprig.runtime.engine.request import LogprobOptions, Request
from sprig.runtime.engine.sampling_params import NATIVE_NAMES, FieldNames, SamplingParams
from sprig.runtime.errors import RequestError

Prompt = str | tuple[int, ...]  # text to tokenize, or token ids


@dataclass(frozen=True)
class GenerateRequest:
    """One call: prompts (each run `params[i].n` times), sampling, logprob options and scheduling facts."""

    prompts: tuple[Prompt, ...]
    params: tuple[SamplingParams, ...]  # one per prompt
    logprobs: LogprobOptions = LogprobOptions()
    rid: str | None = None  # the call's id; sequences are named after it
    priority: int = 0  # higher is admitted first
    namespace: str = ""  # the tenant's prefix-cache namespace
    batch: bool = False  # the caller asked with a list (results come back as a list)
    names: FieldNames = NATIVE_NAMES

    @property
    def num_sequences(self) -> int:
        return sum(p.n for p in self.params)


@dataclass(frozen=True)
class PreparedCall:
    """A validated call: its engine requests (n copies of each prompt consecutive), ready to submit."""

    requests: tuple[Request, ...]
    batch: bool
    names: FieldNames = NATIVE_NAMES

    @property
    def prompt_lens(self) -> list[int]:
        return [len(r.prompt_ids) for r in self.requests]


def generate_request(prompt: str | list[str] | None = None,
                     sampling_params: dict[str, Any] | list[dict[str, Any]] | None = None,
                     input_ids: list[int] | list[list[int]] | None = None, return_logprob: bool = False,
                     logprob_start_len: int = -1, top_logprobs_num: int = 0, namespace: str = "", priority: int = 0,
                     rid: str | None = None, text_field: str = "prompt") -> GenerateRequest:
    """The dict API's keyword arguments as a `GenerateRequest` (shapes only; `Engine.prepare` validates).

    `text_field`: the caller's name of `prompt` (SGLang's /generate calls it `text`).
    """
    if (prompt is None) == (input_ids is None):
        raise RequestError(f"give exactly one of {text_field} and input_ids", param=text_field)
    prompts: list[Prompt]
    if prompt is not None:
        batch = isinstance(prompt, list)
        texts = list(prompt) if isinstance(prompt, list) else [prompt]
        if not all(isinstance(t, str) for t in texts):
            raise RequestError(f"{text_field} must be a string", param=text_field)
        prompts, names = list(texts), FieldNames(prompt=text_field)
    else:
        assert input_ids is not None
        batch = bool(input_ids) and isinstance(input_ids[0], list)
        lists = list(input_ids) if batch else [input_ids]
        if not all(isinstance(ids, list) and all(is_int(t) for t in ids) for ids in lists):
            raise RequestError("input_ids must be a list of integers", param="input_ids")
        prompts, names = [tuple(ids) for ids in lists], FieldNames(prompt="input_ids")  # type: ignore[arg-type]
    if not prompts:
        raise RequestError("the prompt list is empty", param=names.prompt)
    if isinstance(sampling_params, list):
        if len(sampling_params) != len(prompts):
            raise RequestError("sampling_params must be one dict or one per prompt", param="sampling_params")
        params = tuple(SamplingParams.from_dict(p) for p in sampling_params)
    else:
        params = (SamplingParams.from_dict(sampling_params),) * len(prompts)
    return GenerateRequest(tuple(prompts), params, LogprobOptions(bool(return_logprob), logprob_start_len,
                                                                  top_logprobs_num),
                           rid, priority, namespace, batch, names)


def is_int(value: object) -> bool:
    """An int that is not a bool (`true` is never a count or a token id)."""
    return isinstance(value, int) and not isinstance(value, bool)
