"""Run-time LoRA adapter management from any thread (`Engine.lora`): adapters are read and checked on the caller's
thread, registered and unloaded on the engine thread, where `LoraManager` lives."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from sprig.runtime.engine.lora_manager import LoraManager
from sprig.runtime.model.lora_adapter import LoraError

EngineCall = Callable[[Callable[[], Any]], Any]  # runs a function on the engine thread, returns its result


class LoraControl:
    """Load, unload and list an engine's adapters (LoraError says why not: its `kind` is the HTTP status)."""

    def __init__(self, manager: LoraManager | None, call: EngineCall) -> None:
        self._manager = manager
        self._call = call

    @property
    def enabled(self) -> bool:
        return self._manager is not None

    def adapters(self) -> dict[str, str]:
        """Served adapters: name → folder (a snapshot; unloading ones left out)."""
        if self._manager is None:
            return {}
        return {name: e.adapter.path for name, e in list(self._manager.entries.items()) if not e.unloading}

    def load(self, name: str, path: str) -> None:
        """Read the adapter in `path` (under the configured roots) and serve it as `name`."""
        manager = self._on()
        adapter = manager.read(name, path)
        self._call(lambda: manager.register(adapter))

    def unload(self, name: str, timeout: float) -> bool:
        """Stop serving `name`: new requests for it get a 404 at once; True once its running requests have finished
        and its slot is free, False if they are still running after `timeout` seconds (it is unloaded then)."""
        manager = self._on()
        gone = self._call(lambda: manager.unload(name))
        return gone.wait(timeout)

    def _on(self) -> LoraManager:
        if self._manager is None:
            raise LoraError("this server serves no LoRA adapters: start it with --enable-lora and --lora-roots",
                            param="lora_path")
        return self._manager
