"""A pipeline stage's loop on every rank but rank 0: take each message from the previous stage (or, on stage 0,
from rank 0's broadcast to its tensor-parallel group), run this stage's layers for a step, pass the hidden states
on; the last stage sends the logits to rank 0. Heartbeats and SHUTDOWN are passed on the same way, so every rank
sees them in order.

Each stage runs its micro-batches in the order rank 0 launched them and owns only its own layers' KV, so a page
that rank 0 frees and gives to a later micro-batch is written by that micro-batch, on every stage, only after
every earlier micro-batch that used it has run there.
"""

from __future__ import annotations

import json
import os
from dataclasses import asdict
from pathlib import Path

import torch

from sprig.kernels.norm import residual_dtype
from sprig.runtime.distributed.pp_protocol import PipeLink
from sprig.runtime.distributed.rank_spec import RankSpec, collective_device
from sprig.runtime.distributed.tp_protocol import Command, StepChannel, decode_step
from sprig.runtime.model.config import load_model_config
from sprig.runtime.model.parallel import TPContext
from sprig.runtime.model.runner import ModelRunner

DRAIN_S = 10.0
STATS_ENV = "SPRIG_PP_STATS_DIR"  # benchmarks: each rank writes its LinkStats there as rank<N>.json at shutdown


def pipe_link(spec: RankSpec, model_dtype: torch.dtype) -> PipeLink:
    """This rank's links to the same tp rank of the previous and next stage."""
    tp, pp = spec.config.tp_size, spec.config.pp_size
    prev = spec.rank - tp if spec.stage > 0 else None
    nxt = spec.rank + tp if spec.stage < pp - 1 else None
    hidden = load_model_config(spec.model_path).hidden_size
    return PipeLink(prev, nxt, (pp - 1) * tp, collective_device(spec), hidden, residual_dtype(model_dtype))


def serve_stage(spec: RankSpec, tp: TPContext, runner: ModelRunner) -> None:
    """Run this rank's stage for every step until SHUTDOWN (which is passed on first)."""
    link = pipe_link(spec, runner.model.dtype)
    channel = StepChannel(tp, collective_device(spec)) if spec.stage == 0 else None
    last = link.next is None
    while True:
        if channel is not None:  # stage 0, tp rank > 0: rank 0 broadcasts to its own stage
            command, payload = channel.receive()
            hidden = None
        else:
            command, payload, hidden = link.receive_prev()
        if command is Command.STEP and payload is not None:
            out = runner.run_stage(decode_step(payload), hidden)
            if not last:
                link.send_next(Command.STEP, payload, out)
            elif tp.rank == 0:
                link.send_logits(out)
        elif not last:
            link.send_next(command)
        if command is Command.SHUTDOWN:
            link.drain(DRAIN_S)
            _write_stats(spec, link)
            return


def _write_stats(spec: RankSpec, link: PipeLink) -> None:
    folder = os.environ.get(STATS_ENV)
    if folder:
        Path(folder, f"rank{spec.rank}.json").write_text(json.dumps(asdict(link.stats)))
