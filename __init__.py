"""sprig: a structured-generation and prefix-sharing LLM runtime."""

from __future__ import annotations

from typing import Any

__version__ = "0.1.0"


def __getattr__(name: str) -> Any:
    # Lazy so that `import sprig.radix` does not pull in torch and the model code.
    if name == "Engine":
        from sprig.runtime.engine import Engine

        return Engine
    raise AttributeError(f"module 'sprig' has no attribute {name!r}")
