"""OpenAI requests → engine calls, engine results → OpenAI responses.

A request becomes an `EngineCall` (the keyword arguments of `Engine.async_generate` plus what the server needs to
admit and time it); results (the result dicts of docs/architecture.md) become choices, logprobs and exact usage counts.

Chat messages become prompt ids through the checkpoint's chat template. Content may be a string or a list of
``{"type": "text", "text": ...}`` parts (joined with newlines; other part types are refused). ``developer`` messages
are rendered as ``system``. A conversation of only a system message is allowed: generation continues after the
template's assistant prompt. Assistant ``tool_calls`` are passed to templates that render them and written as
``<tool_call>`` text for templates that do not.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, field
from typing import Any

from sprig.runtime.engine.engine import Engine
from sprig.runtime.errors import RequestError
from sprig.runtime.model.tokenizer import Tokenizer
from sprig.runtime.server.http_errors import bad_request, from_value_error
from sprig.runtime.server.openai_protocol import (
    ChatCompletionRequest,
    ChatLogprobs,
    ChatMessage,
    CompletionLogprobs,
    CompletionRequest,
    PromptTokensDetails,
    Role,
    SamplingFields,
    TokenLogprob,
    ToolCallIn,
    TopLogprob,
    Usage,
)
from sprig.runtime.server.openai_tools import (
    TOOL_CALL_CLOSE,
    TOOL_CALL_OPEN,
    ToolPlan,
    check_regex,
    check_schema,
    plan_tools,
    response_format_schema,
    tool_constraint,
    tools_system_prompt,
)

MAX_TOP_LOGPROBS = 20
DEFAULT_COMPLETION_MAX_TOKENS = 16  # OpenAI's default for /v1/completions
# Engine parameter names → the OpenAI names clients sent.
COMPLETION_PARAMS = {"max_new_tokens": "max_tokens", "min_new_tokens": "min_tokens", "input_ids": "prompt",
                     "top_logprobs_num": "logprobs"}
CHAT_PARAMS = {"max_new_tokens": "max_tokens", "min_new_tokens": "min_tokens", "input_ids": "messages",
               "prompt": "messages", "top_logprobs_num": "top_logprobs"}


@dataclass
class EngineCall:
    """One `Engine.async_generate` call: its keyword arguments and the number of sequences it starts."""

    kwargs: dict[str, Any]
    num_sequences: int
    timeout: float | None = None
    rename: dict[str, str] = field(default_factory=dict)


@dataclass
class OpenAIPlan:
    """An OpenAI request ready to run: the engine call and how to present its results."""

    call: EngineCall
    n: int
    prompt_lens: list[int]
    stream: bool
    include_usage: bool
    prompt_texts: list[str] = field(default_factory=list)  # completions echo
    echo: bool = False
    logprobs: int | None = None  # completions: top count; chat: top_logprobs when logprobs is on
    tools: ToolPlan | None = None


def check_timeout(timeout: float | None) -> float | None:
    if timeout is not None and not (math.isfinite(timeout) and timeout > 0):
        raise bad_request("timeout must be a positive finite number of seconds", "timeout", "out_of_range")
    return timeout


def check_n(req: SamplingFields, prompts: int, engine: Engine, max_sequences: int) -> int:
    """Bound n and the fan-out before anything is tokenized or allocated."""
    n = 1 if req.n is None else req.n
    if not 1 <= n <= engine.config.max_n:
        raise bad_request(f"n must be in [1, {engine.config.max_n}]", "n", "out_of_range")
    if prompts * n > max_sequences:
        raise bad_request(f"prompts x n = {prompts * n} exceeds the limit of {max_sequences} sequences per request",
                          "n" if prompts == 1 else "prompt", "too_many")
    return n


@dataclass(frozen=True)
class Constraint:
    """The one constraint a request sets: the engine's sampling-params entry and the client's name for it."""

    params: dict[str, Any] = field(default_factory=dict)
    rename: dict[str, str] = field(default_factory=dict)  # engine param -> the client's field, for errors


def _constraint_sources(req: SamplingFields) -> list[tuple[str, str, Any]]:
    """(engine key, client field, value) for every constraint field the request sets."""
    so = req.structured_outputs
    sources: list[tuple[str, str, Any]] = [
        ("regex", "regex", req.regex), ("json_schema", "json_schema", req.json_schema), ("ebnf", "ebnf", req.ebnf),
        ("ebnf", "guided_grammar", req.guided_grammar)]
    if so is not None:
        sources += [
            ("regex", "structured_outputs.regex", so.regex), ("json_schema", "structured_outputs.json", so.json_),
            ("choices", "structured_outputs.choice", so.choice), ("ebnf", "structured_outputs.grammar", so.grammar)]
    return [s for s in sources if s[2] is not None]


def _constraint(req: SamplingFields, extra_schema: str | None, extra_param: str) -> Constraint:
    given = _constraint_sources(req)
    if extra_schema is not None:
        if given:
            raise bad_request(f"{extra_param} cannot be combined with {given[0][1]}", extra_param,
                              "conflicting_parameters")
        return Constraint({"json_schema": extra_schema})
    if len(given) > 1:
        names = " and ".join(name for _, name, _ in given)
        raise bad_request(f"give at most one of {names}", given[-1][1], "conflicting_parameters")
    if not given:
        return Constraint()
    key, name, value = given[0]
    if key == "regex":
        check_regex(value, name)
    elif key == "json_schema":
        if isinstance(value, str):
            try:
                value = json.loads(value)
            except ValueError:
                raise bad_request(f"{name} is not valid JSON", name, "invalid_schema") from None
        value = check_schema(value, name)
    return Constraint({key: value}, {key: name} if name != key else {})


def sampling_params(req: SamplingFields, max_tokens: int | None, n: int, constraint: dict[str, Any]) -> dict:
    """The engine's `sampling_params` dict (None values dropped: they mean the engine default)."""
    params = {
        "max_new_tokens": max_tokens, "min_new_tokens": req.min_tokens, "temperature": req.temperature,
        "top_p": req.top_p, "top_k": req.top_k, "min_p": req.min_p, "frequency_penalty": req.frequency_penalty,
        "presence_penalty": req.presence_penalty, "repetition_penalty": req.repetition_penalty,
        "stop": req.stop, "stop_token_ids": req.stop_token_ids, "ignore_eos": req.ignore_eos, "n": n,
        "seed": req.seed, "logit_bias": req.logit_bias, "skip_special_tokens": req.skip_special_tokens,
        **constraint,
    }
    return {k: v for k, v in params.items() if v is not None}


# --- completions ------------------------------------------------------------------------------------------


def completion_prompts(req: CompletionRequest) -> list[str] | list[list[int]]:
    """The prompt as a list of strings or a list of token-id lists."""
    p = req.prompt
    prompts: list[Any] = [p] if isinstance(p, str) else ([p] if p and isinstance(p[0], int) else list(p))
    if not prompts or any(len(x) == 0 for x in prompts):
        raise bad_request("the prompt must not be empty", "prompt", "empty")
    return prompts


def check_completion(req: CompletionRequest, engine: Engine, max_sequences: int) -> int:
    """Cheap checks before admission; returns the number of sequences the request would start."""
    if req.suffix:
        raise bad_request("suffix is not supported", "suffix", "unsupported")
    if req.logprobs is not None and not 0 <= req.logprobs <= MAX_TOP_LOGPROBS:
        raise bad_request(f"logprobs must be in [0, {MAX_TOP_LOGPROBS}]", "logprobs", "out_of_range")
    check_timeout(req.timeout)
    prompts = completion_prompts(req)
    n = check_n(req, len(prompts), engine, max_sequences)
    if req.best_of is not None and req.best_of != n:
        raise bad_request("best_of must equal n (best-of sampling is not supported)", "best_of", "unsupported")
    return len(prompts) * n


def completion_plan(req: CompletionRequest, engine: Engine, max_sequences: int) -> OpenAIPlan:
    """Tokenize and build the engine call of a /v1/completions request."""
    prompts = completion_prompts(req)
    n = check_n(req, len(prompts), engine, max_sequences)
    tok = engine.tokenizer
    if isinstance(prompts[0], str):
        ids = [tok.encode(p) for p in prompts]
        texts = list(prompts) if req.echo else []
    else:
        ids = [list(p) for p in prompts]
        texts = [_safe_decode(tok, p) for p in ids] if req.echo else []
    if any(not x for x in ids):
        raise bad_request("the prompt must not be empty", "prompt", "empty")
    max_tokens = DEFAULT_COMPLETION_MAX_TOKENS if req.max_tokens is None else req.max_tokens
    constraint = _constraint(req, None, "")
    params = sampling_params(req, max_tokens, n, constraint.params)
    lp = req.logprobs
    kwargs = {"input_ids": ids, "sampling_params": params, "return_logprob": lp is not None,
              "top_logprobs_num": lp or 0, "logprob_start_len": 0 if (req.echo and lp is not None) else -1}
    _add_priority(kwargs, req)
    call = EngineCall(kwargs, len(ids) * n, check_timeout(req.timeout), {**COMPLETION_PARAMS, **constraint.rename})
    opts = req.stream_options
    return OpenAIPlan(call, n, [len(x) for x in ids], bool(req.stream),
                      bool(req.stream and opts and opts.include_usage), texts, bool(req.echo), lp)


def _add_priority(kwargs: dict[str, Any], req: SamplingFields) -> None:
    if req.priority is not None:
        kwargs["priority"] = req.priority


def _safe_decode(tok: Any, ids: list[int]) -> str:
    try:
        return tok.decode(ids, skip_special_tokens=False)
    except Exception:  # noqa: BLE001 - out-of-vocab ids are reported by the engine's validation
        return ""


# --- chat -------------------------------------------------------------------------------------------------


MAX_MESSAGES = 4096


def _text_of(msg: ChatMessage, i: int) -> str:
    content = msg.content
    if content is None:
        if msg.role is Role.ASSISTANT and msg.tool_calls:
            return ""
        raise bad_request(f"messages[{i}] has no content", f"messages.{i}.content", "empty")
    if isinstance(content, str):
        return content
    if not content:
        raise bad_request(f"messages[{i}].content is an empty list", f"messages.{i}.content", "empty")
    texts = []
    for j, part in enumerate(content):
        if part.type != "text" or part.text is None:
            raise bad_request(f"only text content parts are supported (got {part.type[:32]!r})",
                              f"messages.{i}.content.{j}.type", "unsupported_content")
        texts.append(part.text)
    return "\n".join(texts)


def _arguments(call: ToolCallIn) -> Any:
    try:
        return json.loads(call.function.arguments)
    except ValueError:
        return call.function.arguments


def _calls_as_text(calls: list[ToolCallIn]) -> str:
    blocks = [json.dumps({"name": c.function.name, "arguments": _arguments(c)}, ensure_ascii=False)
              for c in calls]
    return "".join(f"\n{TOOL_CALL_OPEN}\n{b}\n{TOOL_CALL_CLOSE}" for b in blocks)


def template_messages(messages: list[ChatMessage], tokenizer: Tokenizer,
                      tools: ToolPlan | None) -> tuple[list[dict[str, Any]], list[dict[str, Any]] | None]:
    """The message dicts (and tools argument) handed to the chat template; only known keys are passed."""
    if not messages:
        raise bad_request("messages must not be empty", "messages", "empty")
    if len(messages) > MAX_MESSAGES:
        raise bad_request(f"at most {MAX_MESSAGES} messages", "messages", "too_many")
    template = tokenizer.chat_template or ""
    renders_calls = "tool_calls" in template
    out: list[dict[str, Any]] = []
    for i, msg in enumerate(messages):
        role = Role.SYSTEM if msg.role is Role.DEVELOPER else msg.role
        item: dict[str, Any] = {"role": role.value, "content": _text_of(msg, i)}
        if msg.tool_calls and renders_calls:
            item["tool_calls"] = [{"id": c.id, "type": "function",
                                   "function": {"name": c.function.name, "arguments": _arguments(c)}}
                                  for c in msg.tool_calls]
        elif msg.tool_calls:
            item["content"] += _calls_as_text(msg.tool_calls)
        if msg.tool_call_id is not None:
            item["tool_call_id"] = msg.tool_call_id
        out.append(item)
    if tools is None:
        return out, None
    if "tools" in template:
        return out, [{"type": "function", "function": f} for f in tools.functions]
    prompt = tools_system_prompt(tools)
    if out[0]["role"] == Role.SYSTEM.value:
        out[0] = {**out[0], "content": out[0]["content"] + "\n\n" + prompt}
    else:
        out.insert(0, {"role": Role.SYSTEM.value, "content": prompt})
    return out, None


def chat_prompt_ids(messages: list[ChatMessage], tokenizer: Tokenizer, tools: ToolPlan | None) -> list[int]:
    """Render the conversation with the generation prompt and tokenize it (the template adds BOS if any)."""
    items, tool_arg = template_messages(messages, tokenizer, tools)
    try:
        text = tokenizer.apply_chat_template(items, add_generation_prompt=True, tools=tool_arg)
    except RequestError as e:
        raise from_value_error(e) from None
    except Exception as e:  # noqa: BLE001 - a template choking on user input is the request's fault
        raise bad_request(f"the chat template could not render these messages ({type(e).__name__})",
                          "messages", "template_error") from None
    return tokenizer.encode(text, add_special_tokens=False)




def check_chat(req: ChatCompletionRequest, engine: Engine, max_sequences: int) -> int:
    """Cheap checks before admission; returns the number of sequences."""
    if not req.messages:
        raise bad_request("messages must not be empty", "messages", "empty")
    if req.top_logprobs is not None:
        if not 0 <= req.top_logprobs <= MAX_TOP_LOGPROBS:
            raise bad_request(f"top_logprobs must be in [0, {MAX_TOP_LOGPROBS}]", "top_logprobs", "out_of_range")
        if req.top_logprobs > 0 and not req.logprobs:
            raise bad_request("top_logprobs needs logprobs: true", "top_logprobs", "conflicting_parameters")
    check_timeout(req.timeout)
    return check_n(req, 1, engine, max_sequences)


def chat_plan(req: ChatCompletionRequest, engine: Engine, max_sequences: int) -> OpenAIPlan:
    """Render, tokenize and build the engine call of a /v1/chat/completions request."""
    n = check_n(req, 1, engine, max_sequences)
    tools = plan_tools(req.tools, req.tool_choice)
    fmt_schema = response_format_schema(req.response_format)
    tool_schema = tool_constraint(tools) if tools else None
    if fmt_schema is not None and tool_schema is not None:
        raise bad_request("response_format cannot be combined with a required or named tool_choice",
                          "response_format", "conflicting_parameters")
    extra, extra_param = (fmt_schema, "response_format") if fmt_schema is not None else (tool_schema, "tool_choice")
    constraint = _constraint(req, extra, extra_param)
    ids = chat_prompt_ids(req.messages, engine.tokenizer, tools)
    max_tokens = req.max_completion_tokens if req.max_completion_tokens is not None else req.max_tokens
    if max_tokens is None:  # why: OpenAI's default is "what fits"; the engine still refuses an overlong prompt
        room = min(engine.core.context_length, engine.core.kv.total_tokens) - len(ids)
        max_tokens = max(room, 1)
    params = sampling_params(req, max_tokens, n, constraint.params)
    top = (req.top_logprobs or 0) if req.logprobs else 0
    kwargs = {"input_ids": ids, "sampling_params": params, "return_logprob": bool(req.logprobs),
              "top_logprobs_num": top}
    rename = {**CHAT_PARAMS, **constraint.rename}
    if req.max_completion_tokens is not None:
        rename["max_new_tokens"] = "max_completion_tokens"
    if extra is not None:  # why: grammar errors name json_schema; the client sent response_format or tools
        rename["json_schema"] = "response_format.json_schema.schema" if fmt_schema is not None else "tools"
    _add_priority(kwargs, req)
    call = EngineCall(kwargs, n, check_timeout(req.timeout), rename)
    opts = req.stream_options
    return OpenAIPlan(call, n, [len(ids)], bool(req.stream), bool(req.stream and opts and opts.include_usage),
                      logprobs=top if req.logprobs else None, tools=tools)


# --- results ----------------------------------------------------------------------------------------------


class TokenTexts:
    """Text of single tokens (cached): what logprob entries show for each token id."""

    def __init__(self, tokenizer: Any) -> None:
        self.tokenizer = tokenizer
        self.cache: dict[int, str] = {}

    def __call__(self, token_id: int) -> str:
        text = self.cache.get(token_id)
        if text is None:
            text = _safe_decode(self.tokenizer, [token_id])
            if len(self.cache) < 1 << 18:
                self.cache[token_id] = text
        return text


def finish_reason(meta: dict[str, Any]) -> str | None:
    """The OpenAI finish_reason of a result ("stop", "length", "abort"), None while running."""
    reason = meta.get("finish_reason")
    return None if reason is None else str(reason.get("type"))


def _entries(meta: dict[str, Any], prompt: bool, start: int) -> list[tuple[Any, int, list]]:
    """(logprob, token id, top alternatives) of the prompt and/or output tokens from `start` on."""
    out: list[tuple[Any, int, list]] = []
    if prompt:
        tops = meta.get("input_top_logprobs") or []
        for i, (lp, tid) in enumerate(meta.get("input_token_logprobs") or []):
            out.append((lp, tid, tops[i] if i < len(tops) else []))
    tops = meta.get("output_top_logprobs") or []
    pairs = meta.get("output_token_logprobs") or []
    for i in range(start, len(pairs)):
        lp, tid = pairs[i]
        out.append((lp, tid, tops[i] if i < len(tops) else []))
    return out


def completion_logprobs(meta: dict[str, Any], texts: TokenTexts, include_prompt: bool, start: int,
                        offset: int) -> tuple[CompletionLogprobs, int]:
    """Legacy completions logprobs for tokens from `start`; returns them and the text offset after them."""
    result = CompletionLogprobs()
    for lp, tid, top in _entries(meta, include_prompt, start):
        text = texts(tid)
        result.tokens.append(text)
        result.token_logprobs.append(lp)
        result.top_logprobs.append({texts(t): v for v, t in top} if lp is not None else None)
        result.text_offset.append(offset)
        offset += len(text)
    return result, offset


def chat_logprobs(meta: dict[str, Any], texts: TokenTexts, start: int) -> ChatLogprobs:
    """Chat logprobs (`content` entries with top alternatives) for output tokens from `start`."""
    content = []
    for lp, tid, top in _entries(meta, False, start):
        text = texts(tid)
        alts = [TopLogprob(texts(t), v, list(texts(t).encode())) for v, t in top]
        content.append(TokenLogprob(text, lp, list(text.encode()), alts))
    return ChatLogprobs(content)


def usage_of(results: list[dict[str, Any]], n: int) -> Usage:
    """Exact usage: each prompt counted once (its first copy), every choice's completion tokens."""
    firsts = [r["meta_info"] for r in results[::n]]
    prompt = sum(m["prompt_tokens"] for m in firsts)
    completion = sum(r["meta_info"]["completion_tokens"] for r in results)
    cached = sum(m["cached_tokens"] for m in firsts)
    return Usage(prompt, completion, prompt + completion, PromptTokensDetails(cached))
