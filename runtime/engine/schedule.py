"""Which step loop drives the engine, chosen once at start: steps one after another (`serial.py`), the next step
planned beside the forward (`overlap.py`), or several steps in flight over pipeline stages (`pipeline.py`)."""

from __future__ import annotations

from dataclasses import dataclass
from enum import Enum

from sprig.runtime.config import EngineConfig


class Schedule(Enum):
    SERIAL = "serial"
    OVERLAP = "overlap"
    PIPELINE = "pipeline"


@dataclass(frozen=True)
class ScheduleChoice:
    schedule: Schedule
    overlap_off: str | None  # why steps do not overlap (None: the overlap schedule is on)


def choose_schedule(config: EngineConfig, speculating: bool, host_tier: bool) -> ScheduleChoice:
    """The engine's schedule, with the reason the overlap schedule is off when it is."""
    reason = _overlap_off_reason(config, speculating, host_tier)
    if config.pp_size > 1:
        return ScheduleChoice(Schedule.PIPELINE, reason)
    return ScheduleChoice(Schedule.SERIAL if reason is not None else Schedule.OVERLAP, reason)


def _overlap_off_reason(config: EngineConfig, speculating: bool, host_tier: bool) -> str | None:
    if config.disable_overlap_schedule:
        return "--disable-overlap-schedule"
    if not config.enable_overlap_schedule and not config.device.startswith("cuda"):
        return "off by default on the CPU, where the forward uses every core (--enable-overlap-schedule)"
    if config.pp_size > 1:
        return "pipeline parallel (its micro-batches overlap steps already)"
    if speculating:
        return "speculative decoding"  # why: the next step's input depends on how many drafts are accepted
    if host_tier:
        return "the host KV tier"  # why: its loads and write-backs copy pool pages on the scheduling thread
    return None
