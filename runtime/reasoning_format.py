"""Reasoning models' output formats, by SGLang's `--reasoning-parser` names: where thinking starts and ends.

Kept at the top of `runtime/` (like `config.py`) because the engine (a constraint that starts after thinking,
the thinking budget) and the server (`reasoning_content`) read the same markers.
- ``deepseek-r1``: the chat template opens ``<think>``, so the output starts inside thinking and runs to
  ``</think>`` (a ``<think>`` the model writes anyway is dropped).
- ``qwen3``: the model writes ``<think>…</think>`` itself; with thinking disabled the template closes an empty
  block in the prompt (``<think>\\n\\n</think>\\n\\n``) and the output is all answer.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class ReasoningFormat:
    """One family's thinking markers."""

    name: str
    start: str
    end: str
    starts_inside: bool  # the output begins inside thinking even when the prompt does not end with `start`

    def inside_after(self, prompt_tail: str) -> bool:
        """Whether output that follows `prompt_tail` (the end of the rendered prompt) starts inside thinking."""
        tail = prompt_tail.rstrip()
        return self.starts_inside or tail.endswith(self.start)

    def closed_in(self, prompt_tail: str) -> bool:
        """Whether the prompt already closed thinking (Qwen3 with thinking disabled): the output is all answer."""
        return prompt_tail.rstrip().endswith(self.end)


REASONING_FORMATS = {
    "deepseek-r1": ReasoningFormat("deepseek-r1", "<think>", "</think>", starts_inside=True),
    "qwen3": ReasoningFormat("qwen3", "<think>", "</think>", starts_inside=False),
}


def reasoning_format(name: str) -> ReasoningFormat:
    """The format named `name`; a ValueError of one line listing the known names otherwise."""
    fmt = REASONING_FORMATS.get(name)
    if fmt is None:
        raise ValueError(f"unknown reasoning parser {name[:64]!r}; known: {', '.join(REASONING_FORMATS)}")
    return fmt
