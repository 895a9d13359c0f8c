"""OpenAI requests → engine calls, engine results → OpenAI responses.

A request becomes a `ServerCall`: the engine's typed `GenerateRequest` (with the client's field names, so the
engine's validation errors name what the client sent) and the client's deadline; results (the result dicts of
docs/architecture.md, or the engine's deltas while streaming) become choices, logprobs and exact usage counts.

Chat messages become prompt ids through the checkpoint's chat template. Content may be a string or a list of
``{"type": "text", "text": ...}`` parts (joined with newlines; other part types are refused). ``developer`` messages
are rendered as ``system``. A conversation of only a system message is allowed: generation continues after the
template's assistant prompt. Assistant ``tool_calls`` are passed to templates that render them and written in
the tool format's syntax (`tool_formats.py`) for templates that do not.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from sprig.runtime.engine.engine import Engine
from sprig.runtime.engine.generate_request import FieldNames, GenerateRequest, LogprobOptions, SamplingParams
from sprig.runtime.errors import RequestError
from sprig.runtime.model.tokenizer import Tokenizer
from sprig.runtime.server.http_common import bad_request, from_value_error
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
    ToolPlan,
    check_regex,
    check_schema,
    plan_tools,
    response_format_constraint,
    structure_fields,
    tool_constraint,
    tools_system_prompt,
)
from sprig.runtime.server.reasoning import ReasoningPlan
from sprig.runtime.server.run import ServerCall, check_timeout
from sprig.runtime.server.state import ServerSettings, TokenTexts, safe_decode
from sprig.runtime.server.tool_formats import (
    QWEN25,
    ToolFormat,
    format_for_template,
    special_token_id,
    tool_format,
)

DEFAULT_COMPLETION_MAX_TOKENS = 16  # OpenAI's default for /v1/completions


@dataclass
class OpenAIPlan:
    """An OpenAI request ready to run: the engine call and how to present its results."""

    call: ServerCall
    n: int
    prompt_lens: list[int]
    stream: bool
    include_usage: bool
    prompt_texts: list[str] = field(default_factory=list)  # completions echo
    echo: bool = False
    logprobs: int | None = None  # completions: top count; chat: top_logprobs when logprobs is on
    tools: ToolPlan | None = None
    reasoning: ReasoningPlan | None = None  # with --reasoning-parser: how the output relates to thinking


def check_n(req: SamplingFields, prompts: int, engine: Engine, max_sequences: int) -> int:
    """Bound n and the fan-out before anything is tokenized or allocated (once, before admission)."""
    n = 1 if req.n is None else req.n
    if not 1 <= n <= engine.max_n:
        raise bad_request(f"n must be in [1, {engine.max_n}]", "n", "out_of_range")
    if prompts * n > max_sequences:
        raise bad_request(f"prompts x n = {prompts * n} exceeds the limit of {max_sequences} sequences per request",
                          "n" if prompts == 1 else "prompt", "too_many")
    return n


@dataclass(frozen=True)
class Constraint:
    """The one constraint a request sets: the engine's sampling-params entry and the client's name for it."""

    params: dict[str, Any] = field(default_factory=dict)
    field: str | None = None  # the client's field, when it is not the sampling parameter's own name


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


def _constraint(req: SamplingFields, extra_schema: str | None, extra_param: str,
                extra_key: str = "json_schema") -> Constraint:
    given = _constraint_sources(req)
    if extra_schema is not None:
        if given:
            raise bad_request(f"{extra_param} cannot be combined with {given[0][1]}", extra_param,
                              "conflicting_parameters")
        return Constraint({extra_key: extra_schema}, extra_param)
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
    return Constraint({key: value}, name if name != key else None)


def sampling_params(req: SamplingFields, max_tokens: int | None, n: int,
                    constraint: dict[str, Any]) -> SamplingParams:
    """The engine's `SamplingParams` (None values mean the engine default; the engine validates them)."""
    params = {
        "max_new_tokens": max_tokens, "min_new_tokens": req.min_tokens, "temperature": req.temperature,
        "top_p": req.top_p, "top_k": req.top_k, "min_p": req.min_p, "frequency_penalty": req.frequency_penalty,
        "presence_penalty": req.presence_penalty, "repetition_penalty": req.repetition_penalty,
        "stop": req.stop, "stop_token_ids": req.stop_token_ids, "ignore_eos": req.ignore_eos, "n": n,
        "seed": req.seed, "logit_bias": req.logit_bias, "skip_special_tokens": req.skip_special_tokens,
        **constraint,
    }
    return SamplingParams.from_dict(params)


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
    check_timeout(req.timeout)
    prompts = completion_prompts(req)
    n = check_n(req, len(prompts), engine, max_sequences)
    if req.best_of is not None and req.best_of != n:
        raise bad_request("best_of must equal n (best-of sampling is not supported)", "best_of", "unsupported")
    return len(prompts) * n


def completion_plan(req: CompletionRequest, engine: Engine, rid: str,
                    settings: ServerSettings | None = None) -> OpenAIPlan:
    """Tokenize and build the engine call of a /v1/completions request (`check_completion` ran)."""
    prompts = completion_prompts(req)
    n = 1 if req.n is None else req.n
    tok = engine.tokenizer
    if isinstance(prompts[0], str):
        ids = [tok.encode(p) for p in prompts]
        texts = list(prompts) if req.echo else []
    else:
        ids = [list(p) for p in prompts]
        texts = [safe_decode(tok, p) for p in ids] if req.echo else []
    if any(not x for x in ids):
        raise bad_request("the prompt must not be empty", "prompt", "empty")
    max_tokens = DEFAULT_COMPLETION_MAX_TOKENS if req.max_tokens is None else req.max_tokens
    fmt = response_format_constraint(req.response_format)
    constraint = _constraint(req, fmt[1], "response_format", fmt[0]) if fmt else _constraint(req, None, "")
    params = sampling_params(req, max_tokens, n, constraint.params)
    lp = req.logprobs
    logprobs = LogprobOptions(lp is not None, 0 if (req.echo and lp is not None) else -1, lp or 0)
    names = FieldNames("prompt", "max_tokens", "min_tokens", "logprobs", constraint.field)
    request = GenerateRequest(tuple(tuple(x) for x in ids), (params,) * len(ids), logprobs, rid,
                              _priority(req), names=names)
    opts = req.stream_options
    return OpenAIPlan(ServerCall(request, req.timeout), n, [len(x) for x in ids], bool(req.stream),
                      bool(req.stream and opts and opts.include_usage), texts, bool(req.echo), lp)


def _priority(req: SamplingFields) -> int:
    return 0 if req.priority is None else req.priority


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


def _calls_as_text(calls: list[ToolCallIn], fmt: ToolFormat) -> str:
    return "\n" + fmt.render([(c.function.name, json.dumps(_arguments(c), ensure_ascii=False)) for c in calls])


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
            item["content"] += _calls_as_text(msg.tool_calls, tools.fmt if tools is not None else QWEN25)
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
    if req.top_logprobs is not None and req.top_logprobs > 0 and not req.logprobs:
        raise bad_request("top_logprobs needs logprobs: true", "top_logprobs", "conflicting_parameters")
    check_timeout(req.timeout)
    return check_n(req, 1, engine, max_sequences)


def chat_tool_format(engine: Engine, settings: ServerSettings | None) -> ToolFormat:
    """`--tool-call-parser`'s format, else the one the chat template writes calls in."""
    if settings is not None and settings.tool_call_parser:
        return tool_format(settings.tool_call_parser)
    return format_for_template(engine.tokenizer.chat_template)


def chat_plan(req: ChatCompletionRequest, engine: Engine, rid: str,
              settings: ServerSettings | None = None) -> OpenAIPlan:
    """Render, tokenize and build the engine call of a /v1/chat/completions request (`check_chat` ran)."""
    n = 1 if req.n is None else req.n
    tools = plan_tools(req.tools, req.tool_choice, chat_tool_format(engine, settings), req.parallel_tool_calls,
                       req.constrain_tool_calls)
    if tools is not None:  # why: a trigger that is a special token has no text: the grammar names it by id
        tools = replace(tools, trigger_token=special_token_id(engine.tokenizer, tools.fmt.trigger))
    fmt = response_format_constraint(req.response_format)
    tool_tag = tool_constraint(tools) if tools else None
    if fmt is not None and tool_tag is not None:
        if tools is not None and tools.kind.value == "auto":  # why: the response_format governs, as before
            tool_tag = None
        else:
            raise bad_request("response_format cannot be combined with a required or named tool_choice",
                              "response_format", "conflicting_parameters")
    # why: grammar errors must name what the client sent: the schema inside response_format, or tools
    if fmt is not None:
        param = "response_format.json_schema.schema" if fmt[0] == "json_schema" else "response_format"
        constraint = _constraint(req, fmt[1], param, fmt[0])
    else:
        constraint = _constraint(req, tool_tag, "tools", "structural_tag")
    ids = chat_prompt_ids(req.messages, engine.tokenizer, tools)
    max_tokens = req.max_completion_tokens if req.max_completion_tokens is not None else req.max_tokens
    if max_tokens is None:  # why: OpenAI's default is "what fits"; the engine still refuses an overlong prompt
        max_tokens = max(engine.max_new_tokens_room - len(ids), 1)
    markers = engine.reasoning_format
    reasoning = ReasoningPlan.of(markers, engine.tokenizer, ids, req.separate_reasoning is not False,
                                 req.stream_reasoning is not False) if markers else None
    thinking_first = reasoning is not None and reasoning.thinking_first
    budget = {"max_thinking_tokens": req.max_thinking_tokens} if reasoning is None or thinking_first else {}
    extra = {"skip_special_tokens": False} if tools is not None and tools.trigger_token is not None else {}
    params = sampling_params(req, max_tokens, n, {**constraint.params, **budget, **extra})  # why: the parser reads the trigger
    top = (req.top_logprobs or 0) if req.logprobs else 0
    most = "max_completion_tokens" if req.max_completion_tokens is not None else "max_tokens"
    names = FieldNames("messages", most, "min_tokens", "top_logprobs", constraint.field,
                       structure_fields(tools) if tool_tag is not None and tools is not None else ())
    request = GenerateRequest((tuple(ids),), (params,), LogprobOptions(bool(req.logprobs), -1, top), rid,
                              _priority(req), names=names, require_reasoning=thinking_first)
    opts = req.stream_options
    return OpenAIPlan(ServerCall(request, req.timeout), n, [len(ids)], bool(req.stream),
                      bool(req.stream and opts and opts.include_usage), logprobs=top if req.logprobs else None,
                      tools=tools, reasoning=reasoning)


# --- results ----------------------------------------------------------------------------------------------


def finish_reason(meta: dict[str, Any]) -> str | None:
    """The OpenAI finish_reason of a result ("stop", "length", "abort"), None while running."""
    reason = meta.get("finish_reason")
    return None if reason is None else str(reason.get("type"))


Entries = Sequence[tuple[Any, int, Any]]  # (logprob, token id, top alternatives): a delta's or a result's


def result_entries(meta: dict[str, Any], prompt: bool) -> list[tuple[Any, int, list]]:
    """(logprob, token id, top alternatives) of a result's prompt (with `prompt`) and output tokens."""
    out: list[tuple[Any, int, list]] = []
    keys = [("input_token_logprobs", "input_top_logprobs")] if prompt else []
    for pairs_key, tops_key in [*keys, ("output_token_logprobs", "output_top_logprobs")]:
        tops = meta.get(tops_key) or []
        for i, (lp, tid) in enumerate(meta.get(pairs_key) or []):
            out.append((lp, tid, tops[i] if i < len(tops) else []))
    return out


def completion_logprobs(entries: Entries, texts: TokenTexts, offset: int) -> tuple[CompletionLogprobs, int]:
    """Legacy completions logprobs of `entries`; returns them and the text offset after them."""
    result = CompletionLogprobs()
    for lp, tid, top in entries:
        text = texts(tid)
        result.tokens.append(text)
        result.token_logprobs.append(lp)
        result.top_logprobs.append({texts(t): v for v, t in top} if lp is not None else None)
        result.text_offset.append(offset)
        offset += len(text)
    return result, offset


def chat_logprobs(entries: Entries, texts: TokenTexts) -> ChatLogprobs:
    """Chat logprobs (`content` entries with top alternatives) of output `entries`."""
    content = []
    for lp, tid, top in entries:
        text = texts(tid)
        alts = [TopLogprob(texts(t), v, list(texts(t).encode())) for v, t in top]
        content.append(TokenLogprob(text, lp, list(text.encode()), alts))
    return ChatLogprobs(content)


def usage_of(metas: list[dict[str, Any]], n: int) -> Usage:
    """Exact usage from each sequence's meta_info: each prompt counted once (its first copy), every choice's
    completion tokens."""
    firsts = metas[::n]
    prompt = sum(m["prompt_tokens"] for m in firsts)
    completion = sum(m["completion_tokens"] for m in metas)
    cached = sum(m["cached_tokens"] for m in firsts)
    return Usage(prompt, completion, prompt + completion, PromptTokensDetails(cached))
