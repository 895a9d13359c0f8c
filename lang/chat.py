"""Role text from the model's own chat template.

A program's text is one growing string, so each role needs the exact text that opens and closes a message at
that point of the conversation. Both are read off the template by rendering the conversation so far plus one
message whose content is a sentinel: what comes between the rendered history and the sentinel opens the
message (BOS, default system prompts and the like appear where the template puts them), and what follows the
sentinel closes it. Results are cached by the sequence of roles, which is all that templates branch on.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from dataclasses import dataclass

from jinja2 import TemplateError

from sprig.lang.errors import ProgramStateError
from sprig.lang.ir import Role

SENTINEL = "\ue000sprig-content\ue001"
_FILLER = "x"  # content of earlier messages when reading a template: templates branch on roles, not text

# Render(messages, add_generation_prompt) -> text
Render = Callable[[list[dict[str, str]], bool], str]

CHATML_TEMPLATE = (
    "{% for message in messages %}{{ '<|im_start|>' + message['role'] + '\n' + message['content'] + '<|im_end|>\n' }}"
    "{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}{% endif %}"
)


@dataclass(frozen=True)
class RoleText:
    """The text that opens and closes one message at one point of a conversation."""

    prefix: str
    suffix: str


class ChatFormatter:
    """Computes `RoleText` for a role after a history of roles, from a render function."""

    def __init__(self, render: Render) -> None:
        self._render = render
        self._cache: dict[tuple[Role, ...], RoleText] = {}
        self._lock = threading.Lock()

    def role_text(self, history: tuple[Role, ...], role: Role) -> RoleText:
        """The opening and closing text of a `role` message that follows messages of roles `history`."""
        key = (*history, role)
        with self._lock:
            cached = self._cache.get(key)
        if cached is None:
            cached = self._compute(history, role)
            with self._lock:
                self._cache[key] = cached
        return cached

    def _compute(self, history: tuple[Role, ...], role: Role) -> RoleText:
        before = [{"role": r.value, "content": _FILLER} for r in history]
        full = self._safe_render([*before, {"role": role.value, "content": SENTINEL}])
        at = full.find(SENTINEL)
        if at < 0:
            raise ProgramStateError(f"the chat template drops the content of a {role.value} message")
        head, suffix = full[:at], full[at + len(SENTINEL):]
        base = self._safe_render(before) if before else ""
        # Templates that are additive give the new message's opening as the head minus the history.
        prefix = head[len(base):] if head.startswith(base) else self._fallback_prefix(role)
        return RoleText(prefix, suffix)

    def _fallback_prefix(self, role: Role) -> str:
        full = self._safe_render([{"role": role.value, "content": SENTINEL}])
        return full[: full.find(SENTINEL)]

    def _safe_render(self, messages: list[dict[str, str]]) -> str:
        try:
            return self._render(messages, False)
        except (ValueError, TemplateError) as e:  # the template refuses this order of roles (e.g. strict alternation)
            raise ProgramStateError(f"the chat template rejects this sequence of roles: {e}") from None


def chatml_formatter() -> ChatFormatter:
    """A formatter for the ChatML format, used when a backend does not know its model's template."""
    from jinja2.sandbox import ImmutableSandboxedEnvironment

    template = ImmutableSandboxedEnvironment().from_string(CHATML_TEMPLATE)
    return ChatFormatter(lambda messages, gen: template.render(messages=messages, add_generation_prompt=gen))


def jinja_formatter(source: str, bos_token: str = "", eos_token: str = "") -> ChatFormatter:
    """A formatter for a Jinja chat template given as text (e.g. from a server's model info)."""
    from jinja2.sandbox import ImmutableSandboxedEnvironment

    template = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True).from_string(source)

    def render(messages: list[dict[str, str]], gen: bool) -> str:
        return template.render(messages=messages, add_generation_prompt=gen, bos_token=bos_token,
                               eos_token=eos_token)

    return ChatFormatter(render)
