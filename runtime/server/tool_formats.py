"""Tool-call formats by model family: each one's trigger, output grammar (a structural tag) and parser.

Names follow SGLang's ``--tool-call-parser``:
- ``qwen25`` (alias ``hermes``): ``<tool_call>\\n{"name": N, "arguments": {...}}\\n</tool_call>``, one block per call;
- ``llama3``: ``{"name": N, "parameters": {...}}``, after ``<|python_tag|>`` or bare, several joined by ``;``;
- ``mistral``: ``[TOOL_CALLS] [{"name": N, "arguments": {...}}, ...]``;
- ``pythonic``: ``[f(a=1), g(b="x")]``: keyword arguments in declared order, values as Python literals. Its
  trigger ``[`` is too common in prose to open a call, so in "auto" mode its calls are parsed, not constrained.
SmolLM2-Instruct's chat template renders no tools, so it gets ``qwen25`` with the tools described in a system prompt.

`CallParser` reads one choice's text incrementally, for streams (a call's id, type and name once its header is
written, then its arguments as they come) and, fed the whole text at once, for responses.
"""

from __future__ import annotations

import ast
import json
import re
import uuid
from dataclasses import dataclass, field
from typing import Any

from sprig.grammar.structural import Envelope, StructuralTag, Structure, TagMode, ValueSyntax
from sprig.runtime.server.reasoning import partial_marker_len

HEADER_TAIL = r'\s*\{\s*"name"\s*:\s*"(?P<name>[A-Za-z0-9_\-.]{1,64})"\s*,\s*"(?:arguments|parameters)"\s*:\s*'
MAX_HEADER_CHARS = 256  # why: text that has not become a call header by then is content


@dataclass(frozen=True)
class ToolFormat:
    """One family's call syntax: what opens a call, how a call begins and ends, and how calls are joined."""

    name: str
    trigger: str  # what opens the first call in free text
    opener: str  # regex: the trigger and what follows it before the first call's header
    begin: str  # a call's begin, with {name}; the trigger is its prefix unless there is an envelope
    end: str  # a call's end after its arguments
    after: str  # regex: what ends a call's arguments; group `more` when another call follows at once
    args_key: str = "arguments"
    lead: str = ""  # text right before a call that belongs to it, not to the content (Llama's <|python_tag|>)
    envelope: Envelope | None = None
    syntax: ValueSyntax = ValueSyntax.JSON
    triggers_in_text: bool = True  # False: the trigger is too common in prose to constrain "auto" mode with
    instructions: str = ""  # how to call, for templates that do not render tools

    def structures(self, functions: tuple[dict[str, Any], ...], strict: dict[str, bool]) -> tuple[Structure, ...]:
        return tuple(Structure(self.begin.format(name=f["name"]), _schema_text(f["parameters"]), self.end,
                               strict.get(f["name"], False), self.syntax) for f in functions)

    def render(self, calls: list[tuple[str, str]]) -> str:
        """Calls (name, arguments JSON) written in this format, for a template that does not render them."""
        if self is PYTHONIC:
            args = [", ".join(f"{k}={v!r}" for k, v in json.loads(a).items()) for _, a in calls]
            return "[" + ", ".join(f"{n}({a})" for (n, _), a in zip(calls, args, strict=True)) + "]"
        items = [self.begin.format(name=n) + a + self.end for n, a in calls]
        if self.envelope is not None:
            return self.envelope.prefix + self.envelope.separator.join(items) + self.envelope.suffix
        return ("; " if self is LLAMA3 else "\n").join(items)

    def tag(self, functions: tuple[dict[str, Any], ...], strict: dict[str, bool], forced: bool,
            parallel: bool, trigger_token: int | None = None) -> StructuralTag:
        """The structural tag that constrains calls of `functions` (from the first token when `forced`).

        trigger_token: the trigger's id where the tokenizer has it as one special token (Mistral's [TOOL_CALLS]).
        """
        tokens = ((self.trigger, trigger_token),) if trigger_token is not None else ()
        return StructuralTag(self.structures(functions, strict), (self.trigger,),
                             TagMode.FORCED if forced else TagMode.TRIGGERED, parallel, self.envelope,
                             trigger_tokens=tokens)


QWEN25 = ToolFormat(
    "qwen25", "<tool_call>", r"<tool_call>", '<tool_call>\n{{"name": "{name}", "arguments": ', "}\n</tool_call>",
    r"\s*\}\s*</tool_call>",
    instructions='<tool_call>\n{"name": <function-name>, "arguments": <args-json-object>}\n</tool_call>')
LLAMA3 = ToolFormat(
    "llama3", '{"name"', r"(?:<\|python_tag\|>)?", '{{"name": "{name}", "parameters": ', "}",
    r"\s*\}(?:\s*(?P<more>;))?", args_key="parameters", lead="<|python_tag|>",
    instructions='{"name": <function-name>, "parameters": <args-json-object>}')
MISTRAL = ToolFormat(
    "mistral", "[TOOL_CALLS]", r"\[TOOL_CALLS\]\s*\[", '{{"name": "{name}", "arguments": ', "}",
    r"\s*\}\s*(?:(?P<more>,)|\])", envelope=Envelope("[TOOL_CALLS] [", ", ", "]"),
    instructions='[TOOL_CALLS] [{"name": <function-name>, "arguments": <args-json-object>}]')
PYTHONIC = ToolFormat("pythonic", "[", r"\[", "{name}(", ")", "", envelope=Envelope("[", ", ", "]"),
                      syntax=ValueSyntax.PYTHON_KWARGS, triggers_in_text=False,
                      instructions="[func_name(arg=value, ...), ...]")
FORMATS = {f.name: f for f in (QWEN25, LLAMA3, MISTRAL, PYTHONIC)}
ALIASES = {"hermes": "qwen25", "qwen": "qwen25", "llama4": "pythonic"}


def tool_format(name: str) -> ToolFormat:
    """The format called `name` (SGLang's names); a ValueError listing the known ones otherwise."""
    key = ALIASES.get(name, name)
    if key not in FORMATS:
        known = ", ".join(sorted([*FORMATS, *ALIASES]))
        raise ValueError(f"unknown --tool-call-parser {name!r}; known: {known}")
    return FORMATS[key]


def format_for_template(template: str | None) -> ToolFormat:
    """The format a chat template writes calls in (Hermes/Qwen when it shows none)."""
    text = template or ""
    if "[TOOL_CALLS]" in text:
        return MISTRAL
    if "<|python_tag|>" in text or '"parameters": ' in text and "ipython" in text:
        return LLAMA3
    return QWEN25


def constrainable(fmt: ToolFormat, forced: bool) -> bool:
    """Whether the format's calls are constrained: always when forced, in free text where its trigger is rare."""
    return forced or fmt.triggers_in_text


def special_token_id(tokenizer: Any, text: str) -> int | None:
    """The id of `text` when the tokenizer spells it as one special token (which has no text to match)."""
    ids = tokenizer.encode(text, add_special_tokens=False)
    return ids[0] if len(ids) == 1 and ids[0] in getattr(tokenizer, "special_token_ids", ()) else None


def new_call_id() -> str:
    return f"call_{uuid.uuid4().hex[:24]}"


def _schema_text(schema: Any) -> str:
    return json.dumps(schema, ensure_ascii=False, separators=(",", ":"))


# --- parsing ------------------------------------------------------------------------------------------------


@dataclass
class ParsedCall:
    """A call read from the text: complete once its arguments and its end were read."""

    id: str
    name: str
    arguments: str = ""
    complete: bool = False


@dataclass
class CallEvent:
    """What one `feed` produced: content text, and per call index its header (first time) and argument piece."""

    content: str = ""
    headers: list[int] = field(default_factory=list)
    pieces: dict[int, str] = field(default_factory=dict)


class _JsonEnd:
    """Finds where a JSON value written incrementally ends (depth and strings tracked per character)."""

    def __init__(self) -> None:
        self.depth = 0
        self.in_string = False
        self.escaped = False
        self.started = False

    def feed(self, ch: str) -> bool:
        """Consume one character; True when it completes the value (an object or array)."""
        if self.in_string:
            self.escaped, self.in_string = (False, True) if self.escaped else (ch == "\\", ch != '"')
            return False
        if ch == '"':
            self.in_string = True
        elif ch in "{[":
            self.depth += 1
            self.started = True
        elif ch in "}]":
            self.depth -= 1
        return self.started and self.depth == 0


class CallParser:
    """One choice's text → content and calls, incrementally (see the module docstring)."""

    def __init__(self, fmt: ToolFormat, names: set[str]) -> None:
        self.fmt, self.names = fmt, names
        self.calls: list[ParsedCall] = []
        self._buf = ""
        self._state = "text"  # text | header | args | after
        self._continuing = False  # the header expected is one after a separator (no opener)
        self._fences = 0
        self._raw = ""  # the text of the call being read, returned as content if it never becomes a call
        self._json = _JsonEnd()
        self._first_re = re.compile(fmt.opener + HEADER_TAIL)
        self._next_re = re.compile(HEADER_TAIL)
        self._after_re = re.compile(fmt.after) if fmt.after else None

    def feed(self, text: str) -> CallEvent:
        """Consume new text; what became content and calls."""
        event = CallEvent()
        self._buf += text
        if self.fmt is PYTHONIC:
            return event  # why: pythonic calls are read whole, in `finish`
        progressed = True
        while progressed and self._buf:
            progressed = getattr(self, f"_{self._state}")(event)
        return event

    def finish(self) -> CallEvent:
        """The end of the text: what is still held back is content; an unfinished call is not a call."""
        if self.fmt is PYTHONIC:
            return self._pythonic()
        event = CallEvent()
        if self._state == "after":
            self._after(event, final=True)
        if self._state in ("header", "args", "after") and self.calls and not self.calls[-1].complete \
                and self._raw:
            self.calls.pop()  # why: a call cut short (length) is not reported as a call
        event.content += self._raw + self._buf if self._state != "text" else self._buf
        self._buf, self._raw, self._state, self._continuing = "", "", "text", False
        return event

    def complete_calls(self) -> list[ParsedCall]:
        return [c for c in self.calls if c.complete]

    def _text(self, event: CallEvent) -> bool:
        at = self._trigger_at()
        if at < 0:
            keep = partial_marker_len(self._buf, self.fmt.lead + self.fmt.trigger)
            self._emit(event, self._buf[: len(self._buf) - keep])
            self._buf = self._buf[len(self._buf) - keep:]
            return False
        before = self._buf[:at]
        lead = self.fmt.lead if self.fmt.lead and before.endswith(self.fmt.lead) else ""
        self._emit(event, before[: len(before) - len(lead)])
        self._buf, self._state, self._raw = self._buf[at - len(lead):], "header", ""
        return True

    def _trigger_at(self) -> int:
        start = 0
        while True:
            at = self._buf.find(self.fmt.trigger, start)
            if at < 0 or (self._fences + self._buf.count("```", 0, at)) % 2 == 0:
                return at  # why: a trigger inside a code block is an example, not a call
            start = at + 1

    def _emit(self, event: CallEvent, text: str) -> None:
        self._fences += text.count("```")
        event.content += text

    def _header(self, event: CallEvent) -> bool:
        pattern = self._next_re if self._continuing else self._first_re
        m = pattern.match(self._buf)
        if m is not None and m.end() == len(self._buf):
            return False  # why: the header's trailing whitespace may go on
        if m is None:
            if len(self._buf) <= MAX_HEADER_CHARS and _may_become(self._buf, pattern):
                return False
            self._state = "text"  # why: not a call after all; the trigger is plain text
            if not self._continuing:
                self._emit(event, self._buf[: len(self.fmt.trigger)])
                self._buf = self._buf[len(self.fmt.trigger):]
            self._continuing = False
            return True
        if m.group("name") not in self.names:
            self._state, self._continuing = "text", False
            self._emit(event, self._buf[: m.end()])
            self._buf = self._buf[m.end():]
            return True
        self.calls.append(ParsedCall(new_call_id(), m.group("name")))
        event.headers.append(len(self.calls) - 1)
        self._raw = self._buf[: m.end()]
        self._buf, self._state, self._json = self._buf[m.end():], "args", _JsonEnd()
        return True

    def _args(self, event: CallEvent) -> bool:
        call, index = self.calls[-1], len(self.calls) - 1
        for i, ch in enumerate(self._buf):
            if self._json.feed(ch):
                piece, self._buf, self._state = self._buf[: i + 1], self._buf[i + 1:], "after"
                break
        else:
            piece, self._buf = self._buf, ""
        call.arguments += piece
        self._raw += piece
        event.pieces[index] = event.pieces.get(index, "") + piece
        return bool(self._buf)

    def _after(self, event: CallEvent, final: bool = False) -> bool:
        assert self._after_re is not None
        m = self._after_re.match(self._buf)
        if m is None:
            return False if not final and _may_become(self._buf, self._after_re) else self._abandon(event)
        more = m.groupdict().get("more")
        if not final and more is None and m.end() == len(self._buf) and "more" in m.groupdict():
            return False  # why: a separator may still follow
        self.calls[-1].complete = True
        self._buf, self._raw = self._buf[m.end():], ""
        self._state, self._continuing = ("header", True) if more else ("text", False)
        return True

    def _abandon(self, event: CallEvent) -> bool:
        """Arguments that are not followed by the call's end: the call was not one (unconstrained output)."""
        self.calls.pop()
        self._emit(event, self._raw + self._buf)
        self._buf, self._raw, self._state = "", "", "text"
        return False

    def _pythonic(self) -> CallEvent:
        text, self._buf = self._buf, ""
        stripped = text.strip()
        parsed = _pythonic_calls(stripped) if stripped.startswith("[") and stripped.endswith("]") else None
        if parsed is None or not all(name in self.names for name, _ in parsed):
            return CallEvent(content=text)
        event = CallEvent()
        for name, args in parsed:
            self.calls.append(ParsedCall(new_call_id(), name, json.dumps(args, ensure_ascii=False), True))
            index = len(self.calls) - 1
            event.headers.append(index)
            event.pieces[index] = self.calls[-1].arguments
        return event


def _may_become(text: str, pattern: re.Pattern[str]) -> bool:
    """Whether more text could still make `pattern` match at the start (a cheap prefix test)."""
    if len(text) > MAX_HEADER_CHARS:
        return False
    probe = text + '"x", "arguments": {}}]</tool_call>'
    return pattern.match(probe) is not None or bool(re.fullmatch(r"[\s{}\[\]\"a-zA-Z0-9_\-.:,<>|/]*", text))


def _pythonic_calls(text: str) -> list[tuple[str, dict[str, Any]]] | None:
    """``[f(a=1), g(b="x")]`` → [(name, arguments)], or None when it is not a list of keyword-only calls."""
    try:
        tree = ast.parse(text, mode="eval")
    except (SyntaxError, ValueError, RecursionError):
        return None
    if not isinstance(tree.body, ast.List):
        return None
    out = []
    for item in tree.body.elts:
        if not isinstance(item, ast.Call) or not isinstance(item.func, ast.Name) or item.args:
            return None
        try:
            args = {kw.arg: ast.literal_eval(kw.value) for kw in item.keywords if kw.arg is not None}
        except (ValueError, SyntaxError, RecursionError):
            return None
        out.append((item.func.id, args))
    return out
