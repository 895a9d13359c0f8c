"""sprig: a structured-generation and prefix-sharing LLM runtime."""

from __future__ import annotations

from typing import Any

__version__ = "0.1.0"

# The DSL's public names (`sprig.function`, `sprig.gen`, ...), loaded from sprig.lang on first use.
_LANG_NAMES = frozenset({
    "function", "gen", "select", "system", "user", "assistant", "system_begin", "system_end", "user_begin",
    "user_end", "assistant_begin", "assistant_end", "set_default_backend", "get_default_backend",
    "RuntimeEndpoint", "OpenAICompatible", "OpenAIMode", "LocalBackend", "SelectMethod", "ProgramState",
    "ForkGroup", "SprigFunction",
})


def __getattr__(name: str) -> Any:
    # Lazy so that `import sprig.radix` does not pull in torch and the model code.
    if name == "Engine":
        from sprig.runtime.engine.engine import Engine

        return Engine
    if name in _LANG_NAMES:
        import sprig.lang

        return getattr(sprig.lang, name)
    raise AttributeError(f"module 'sprig' has no attribute {name!r}")


__all__ = sorted({"Engine", "__version__", *_LANG_NAMES})


def __dir__() -> list[str]:
    return __all__
