"""OpenAI protocol types: strict pydantic request models and dataclass responses (serialized by orjson).

Policy for request fields (applied the same on every endpoint): types are strict (``"10"`` is not an integer,
``1`` is not a boolean), unknown top-level fields are ignored like vLLM does (they never reach the engine or the
chat template), ``null`` means "the default".
"""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import Enum
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field


class StrictModel(BaseModel):
    """Base of every request model: strict types, extra fields ignored."""

    model_config = ConfigDict(strict=True, extra="ignore", populate_by_name=True)


class StructuredOutputs(StrictModel):
    """vLLM's `structured_outputs` extra body field: one constraint, named as vLLM names it."""

    json_: dict[str, Any] | str | None = Field(None, alias="json")
    regex: str | None = None
    choice: list[str] | None = None
    grammar: str | None = None


class StreamOptions(StrictModel):
    include_usage: bool | None = False


class SamplingFields(StrictModel):
    """Fields shared by /v1/completions and /v1/chat/completions (OpenAI names plus sprig extensions)."""

    model: str | None = None
    max_tokens: int | None = None
    temperature: float | None = None
    top_p: float | None = None
    n: int | None = 1
    stop: str | list[str] | None = None
    stream: bool | None = False
    stream_options: StreamOptions | None = None
    seed: int | None = None
    presence_penalty: float | None = None
    frequency_penalty: float | None = None
    logit_bias: dict[str, float] | None = None
    user: str | None = None
    # sprig / SGLang / vLLM extensions
    top_k: int | None = None
    min_p: float | None = None
    repetition_penalty: float | None = None
    min_tokens: int | None = None
    ignore_eos: bool | None = False
    regex: str | None = None
    json_schema: dict[str, Any] | str | None = None
    ebnf: str | None = Field(None, description="a grammar (GBNF, xgrammar EBNF or Lark) the output must match")
    guided_grammar: str | None = Field(None, description="vLLM's older name for a grammar constraint")
    structured_outputs: StructuredOutputs | None = None
    stop_token_ids: list[int] | None = None
    skip_special_tokens: bool | None = True
    timeout: float | None = Field(None, description="seconds before the request is aborted (sprig extension)")
    priority: int | None = Field(None, description="higher is scheduled first (SGLang extension)")


class CompletionRequest(SamplingFields):
    """POST /v1/completions."""

    model_config = ConfigDict(json_schema_extra={"examples": [
        {"prompt": "Once upon a time", "max_tokens": 16, "temperature": 0},
        {"prompt": ["a", "b"], "max_tokens": 4, "n": 2, "temperature": 0.7, "logprobs": 2, "stream": True},
    ]})

    prompt: str | list[str] | list[int] | list[list[int]]
    echo: bool | None = False
    logprobs: int | None = None
    suffix: str | None = None
    best_of: int | None = None
    response_format: ResponseFormat | None = None


class Role(str, Enum):
    SYSTEM = "system"
    DEVELOPER = "developer"
    USER = "user"
    ASSISTANT = "assistant"
    TOOL = "tool"


class ContentPart(StrictModel):
    type: str
    text: str | None = None


class FunctionCallIn(StrictModel):
    name: str
    arguments: str


class ToolCallIn(StrictModel):
    id: str | None = None
    type: Literal["function"] = "function"
    function: FunctionCallIn


class ChatMessage(StrictModel):
    role: Role = Field(strict=False)
    content: str | list[ContentPart] | None = None
    name: str | None = None
    tool_calls: list[ToolCallIn] | None = None
    tool_call_id: str | None = None


class JsonSchemaFormat(StrictModel):
    name: str | None = None
    description: str | None = None
    schema_: dict[str, Any] | None = Field(None, alias="schema")
    strict: bool | None = None


class ResponseFormat(StrictModel):
    type: Literal["text", "json_object", "json_schema", "structural_tag"]
    json_schema: JsonSchemaFormat | None = None
    # structural_tag (SGLang's and vLLM's): free text; a trigger opens one of the structures (begin, schema, end)
    structures: list[dict[str, Any]] | None = None
    triggers: list[str] | None = None
    mode: Literal["triggered", "forced"] | None = None  # sprig: "forced" writes a structure from the first token
    parallel: bool | None = None  # sprig: false allows one structure only


class FunctionDef(StrictModel):
    name: str
    description: str | None = None
    parameters: dict[str, Any] | None = None
    strict: bool | None = None


class ToolDef(StrictModel):
    type: Literal["function"]
    function: FunctionDef


class FunctionName(StrictModel):
    name: str


class NamedToolChoice(StrictModel):
    type: Literal["function"]
    function: FunctionName


class ChatCompletionRequest(SamplingFields):
    """POST /v1/chat/completions."""

    model_config = ConfigDict(json_schema_extra={"examples": [
        {"messages": [{"role": "user", "content": "Hello!"}], "max_tokens": 16},
        {"messages": [{"role": "system", "content": "Answer in JSON."}, {"role": "user", "content": "Hi"}],
         "max_tokens": 24, "response_format": {"type": "json_object"}, "stream": True, "logprobs": True,
         "top_logprobs": 2},
    ]})

    messages: list[ChatMessage]
    logprobs: bool | None = False
    top_logprobs: int | None = None
    max_completion_tokens: int | None = None
    response_format: ResponseFormat | None = None
    tools: list[ToolDef] | None = None
    tool_choice: Literal["none", "auto", "required"] | NamedToolChoice | None = None
    parallel_tool_calls: bool | None = None
    # reasoning models (with --reasoning-parser; SGLang's names)
    separate_reasoning: bool | None = Field(True, description="thinking text in reasoning_content, apart from content")
    max_thinking_tokens: int | None = Field(None, description="thinking tokens before </think> is forced")
    stream_reasoning: bool | None = Field(True, description="false: the thinking streams in one chunk at its end")
    constrain_tool_calls: bool | None = Field(
        None, description="auto mode: false leaves opened calls unconstrained, parsed after the fact (sprig)")


# --- responses (dataclasses: orjson serializes them directly, fast on the streaming path) -------------------


@dataclass(slots=True)
class PromptTokensDetails:
    cached_tokens: int


@dataclass(slots=True)
class Usage:
    prompt_tokens: int
    completion_tokens: int
    total_tokens: int
    prompt_tokens_details: PromptTokensDetails | None = None


@dataclass(slots=True)
class CompletionLogprobs:
    tokens: list[str] = field(default_factory=list)
    token_logprobs: list[float | None] = field(default_factory=list)
    top_logprobs: list[dict[str, float] | None] = field(default_factory=list)
    text_offset: list[int] = field(default_factory=list)


@dataclass(slots=True)
class CompletionChoice:
    index: int
    text: str
    logprobs: CompletionLogprobs | None = None
    finish_reason: str | None = None


@dataclass(slots=True)
class CompletionResponse:
    id: str
    created: int
    model: str
    choices: list[CompletionChoice]
    usage: Usage | None = None
    object: str = "text_completion"
    system_fingerprint: str | None = None


@dataclass(slots=True)
class TopLogprob:
    token: str
    logprob: float
    bytes: list[int]


@dataclass(slots=True)
class TokenLogprob:
    token: str
    logprob: float
    bytes: list[int]
    top_logprobs: list[TopLogprob]


@dataclass(slots=True)
class ChatLogprobs:
    content: list[TokenLogprob]


@dataclass(slots=True)
class FunctionCall:
    name: str
    arguments: str


@dataclass(slots=True)
class ToolCall:
    id: str
    function: FunctionCall
    type: str = "function"


@dataclass(slots=True)
class ChatMessageOut:
    content: str | None
    role: str = "assistant"
    tool_calls: list[ToolCall] | None = None


@dataclass(slots=True)
class ReasoningMessageOut(ChatMessageOut):
    """The message of a reasoning model: its thinking apart from the answer (DeepSeek's API shape)."""

    reasoning_content: str | None = None


@dataclass(slots=True)
class ChatChoice:
    index: int
    message: ChatMessageOut
    logprobs: ChatLogprobs | None = None
    finish_reason: str | None = None


@dataclass(slots=True)
class ChatCompletionResponse:
    id: str
    created: int
    model: str
    choices: list[ChatChoice]
    usage: Usage | None = None
    object: str = "chat.completion"
    system_fingerprint: str | None = None


@dataclass(slots=True)
class FunctionCallDelta:
    name: str | None = None
    arguments: str | None = None


@dataclass(slots=True)
class ToolCallDelta:
    index: int
    function: FunctionCallDelta
    id: str | None = None
    type: str | None = None


@dataclass(slots=True)
class ChatDelta:
    role: str | None = None
    content: str | None = None
    tool_calls: list[ToolCallDelta] | list[dict[str, Any]] | None = None  # dicts: keys left out, as OpenAI does


@dataclass(slots=True)
class ReasoningDelta(ChatDelta):
    """A stream delta of a reasoning model: thinking text in `reasoning_content`, the answer in `content`."""

    reasoning_content: str | None = None


@dataclass(slots=True)
class ChatChunkChoice:
    index: int
    delta: ChatDelta
    logprobs: ChatLogprobs | None = None
    finish_reason: str | None = None


@dataclass(slots=True)
class ChatCompletionChunk:
    id: str
    created: int
    model: str
    choices: list[ChatChunkChoice]
    usage: Usage | None = None
    object: str = "chat.completion.chunk"


@dataclass(slots=True)
class CompletionChunk:
    id: str
    created: int
    model: str
    choices: list[CompletionChoice]
    usage: Usage | None = None
    object: str = "text_completion"


@dataclass(slots=True)
class ModelCard:
    id: str
    created: int
    root: str
    max_model_len: int
    object: str = "model"
    owned_by: str = "sprig"
    parent: str | None = None  # a LoRA adapter's base model


@dataclass(slots=True)
class ModelList:
    data: list[ModelCard]
    object: str = "list"
