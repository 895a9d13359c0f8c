"""The text a program has built so far, kept both as one string and as chat messages."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from sprig.lang.backends.base import Piece, Prompt
from sprig.lang.chat import ChatFormatter
from sprig.lang.errors import ParseError, ProgramStateError
from sprig.lang.ir import Dtype, Role


@dataclass
class Document:
    """A program's prompt: text, closed messages, and the message being written. Not thread-safe."""

    text: str = ""
    messages: list[dict[str, str]] = field(default_factory=list)
    history: list[Role] = field(default_factory=list)  # roles of the closed messages
    open_role: Role | None = None
    open_content: str = ""
    open_suffix: str = ""  # what closes the open message, read off the template when it opened
    has_loose_text: bool = False
    pieces: list[Piece] = field(default_factory=list)

    def append(self, text: str, token_ids: tuple[int, ...] | None = None) -> None:
        """Append program text, or model output with the token ids it was generated as (inside the open
        message, if any)."""
        self._add(text, token_ids)
        if self.open_role is not None:
            self.open_content += text
        elif text:
            self.has_loose_text = True

    def _add(self, text: str, token_ids: tuple[int, ...] | None = None) -> None:
        if not text:
            return
        self.text += text
        if token_ids is None and self.pieces and self.pieces[-1].token_ids is None:
            self.pieces[-1] = Piece(self.pieces[-1].text + text)  # text runs are tokenized as a whole
        else:
            self.pieces.append(Piece(text, token_ids))

    def begin_role(self, role: Role, formatter: ChatFormatter) -> str:
        """Open a message of `role`; returns the template text appended."""
        if self.open_role is not None:
            raise ProgramStateError(f"cannot open a {role.value} message inside an open {self.open_role.value} one")
        rt = formatter.role_text(tuple(self.history), role)
        self._add(rt.prefix)
        self.open_role, self.open_content, self.open_suffix = role, "", rt.suffix
        return rt.prefix

    def end_role(self, role: Role) -> str:
        """Close the open message, which must be of `role`; returns the template text appended."""
        if self.open_role is not role:
            open_name = self.open_role.value if self.open_role else "no"
            raise ProgramStateError(f"cannot close a {role.value} message: {open_name} message is open")
        suffix = self.open_suffix
        self._add(suffix)
        self.messages.append({"role": role.value, "content": self.open_content})
        self.history.append(role)
        self.open_role, self.open_content, self.open_suffix = None, "", ""
        return suffix

    def prompt(self) -> Prompt:
        """A frozen view for a model call."""
        return Prompt(self.text, tuple(dict(m) for m in self.messages), self.open_role, self.open_content,
                      self.has_loose_text, tuple(self.pieces))

    def copy(self) -> Document:
        """An independent copy (for a fork branch)."""
        return Document(self.text, [dict(m) for m in self.messages], list(self.history), self.open_role,
                        self.open_content, self.open_suffix, self.has_loose_text, list(self.pieces))


def convert(text: str, dtype: Dtype, name: str | None) -> Any:
    """The value `gen(dtype=...)` stores: `text` converted to the dtype (ParseError when it is not one)."""
    if dtype is Dtype.STR:
        return text
    raw = text.strip()
    try:
        if dtype is Dtype.INT:
            return int(raw)
        if dtype is Dtype.FLOAT:
            return float(raw)
    except ValueError:
        raise ParseError(f"gen {name!r} produced {raw[:40]!r}, not a {dtype.value}", param=name) from None
    if raw in ("True", "true"):
        return True
    if raw in ("False", "false"):
        return False
    raise ParseError(f"gen {name!r} produced {raw[:40]!r}, not a bool", param=name)
