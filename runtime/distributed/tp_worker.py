"""One rank of a multi-process engine: join the group, load this rank's shard, size the KV pool with the others,
then run every step rank 0 sends until it says stop.

The world is `pp_size * tp_size` ranks; rank = stage * tp_size + tp_rank. With `pp_size == 1` every rank is a
tensor-parallel rank of the one stage and runs the steps rank 0 broadcasts; otherwise a rank runs its stage's
layers on what the previous stage sends (`pp_worker`). Ranks 1..N-1 run `worker_main` in a process sprig spawns
(one machine), or `run_worker` in a process `torchrun` started (several machines). Rank 0 runs `build_shard`
inside the engine (see `tp_group`).
"""

from __future__ import annotations

import logging
import os
import pickle
import signal
import sys
import threading
import time
from dataclasses import replace
from multiprocessing.connection import Connection

import torch
import torch.distributed as dist

from sprig.kernels.kv_quant import KVCacheDtype
from sprig.runtime.config import EngineConfig
from sprig.runtime.distributed.pp_worker import serve_stage
from sprig.runtime.distributed.rank_spec import (
    RankSpec,
    collective_device,
    collective_timeout,
    rank_name,
)
from sprig.runtime.distributed.tp_protocol import Command, StepChannel, decode_step
from sprig.runtime.model.config import load_model_config
from sprig.runtime.model.decoder import CausalLM
from sprig.runtime.model.kv_pool import KVPool, PoolSize, choose_pool_size
from sprig.runtime.model.loader import load_model, resolve_dtype
from sprig.runtime.model.lora_pool import attach_lora_pool
from sprig.runtime.model.parallel import TPContext, pipeline_stage
from sprig.runtime.model.runner import ModelRunner

logger = logging.getLogger(__name__)

PARENT_POLL_S = 0.5


def join_group(spec: RankSpec) -> TPContext:
    """Initialize the default process group for this rank (blocks until every rank has joined); returns this rank's
    tensor-parallel context: the world itself without pipeline stages, else its stage's own group."""
    if spec.device.startswith("cuda"):
        torch.cuda.set_device(torch.device(spec.device))  # why: NCCL binds each rank to its own GPU
    if not dist.is_initialized():
        dist.init_process_group(spec.backend.value, init_method=spec.init_method, rank=spec.rank,
                                world_size=spec.size, timeout=collective_timeout())
    if spec.config.pp_size == 1:
        return TPContext(dist.get_rank(), dist.get_world_size(), None)
    tp = spec.tp_size
    if tp == 1:
        return TPContext()  # a stage of one rank: no collectives
    # why: every rank must create every group, in the same order, even the groups it is not in
    groups = [dist.new_group(list(range(s * tp, (s + 1) * tp))) for s in range(spec.config.pp_size)]
    return TPContext(spec.tp_rank, tp, groups[spec.stage])


def build_shard(spec: RankSpec, tp: TPContext) -> tuple[CausalLM, KVPool]:
    """Load this rank's shard and a KV pool as large as the tightest rank allows (a collective: all ranks call it)."""
    cfg = spec.config
    model_cfg = load_model_config(spec.model_path)
    stage = pipeline_stage(model_cfg, cfg.pp_size, spec.stage) if cfg.pp_size > 1 else None
    model = load_model(spec.model_path, cfg.dtype, cfg.quantization, spec.device, cfg.attention_backend, tp=tp,
                       stage=stage)
    if cfg.lora_enabled:  # every rank holds its shard of every adapter, in the same slots
        attach_lora_pool(model, cfg, preload=True)
    dtype = resolve_dtype(cfg.dtype, model_cfg)
    kv_dtype = KVCacheDtype.parse(cfg.kv_cache_dtype)
    size = choose_pool_size(model.layer_cfg, dtype, cfg.page_size, cfg.max_total_tokens, cfg.mem_fraction,
                            spec.device, kv_dtype)
    pages = torch.tensor([size.num_pages], dtype=torch.int64, device=collective_device(spec))
    # why: every rank's pool (each stage's holds its own layers) must hold the same slots: the world agrees
    dist.all_reduce(pages, op=dist.ReduceOp.MIN)
    size = PoolSize(int(pages.item()), size.page_size)
    return model, KVPool(model.layer_cfg, size, dtype, spec.device, kv_dtype)


def serve_steps(spec: RankSpec, tp: TPContext, runner: ModelRunner) -> None:
    """Run each step rank 0 broadcasts until SHUTDOWN."""
    channel = StepChannel(tp, collective_device(spec))
    while True:
        command, payload = channel.receive()
        if command is Command.SHUTDOWN:
            return
        if command is Command.STEP and payload is not None:
            runner.forward(decode_step(payload))


def run_worker(spec: RankSpec, report: Connection | None = None) -> int:
    """A whole non-zero rank: join, load, serve steps, leave. Returns the exit status."""
    if spec.config.num_threads:
        torch.set_num_threads(spec.config.num_threads)
    try:
        tp = join_group(spec)
        model, pool = build_shard(spec, tp)
    except Exception as e:  # noqa: BLE001 - reported to rank 0 as one line
        message = f"{type(e).__name__}: {e}"
        logger.error("%s failed to start: %s", rank_name(spec), message)
        if report is not None:
            report.send(("error", message))
        return 1
    if report is not None:
        report.send(("ready", None))
    try:
        if spec.config.pp_size > 1:
            serve_stage(spec, tp, ModelRunner(model, pool))
        else:
            serve_steps(spec, tp, ModelRunner(model, pool))
    except Exception as e:  # noqa: BLE001 - a broken peer or a timeout ends this rank
        print(f"sprig: {rank_name(spec)} stopped: {type(e).__name__}: {e}", file=sys.stderr, flush=True)
        return 1
    dist.destroy_process_group()
    return 0


def main() -> None:
    """Entry point of a rank process that sprig started: reads (spec, report fd) pickled on stdin."""
    spec, fd = pickle.load(sys.stdin.buffer)
    worker_main(spec, Connection(fd, readable=False))


def worker_main(spec: RankSpec, report: Connection) -> None:
    """Run a rank that sprig started, reporting readiness or the startup error on `report`."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # why: Ctrl-C reaches the whole process group; rank 0 decides
    logging.basicConfig(level=logging.WARNING, format=f"%(asctime)s rank{spec.rank} %(levelname)s %(message)s")
    if spec.parent_pid is not None:
        _exit_with_parent(spec.parent_pid)
    code = run_worker(spec, report)
    report.close()
    os._exit(code)  # why: skip interpreter teardown that could block on a dead peer's sockets


def _exit_with_parent(parent_pid: int) -> None:
    """Exit as soon as the process that spawned this rank is gone (no orphan ranks)."""

    def watch() -> None:
        while os.getppid() == parent_pid:
            time.sleep(PARENT_POLL_S)
        os._exit(1)

    threading.Thread(target=watch, name="sprig-tp-parent-watch", daemon=True).start()


def torchrun_spec(config: EngineConfig, model_path: str) -> RankSpec | None:
    """This process's rank under `torchrun` (RANK/WORLD_SIZE/LOCAL_RANK set), else None."""
    if "RANK" not in os.environ or "WORLD_SIZE" not in os.environ:
        return None
    size = int(os.environ["WORLD_SIZE"])
    if size != config.tp_size * config.pp_size:
        raise ValueError(f"torchrun started {size} processes but --pp-size {config.pp_size} x --tp-size "
                         f"{config.tp_size} needs {config.tp_size * config.pp_size}")
    return RankSpec(int(os.environ["RANK"]), size, int(os.environ.get("LOCAL_RANK", 0)), "env://",
                    replace(config, model_path=model_path), model_path)


def run_torchrun_worker(config: EngineConfig) -> int:
    """`sprig serve|generate` on a torchrun rank other than 0: be that rank until rank 0 stops. Exit status."""
    from sprig.runtime.model.named_models import model_location

    model_path = model_location(config.model_path)
    spec = torchrun_spec(config, model_path)
    if spec is None or spec.rank == 0:
        raise ValueError("run_torchrun_worker needs RANK >= 1 and WORLD_SIZE from torchrun")
    return run_worker(spec)
