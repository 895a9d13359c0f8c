"""Chat messages → prompt token ids through the checkpoint's chat template.

Content may be a string or a list of ``{"type": "text", "text": ...}`` parts (joined with newlines; other part
types are refused). ``developer`` messages are rendered as ``system``. A conversation of only a system message is
allowed: generation continues after the template's assistant prompt. Assistant ``tool_calls`` are passed to
templates that render them and written as ``<tool_call>`` text for templates that do not.
"""

from __future__ import annotations

import json
from typing import Any

from sprig.runtime.errors import RequestError
from sprig.runtime.model.tokenizer import Tokenizer
from sprig.runtime.server.http_errors import bad_request, from_value_error
from sprig.runtime.server.openai_protocol import ChatMessage, Role, ToolCallIn
from sprig.runtime.server.openai_tools import TOOL_CALL_CLOSE, TOOL_CALL_OPEN, ToolPlan, tools_system_prompt

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
