"""Which LoRA adapters the engine serves and which pool slot each holds.

Adapters are read and checked where they are loaded (`read_adapter`, on the caller's thread), then registered by
the engine thread, which alone changes what follows. A request names its adapter when it is prepared (`resolve`:
an unknown or unloading name is a 404 naming it) and holds it from `hold` (joining the engine) to `drop` (leaving
it), so an adapter is unloaded only once every request that was accepted for it has finished (`unload` marks it;
its `gone` event fires then). A request admitted to run pins its adapter into a pool slot (`pin`, the scheduler's
gate); a slot whose adapter no running request pins is reused for another adapter, least recently used first, and a
request whose adapter finds no slot waits. A pinned adapter is never evicted.
"""

from __future__ import annotations

import itertools
import threading
from dataclasses import dataclass, field
from pathlib import Path

from sprig.runtime.config import EngineConfig
from sprig.runtime.engine.request import LoraRef, Request
from sprig.runtime.model.config import ModelConfig
from sprig.runtime.model.decoder import CausalLM
from sprig.runtime.model.lora_adapter import LoraAdapter, LoraError, LoraErrorKind, read_adapter
from sprig.runtime.model.lora_pool import LoraPool, attach_lora_pool


@dataclass(eq=False)
class _Entry:
    adapter: LoraAdapter
    uid: int
    slot: int | None = None
    holders: int = 0  # requests accepted for it and not finished
    pinned: int = 0  # of those, running (their tokens read its slot)
    last_used: int = 0
    unloading: bool = False
    gone: threading.Event = field(default_factory=threading.Event)


class LoraManager:
    """The served adapters over one `LoraPool` (whose `num_slots` is `--max-loras-per-batch`)."""

    def __init__(self, pool: LoraPool, cfg: ModelConfig, roots: list[str] | None = None,
                 static: bool = False) -> None:
        self.pool = pool
        self.cfg = cfg
        self.roots = [Path(r).resolve() for r in roots or []]
        self.static = static  # tensor parallel: adapters loaded at start only, each in a fixed slot
        self.entries: dict[str, _Entry] = {}
        self._uids = itertools.count(1)
        self._tick = itertools.count(1)
        self._free = list(range(pool.num_slots))

    # --- loading (read on any thread, registered on the engine thread) ---------------------------------
    def read(self, name: str, path: str, confine: bool = True) -> LoraAdapter:
        """Read and check an adapter; with `confine`, its folder must lie under one of the configured roots."""
        if not name or ":" in name or not name.isprintable():
            raise LoraError(f"adapter name {name!r} must be non-empty without ':'", param="lora_name")
        folder = Path(path).resolve()
        if confine and not any(folder.is_relative_to(root) for root in self.roots):
            raise LoraError(f"adapter {name}: its path is outside the configured --lora-roots", LoraErrorKind.FORBIDDEN,
                            param="lora_path")
        if not folder.is_dir():
            raise LoraError(f"adapter {name}: no folder at its path", param="lora_path")
        return read_adapter(name, folder, self.cfg, self.pool.max_rank, self.pool.targets)

    def register(self, adapter: LoraAdapter) -> None:
        """Serve a read adapter (engine thread); a name in use is refused."""
        if adapter.name in self.entries:
            raise LoraError(f"adapter {adapter.name} is already loaded", param="lora_name")
        entry = _Entry(adapter, next(self._uids))
        if self.static:
            if not self._free:
                raise LoraError(f"adapter {adapter.name}: every slot is taken (--max-loras-per-batch "
                                f"{self.pool.num_slots}) and tensor parallelism keeps adapters resident")
            self._fill(entry, self._free.pop(0))
        self.entries[adapter.name] = entry

    def unload(self, name: str) -> threading.Event:
        """Stop accepting requests for `name` (engine thread); the returned event fires once none holds it."""
        entry = self.entries.get(name)
        if entry is None or entry.unloading:
            raise LoraError(f"adapter {name} is not loaded", LoraErrorKind.NOT_FOUND, param="lora_name")
        if self.static:
            raise LoraError(f"adapter {name}: unloading is not supported with tensor parallelism yet")
        entry.unloading = True
        self._forget_if_idle(entry)
        return entry.gone

    # --- requests --------------------------------------------------------------------------------------
    def resolve(self, name: str, param: str = "lora_path") -> LoraRef:
        """A request's adapter by name (any thread); a 404 LoraError naming it when it is not served."""
        entry = self.entries.get(name)
        if entry is None or entry.unloading:
            raise LoraError(f"adapter {name} is not loaded", LoraErrorKind.NOT_FOUND, param=param)
        return LoraRef(name, entry.uid)

    def hold(self, req: Request) -> bool:
        """A request joins the engine (engine thread); False when its adapter was unloaded since it was prepared."""
        if req.lora is None:
            return True
        entry = self._entry(req.lora)
        if entry is None or entry.unloading:
            return False
        entry.holders += 1
        req.lora_held = True
        return True

    def drop(self, req: Request) -> None:
        """A request leaves the engine (engine thread)."""
        self.unpin(req)
        entry = self._entry(req.lora) if req.lora is not None else None
        if entry is not None and req.lora_held:
            entry.holders -= 1
            self._forget_if_idle(entry)
        req.lora_held = False

    def pin(self, req: Request) -> bool:
        """Give an admitted request its adapter's slot, loading the adapter into one (LRU) when it has none;
        False when every slot is pinned by other adapters (the request waits)."""
        if req.lora is None or req.lora_slot >= 0:
            return True
        entry = self._entry(req.lora)
        assert entry is not None  # held since it joined
        if entry.slot is None:
            slot = self._free_slot()
            if slot is None:
                return False
            self._fill(entry, slot)
        entry.pinned += 1
        entry.last_used = next(self._tick)
        req.lora_slot = entry.slot  # type: ignore[assignment]
        return True

    def unpin(self, req: Request) -> None:
        """A request stops running (finished, preempted, or not admitted after all)."""
        if req.lora is None or req.lora_slot < 0:
            return
        entry = self._entry(req.lora)
        if entry is not None:
            entry.pinned -= 1
            entry.last_used = next(self._tick)
        req.lora_slot = -1

    # --- slots -----------------------------------------------------------------------------------------
    def resident(self) -> dict[str, int]:
        """Adapter name → slot, for the adapters in the pool now."""
        return {name: e.slot for name, e in self.entries.items() if e.slot is not None}

    def _entry(self, ref: LoraRef) -> _Entry | None:
        entry = self.entries.get(ref.name)
        return entry if entry is not None and entry.uid == ref.uid else None

    def _free_slot(self) -> int | None:
        if self._free:
            return self._free.pop(0)
        idle = [e for e in self.entries.values() if e.slot is not None and e.pinned == 0]
        if not idle:
            return None
        victim = min(idle, key=lambda e: e.last_used)
        slot, victim.slot = victim.slot, None
        return slot

    def _fill(self, entry: _Entry, slot: int) -> None:
        self.pool.write(slot, entry.adapter)
        entry.slot = slot

    def _forget_if_idle(self, entry: _Entry) -> None:
        if not entry.unloading or entry.holders > 0:
            return
        if entry.slot is not None:
            self.pool.clear(entry.slot)
            self._free.append(entry.slot)
            entry.slot = None
        if self.entries.get(entry.adapter.name) is entry:
            del self.entries[entry.adapter.name]
        entry.gone.set()


def resolve_adapter(manager: LoraManager | None, name: str | None, param: str) -> LoraRef | None:
    """A prompt's adapter by name (None: the base model); a 404 LoraError naming it when it is not served."""
    if name is None:
        return None
    if manager is None:
        raise LoraError(f"adapter {name} is not loaded (this engine serves no LoRA adapters: start it with "
                        "--lora-paths or --enable-lora)", LoraErrorKind.NOT_FOUND, param=param)
    return manager.resolve(name, param)


def build_lora_manager(config: EngineConfig, model: CausalLM) -> LoraManager:
    """The engine's adapters: a pool on `model` (a tensor-parallel rank 0's is attached and filled already, as every
    rank's is, by `tp_worker.build_shard`) and `lora_paths`' adapters registered in order."""
    static = config.tp_size > 1
    pool = model.lora_pool if static else attach_lora_pool(model, config)
    assert isinstance(pool, LoraPool)  # build_shard attached it on every rank
    manager = LoraManager(pool, model.cfg, list(config.lora_roots or []), static)
    for name, folder in config.lora_adapters().items():
        manager.register(manager.read(name, folder, confine=False))
    return manager
