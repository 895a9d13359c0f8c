"""What a caller asks the engine for: one call (`GenerateRequest`) and how each prompt samples (`SamplingParams`).

The server builds a `GenerateRequest` from its protocol's fields; `Engine.generate`'s dict API parses its
keyword arguments into one (`generate_request`). `Engine.prepare` validates it once (the client's field names
come with it, in `FieldNames`) and builds the engine's `Request`s (a `PreparedCall`, request.py);
`Engine.open_stream` submits those and answers the call's output as `StepDelta`s.

**Sampling parameters**: the SGLang-style `sampling_params` dict, parsed and validated.
`SamplingParams.from_dict` turns the dict a user sends into a dataclass (normalising only the shapes SGLang
accepts: `stop` as one string, `logit_bias` keys as decimal strings, `None` meaning "the default"), and
`SamplingParams.validate` checks every value against the model before anything is allocated. Every failure is a
`SamplingParamsError` (a `ValueError`) whose `param` names the field and whose `code` is a stable string, so the
HTTP layer can answer 400 with `{"param", "code"}` (docs/architecture.md, "Errors").

Policies worth knowing:
- ``temperature == 0`` (or below 1e-6, as in SGLang) means greedy, as does ``top_k == 1``; ``n > 1`` with greedy
  is rejected (it would return n identical answers).
- ``max_new_tokens == 0`` is allowed (prompt-only requests, e.g. for prompt logprobs).
- Numbers are never clamped: out-of-range values are errors. `bool` is not accepted where a number is expected.
- `seed` is an int in [0, 2**63); the same seed and prompt give the same output whatever else is batched.
- SGLang's `sampling_seed` is an alias of `seed`; its `custom_params` (for custom logit processors, which sprig
  does not run) are dropped with a debug log; `stream_interval` is a hint for servers that batch stream chunks.
"""

from __future__ import annotations

import logging
import math
import numbers
import re
from dataclasses import dataclass, field, fields
from enum import Enum
from typing import Any

from sprig.runtime.engine.stop_regex import compile_stop_regex
from sprig.runtime.errors import RequestError

logger = logging.getLogger(__name__)

CONSTRAINTS = ("json_schema", "regex", "choices", "ebnf", "structural_tag")  # at most one per request


class ErrorCode(str, Enum):
    """Stable machine-readable reasons carried by `SamplingParamsError.code`."""

    INVALID_TYPE = "invalid_type"
    NOT_FINITE = "not_finite"
    OUT_OF_RANGE = "out_of_range"
    UNKNOWN_PARAMETER = "unknown_parameter"
    EMPTY = "empty"
    TOO_MANY = "too_many"
    TOO_LONG = "too_long"
    CONFLICT = "conflicting_parameters"


class SamplingParamsError(RequestError):
    """An invalid sampling parameter; `param` is the field name, `code` an `ErrorCode` value (a str)."""

    def __init__(self, param: str | None, code: ErrorCode, message: str) -> None:
        super().__init__(message, param=param, code=code.value)


# Bounds that are not model-dependent; `validate` takes the model-dependent ones as arguments.
MAX_STOP_STRINGS = 64
MAX_STOP_STRING_CHARS = 1024
MAX_LOGIT_BIAS = 100.0
MAX_SEED = 2**63
DEFAULT_MAX_NEW_TOKENS_LIMIT = 1 << 20
GREEDY_EPS = 1e-6  # temperatures below this sample greedily


@dataclass(frozen=True)
class FieldNames:
    """The names a client gave the fields whose errors it sees: validation writes them into `param` and the
    message from the start (an OpenAI client sent `max_tokens`, SGLang's sent `max_new_tokens`)."""

    prompt: str = "prompt"
    max_new_tokens: str = "max_new_tokens"
    min_new_tokens: str = "min_new_tokens"
    top_logprobs_num: str = "top_logprobs_num"
    constraint: str | None = None  # the field a constraint came from; None: the sampling parameter's own name
    structures: tuple[str, ...] = ()  # a structural tag's structures as the client named them (tools.i...)
    lora: str = "lora_path"  # the adapter's field (OpenAI clients name it in `model`)


NATIVE_NAMES = FieldNames()


@dataclass
class SamplingParams:
    """How one request samples and when it stops; field names and defaults follow SGLang's native API."""

    max_new_tokens: int = 128
    min_new_tokens: int = 0
    temperature: float = 1.0
    top_p: float = 1.0
    top_k: int = -1
    min_p: float = 0.0
    frequency_penalty: float = 0.0
    presence_penalty: float = 0.0
    repetition_penalty: float = 1.0
    stop: list[str] = field(default_factory=list)
    stop_token_ids: list[int] = field(default_factory=list)
    stop_regex: list[str] = field(default_factory=list)
    no_stop_trim: bool = False
    stream_interval: int | None = None
    ignore_eos: bool = False
    n: int = 1
    seed: int | None = None
    logit_bias: dict[int, float] = field(default_factory=dict)
    json_schema: str | None = None
    regex: str | None = None
    choices: list[str] | None = None
    ebnf: str | None = None  # a grammar: GBNF / xgrammar EBNF (`root ::= ...`) or Lark (`start: ...`)
    structural_tag: str | dict[str, Any] | None = None  # free text with triggered structures (grammar/structural.py)
    skip_special_tokens: bool = True
    spaces_between_special_tokens: bool = True
    # Thinking tokens the model may choose before the end-of-thinking marker is forced (needs a reasoning parser)
    max_thinking_tokens: int | None = None

    @property
    def is_greedy(self) -> bool:
        """True when the next token is the argmax of the processed logits: temperature below `GREEDY_EPS`
        (0, or so small that dividing by it would overflow; SGLang's rule) or top_k == 1."""
        return self.temperature < GREEDY_EPS or self.top_k == 1

    @property
    def has_penalties(self) -> bool:
        """True when any of the three penalties changes the logits."""
        return self.frequency_penalty != 0.0 or self.presence_penalty != 0.0 or self.repetition_penalty != 1.0

    @property
    def has_constraint(self) -> bool:
        """True when output is constrained by a JSON schema, a regex, a list of choices or a grammar."""
        return any(getattr(self, name) is not None for name in CONSTRAINTS)

    @classmethod
    def from_dict(cls, d: dict[str, Any] | None) -> SamplingParams:
        """Build from an SGLang-style dict; unknown keys are rejected, `None` values mean the default.

        Only shapes are normalised here (`stop` str -> [str], `logit_bias` "123" keys -> 123); call
        `validate` for types and ranges.
        """
        if d is None:
            return cls()
        if not isinstance(d, dict):
            raise SamplingParamsError("sampling_params", ErrorCode.INVALID_TYPE, "sampling_params must be an object")
        for key in d:
            if key not in _FIELD_NAMES and key not in _SGLANG_ALIASES:
                shown = str(key)[:64]
                raise SamplingParamsError(shown, ErrorCode.UNKNOWN_PARAMETER, f"unknown sampling parameter {shown!r}")
        kwargs = _resolve_aliases({k: v for k, v in d.items() if v is not None})
        for name in ("stop", "stop_regex"):
            if isinstance(kwargs.get(name), str):
                kwargs[name] = [kwargs[name]]
        if "logit_bias" in kwargs:
            kwargs["logit_bias"] = _normalise_bias_keys(kwargs["logit_bias"])
        return cls(**kwargs)

    def to_dict(self) -> dict[str, Any]:
        """The dict form accepted by `from_dict` (a copy)."""
        out = {f.name: getattr(self, f.name) for f in fields(self)}
        out["stop"] = list(self.stop)
        out["stop_token_ids"] = list(self.stop_token_ids)
        out["stop_regex"] = list(self.stop_regex)
        out["logit_bias"] = dict(self.logit_bias)
        return out

    def validate(
        self,
        vocab_size: int,
        max_n: int = 128,
        max_new_tokens_limit: int = DEFAULT_MAX_NEW_TOKENS_LIMIT,
        max_stop_strings: int = MAX_STOP_STRINGS,
        max_stop_chars: int = MAX_STOP_STRING_CHARS,
        names: FieldNames = NATIVE_NAMES,
    ) -> SamplingParams:
        """Check every field against `vocab_size` (the model's, not the tokenizer's) and the limits; return self.

        Raises `SamplingParamsError` for the first offending field, named as the client named it (`names`).
        """
        self._validate_lengths(max_new_tokens_limit, names)
        self._validate_floats()
        _check_int(self.top_k, "top_k")
        if self.top_k != -1 and not 1 <= self.top_k <= vocab_size:
            _fail("top_k", ErrorCode.OUT_OF_RANGE, f"top_k must be -1 or in [1, {vocab_size}]")
        self._validate_n_and_seed(max_n)
        self._validate_stop(vocab_size, max_stop_strings, max_stop_chars)
        self._validate_stop_regex(max_stop_strings, max_stop_chars)
        self._validate_logit_bias(vocab_size)
        self._validate_constraint()
        if self.max_thinking_tokens is not None:
            _check_int(self.max_thinking_tokens, "max_thinking_tokens")
            if self.max_thinking_tokens < 0:
                _fail("max_thinking_tokens", ErrorCode.OUT_OF_RANGE, "max_thinking_tokens must be >= 0")
        if self.stream_interval is not None:
            _check_int(self.stream_interval, "stream_interval")
            if self.stream_interval < 1:
                _fail("stream_interval", ErrorCode.OUT_OF_RANGE, "stream_interval must be >= 1")
        for name in ("ignore_eos", "no_stop_trim", "skip_special_tokens", "spaces_between_special_tokens"):
            if not isinstance(getattr(self, name), bool):
                _fail(name, ErrorCode.INVALID_TYPE, f"{name} must be a boolean")
        return self

    def _validate_lengths(self, limit: int, names: FieldNames) -> None:
        most, least = names.max_new_tokens, names.min_new_tokens
        _check_int(self.max_new_tokens, most)
        _check_int(self.min_new_tokens, least)
        if not 0 <= self.max_new_tokens <= limit:
            _fail(most, ErrorCode.OUT_OF_RANGE, f"{most} must be in [0, {limit}]")
        if self.min_new_tokens < 0:
            _fail(least, ErrorCode.OUT_OF_RANGE, f"{least} must be >= 0")
        if self.min_new_tokens > self.max_new_tokens:
            _fail(least, ErrorCode.OUT_OF_RANGE, f"{least} must be <= {most}")

    def _validate_floats(self) -> None:
        for name in _FLOAT_FIELDS:
            _check_float(getattr(self, name), name)
        if self.temperature < 0:
            _fail("temperature", ErrorCode.OUT_OF_RANGE, "temperature must be >= 0")
        if not 0 < self.top_p <= 1:
            _fail("top_p", ErrorCode.OUT_OF_RANGE, "top_p must be in (0, 1]")
        if not 0 <= self.min_p <= 1:
            _fail("min_p", ErrorCode.OUT_OF_RANGE, "min_p must be in [0, 1]")
        for name in ("frequency_penalty", "presence_penalty"):
            if not -2 <= getattr(self, name) <= 2:
                _fail(name, ErrorCode.OUT_OF_RANGE, f"{name} must be in [-2, 2]")
        if self.repetition_penalty <= 0:
            _fail("repetition_penalty", ErrorCode.OUT_OF_RANGE, "repetition_penalty must be > 0")

    def _validate_n_and_seed(self, max_n: int) -> None:
        _check_int(self.n, "n")
        if not 1 <= self.n <= max_n:
            _fail("n", ErrorCode.OUT_OF_RANGE, f"n must be in [1, {max_n}]")
        if self.n > 1 and self.is_greedy:
            _fail("n", ErrorCode.CONFLICT, "n > 1 needs sampling (temperature > 0 and top_k != 1)")
        if self.seed is not None:
            _check_int(self.seed, "seed")
            if not 0 <= self.seed < MAX_SEED:
                _fail("seed", ErrorCode.OUT_OF_RANGE, "seed must be in [0, 2**63)")

    def _validate_stop(self, vocab_size: int, max_strings: int, max_chars: int) -> None:
        if not isinstance(self.stop, list) or not all(isinstance(s, str) for s in self.stop):
            _fail("stop", ErrorCode.INVALID_TYPE, "stop must be a string or a list of strings")
        if len(self.stop) > max_strings:
            _fail("stop", ErrorCode.TOO_MANY, f"stop allows at most {max_strings} strings")
        for s in self.stop:
            if not s:
                _fail("stop", ErrorCode.EMPTY, "stop strings must not be empty")
            if len(s) > max_chars:
                _fail("stop", ErrorCode.TOO_LONG, f"stop strings must be at most {max_chars} characters")
        _check_token_ids(self.stop_token_ids, "stop_token_ids", vocab_size)

    def _validate_stop_regex(self, max_patterns: int, max_chars: int) -> None:
        if not isinstance(self.stop_regex, list) or not all(isinstance(s, str) for s in self.stop_regex):
            _fail("stop_regex", ErrorCode.INVALID_TYPE, "stop_regex must be a string or a list of strings")
        if len(self.stop_regex) > max_patterns:
            _fail("stop_regex", ErrorCode.TOO_MANY, f"stop_regex allows at most {max_patterns} patterns")
        for pattern in self.stop_regex:
            if len(pattern) > max_chars:
                _fail("stop_regex", ErrorCode.TOO_LONG, f"stop_regex patterns must be at most {max_chars} characters")
            try:
                compile_stop_regex(pattern)
            except ValueError as e:
                _fail("stop_regex", ErrorCode.INVALID_TYPE, str(e))

    def _validate_logit_bias(self, vocab_size: int) -> None:
        if not isinstance(self.logit_bias, dict):
            _fail("logit_bias", ErrorCode.INVALID_TYPE, "logit_bias must be an object of token id -> bias")
        _check_token_ids(list(self.logit_bias), "logit_bias", vocab_size)
        for value in self.logit_bias.values():
            _check_float(value, "logit_bias")
            if not -MAX_LOGIT_BIAS <= value <= MAX_LOGIT_BIAS:
                _fail("logit_bias", ErrorCode.OUT_OF_RANGE, "logit_bias values must be in [-100, 100]")

    def _validate_constraint(self) -> None:
        given = [name for name in CONSTRAINTS if getattr(self, name) is not None]
        if len(given) > 1:
            _fail(given[1], ErrorCode.CONFLICT, f"at most one of {', '.join(CONSTRAINTS)} may be set")
        for name in ("json_schema", "regex", "ebnf"):
            if getattr(self, name) is not None and not isinstance(getattr(self, name), str):
                _fail(name, ErrorCode.INVALID_TYPE, f"{name} must be a string")
        if self.structural_tag is not None and not isinstance(self.structural_tag, str | dict):
            _fail("structural_tag", ErrorCode.INVALID_TYPE, "structural_tag must be an object or its JSON text")
        if self.choices is not None:
            if not isinstance(self.choices, list) or not all(isinstance(c, str) for c in self.choices):
                _fail("choices", ErrorCode.INVALID_TYPE, "choices must be a list of strings")
            if not self.choices:
                _fail("choices", ErrorCode.EMPTY, "choices must not be empty")


_FIELD_NAMES = frozenset(f.name for f in fields(SamplingParams))
_SGLANG_ALIASES = frozenset({"sampling_seed", "custom_params"})  # SGLang keys with no field of their own
_INT_KEY = re.compile(r"-?[0-9]{1,12}")  # bounded so a 10**6-digit key never reaches int()
_FLOAT_FIELDS = ("temperature", "top_p", "min_p", "frequency_penalty", "presence_penalty", "repetition_penalty")


def _fail(param: str, code: ErrorCode, message: str) -> None:
    raise SamplingParamsError(param, code, message)


def is_int(value: object) -> bool:
    """An integer that is not a bool (`true` is never a count or a token id); numpy's integers count."""
    return isinstance(value, numbers.Integral) and not isinstance(value, bool)


def _check_int(value: object, name: str) -> None:
    if not is_int(value):
        _fail(name, ErrorCode.INVALID_TYPE, f"{name} must be an integer")


def _check_float(value: object, name: str) -> None:
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        _fail(name, ErrorCode.INVALID_TYPE, f"{name} must be a number")
    if not math.isfinite(float(value)):  # type: ignore[arg-type]
        _fail(name, ErrorCode.NOT_FINITE, f"{name} must be finite")


def _check_token_ids(ids: object, name: str, vocab_size: int) -> None:
    if not isinstance(ids, list) or not all(is_int(i) for i in ids):
        _fail(name, ErrorCode.INVALID_TYPE, f"{name} must hold integer token ids")
        return
    for i in ids:
        if not 0 <= i < vocab_size:
            _fail(name, ErrorCode.OUT_OF_RANGE, f"{name} token ids must be in [0, {vocab_size})")


def _resolve_aliases(kwargs: dict[str, Any]) -> dict[str, Any]:
    """`sampling_seed` -> `seed` (both given must agree); `custom_params` dropped (no custom logit processors)."""
    if "custom_params" in kwargs:
        logger.debug("ignoring custom_params %.200r: sprig runs no custom logit processor", kwargs.pop("custom_params"))
    if "sampling_seed" in kwargs:
        seed = kwargs.pop("sampling_seed")
        if kwargs.setdefault("seed", seed) != seed:
            raise SamplingParamsError("sampling_seed", ErrorCode.CONFLICT, "sampling_seed and seed differ")
    return kwargs


def _normalise_bias_keys(bias: object) -> object:
    """Turn JSON's string keys ("123") into ints; anything else that is not an int key is a type error."""
    if not isinstance(bias, dict):
        return bias  # validate() reports the type
    out: dict[int, Any] = {}
    for key, value in bias.items():
        if (isinstance(key, str) and _INT_KEY.fullmatch(key)) or is_int(key):
            out[int(key)] = value
        else:
            raise SamplingParamsError("logit_bias", ErrorCode.INVALID_TYPE, "logit_bias keys must be integer token ids")
    return out


# --- the call ----------------------------------------------------------------------------------------------

Prompt = str | tuple[int, ...]  # text to tokenize, or token ids


@dataclass(frozen=True)
class LogprobOptions:
    return_logprob: bool = False
    logprob_start_len: int = -1  # first prompt position whose logprob is returned; -1 = none of the prompt
    top_logprobs_num: int = 0


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
    require_reasoning: bool = False  # SGLang's name: the output starts inside thinking; a constraint waits for its end
    lora_paths: tuple[str | None, ...] = ()  # each prompt's LoRA adapter by name (None: the base model); () none

    @property
    def num_sequences(self) -> int:
        return sum(p.n for p in self.params)


def generate_request(prompt: str | list[str] | None = None,
                     sampling_params: dict[str, Any] | list[dict[str, Any]] | None = None,
                     input_ids: list[int] | list[list[int]] | None = None, return_logprob: bool = False,
                     logprob_start_len: int = -1, top_logprobs_num: int = 0, namespace: str = "", priority: int = 0,
                     rid: str | None = None, text_field: str = "prompt",
                     require_reasoning: bool = False,
                     lora_path: str | list[str | None] | None = None) -> GenerateRequest:
    """The dict API's keyword arguments as a `GenerateRequest` (shapes only; `Engine.prepare` validates).

    `text_field`: the caller's name of `prompt` (SGLang's /generate calls it `text`); `require_reasoning`: see
    `GenerateRequest`.
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
        lists: list[Any] = list(input_ids) if batch else [input_ids]
        if not all(isinstance(ids, list) and all(is_int(t) for t in ids) for ids in lists):
            raise RequestError("input_ids must be a list of integers", param="input_ids")
        prompts, names = [tuple(int(t) for t in ids) for ids in lists], FieldNames(prompt="input_ids")
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
                           rid, priority, namespace, batch, names, bool(require_reasoning),
                           _lora_paths(lora_path, len(prompts)))


def _lora_paths(lora_path: str | list[str | None] | None, count: int) -> tuple[str | None, ...]:
    """SGLang's `lora_path`: one adapter name for every prompt, or one (or null) per prompt."""
    if lora_path is None:
        return ()
    names = lora_path if isinstance(lora_path, list) else [lora_path] * count
    if len(names) != count or not all(n is None or isinstance(n, str) for n in names):
        raise RequestError("lora_path must be an adapter name or a list of one name (or null) per prompt",
                           param="lora_path")
    return tuple(names)
