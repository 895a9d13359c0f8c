"""The adapter pool: `max_loras_per_batch` slots of stacked LoRA weights over one loaded base model, and the linears
that add each token's adapter to their output.

`LoraPool.attach` wraps every target linear of the model (q/k/v inside the fused `qkv_proj`, gate/up inside
`gate_up_proj`, `o_proj`, `down_proj`) in a `LoraLinear`: the base linear runs as before (any kernel, quantized or
not), then one call of the segmented product (`KernelSet.lora_add_`) adds each token's delta for all of the
linear's target modules to their slices of the output. Per linear the pool holds a `LoraWeights`: its modules' A
transposed side by side [S, in, P R] and their B [S, R, out] (R = `--max-lora-rank`), in bf16 under a bf16 model
(a decode step reads every slot's A and B, as it reads the base weights: half the bytes), else fp32; this rank's shard
under tensor parallelism: column-parallel modules (q/k/v/gate/up) hold their rows of B, row-parallel ones (o/down)
their columns of A, whose partial products the layer's all-reduce sums. Which adapter a slot holds, and when it
may be replaced, is the engine's business (`runtime/engine/lora_manager.py`); `write` and `clear` fill a slot.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import nn

from sprig.kernels.backend import KernelSet
from sprig.kernels.cpu_lora import built_isa
from sprig.kernels.lora import LoraBatch, LoraWeights
from sprig.runtime.config import EngineConfig
from sprig.runtime.model.decoder import MLP, CausalLM, DecoderLayer
from sprig.runtime.model.lora_adapter import LoraAdapter, parse_target_modules, read_adapter


@dataclass(frozen=True)
class LoraPart:
    """One target module inside a (possibly fused) linear: its output columns and its slice of the whole module."""

    layer: int  # the decoder layer in the whole model
    module: str  # PEFT's name: q_proj, ..., down_proj
    col: int  # first output column of the fused linear
    cols: int  # output columns on this rank
    row_parallel: bool  # sharded by input (o/down): A's columns; else by output: B's rows
    start: int  # first input (row-parallel) or output (column-parallel) channel of this rank's shard
    a_t: torch.Tensor  # [S, in on this rank, R], a view of its linear's `LoraWeights`
    b_t: torch.Tensor  # [S, R, cols], likewise


class LoraLinear(nn.Module):
    """A base linear plus the adapters of the pool's current batch (nothing is added while no batch is bound)."""

    def __init__(self, base: nn.Module, weights: LoraWeights, pool: LoraPool) -> None:
        super().__init__()
        self.base = base
        self.weights = weights
        self.pool = [pool]  # a list: the pool is not a submodule (it would be moved and listed with every layer)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = self.base(x)
        pool = self.pool[0]
        if pool.batch is None:
            return y
        pool.ops.lora_add_(y.view(-1, y.shape[-1]), x.reshape(-1, x.shape[-1]), self.weights, pool.batch)
        return y


class LoraPool:
    """`num_slots` adapter slots over `model`'s target modules, filled by `write`; `bind` sets a forward's batch."""

    def __init__(self, model: CausalLM, num_slots: int, max_rank: int, targets: frozenset[str]) -> None:
        if num_slots < 1:
            raise ValueError("max_loras_per_batch must be positive")
        if max_rank < 1:
            raise ValueError("max_lora_rank must be positive")
        self.num_slots, self.max_rank, self.targets = num_slots, max_rank, targets
        self.ops: KernelSet = model.ops
        self.dtype = torch.bfloat16 if model.dtype == torch.bfloat16 else torch.float32
        self.device = model.device
        self.ranks = torch.zeros(num_slots, dtype=torch.int64, device=self.device)
        self.batch: LoraBatch | None = None
        self.parts: dict[tuple[int, str], LoraPart] = {}
        self.weights: list[LoraWeights] = []  # one per wrapped linear
        built_isa()  # asked now, outside any forward a CPU graph records
        self._attach(model)

    @property
    def nbytes(self) -> int:
        """The pool's memory: every slot of every module's A and B."""
        return sum(w.a_t.nbytes + w.b_t.nbytes for w in self.weights)

    def bind(self, batch: LoraBatch | None) -> None:
        """The adapters of the forward about to run (None: the base model alone)."""
        self.batch = batch

    def write(self, slot: int, adapter: LoraAdapter) -> None:
        """Fill `slot` with `adapter` (modules it does not target stay zero)."""
        self.clear(slot)
        r = adapter.rank
        for key, (a, b) in adapter.weights.items():
            part = self.parts.get(key)
            if part is None:
                continue  # another pipeline stage's layer
            if part.row_parallel:
                a = a[:, part.start : part.start + part.a_t.shape[1]]
            else:
                b = b[part.start : part.start + part.cols]
            part.a_t[slot, :, :r].copy_(a.t())
            part.b_t[slot, :r].copy_(b.t())
        self.ranks[slot] = r

    def clear(self, slot: int) -> None:
        for w in self.weights:
            w.a_t[slot].zero_()
            w.b_t[slot].zero_()
        self.ranks[slot] = 0

    def _attach(self, model: CausalLM) -> None:
        cfg, plan, whole = model.layer_cfg, model.plan, model.cfg
        first = model.stage.start
        d = cfg.head_dim
        for i, layer in enumerate(model.layers):
            assert isinstance(layer, DecoderLayer)  # a ModuleList yields plain Modules
            n = first + i
            attn, mlp = layer.self_attn, layer.mlp
            q, kv = cfg.q_size, cfg.kv_size
            self._wrap(attn, "qkv_proj", [
                (n, "q_proj", 0, q, False, plan.head_start * d, whole.hidden_size),
                (n, "k_proj", q, kv, False, plan.kv_head_start * d, whole.hidden_size),
                (n, "v_proj", q + kv, kv, False, plan.kv_head_start * d, whole.hidden_size)])
            self._wrap(attn, "o_proj", [(n, "o_proj", 0, whole.hidden_size, True, plan.head_start * d, q)])
            if not isinstance(mlp, MLP):
                continue  # a mixture-of-experts block: adapters target its attention only
            inter, start = cfg.intermediate_size, plan.intermediate_start
            gate_up = [(n, "gate_proj", 0, inter, False, start, whole.hidden_size),
                       (n, "up_proj", inter, inter, False, start, whole.hidden_size)]
            self._wrap(mlp, "gate_up_proj", gate_up if mlp.gated else [
                (n, "up_proj", 0, inter, False, start, whole.hidden_size)])
            self._wrap(mlp, "down_proj", [(n, "down_proj", 0, whole.hidden_size, True, start, inter)])

    def _wrap(self, owner: nn.Module, attr: str, specs: list[tuple[int, str, int, int, bool, int, int]]) -> None:
        """Replace `owner.attr` by a `LoraLinear` over it with a part per targeted module of `specs`."""
        specs = [spec for spec in specs if spec[1] in self.targets]
        if not specs:
            return
        fan_in = specs[0][6]  # the modules of one linear share its input
        w = LoraWeights.zeros(self.num_slots, fan_in, self.max_rank, [(col, cols) for _, _, col, cols, *_ in specs],
                              self.ranks, self.dtype)
        for p, (layer, module, col, cols, row_parallel, start, _) in enumerate(specs):
            self.parts[(layer, module)] = LoraPart(layer, module, col, cols, row_parallel, start, *w.module(p))
        self.weights.append(w)
        setattr(owner, attr, LoraLinear(getattr(owner, attr), w, self))


def attach_lora_pool(model: CausalLM, config: EngineConfig, preload: bool = False) -> LoraPool:
    """Give a loaded model its adapter pool (`config`'s slots, rank and targets). With `preload` (tensor parallel
    ranks, whose slots never change), `lora_paths`' adapters fill slots 0, 1, ... in order on every rank alike."""
    pool = LoraPool(model, config.max_loras_per_batch, config.max_lora_rank,
                    parse_target_modules(config.lora_target_modules))
    model.lora_pool = pool
    if preload:
        for slot, (name, folder) in enumerate(config.lora_adapters().items()):
            pool.write(slot, read_adapter(name, folder, model.cfg, pool.max_rank, pool.targets))
    return pool
