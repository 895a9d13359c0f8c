"""A reader that stalls costs only its unread output, and nobody else waits for it.

The engine reports deltas into a per-call channel that merges what the reader has not taken yet
(runtime/engine/request.py): however many steps a reader misses, its channel holds one pending delta per
sequence, whose size is the output produced since it last read.
"""

from __future__ import annotations

import dataclasses
import time

import pytest

from sprig.runtime.engine.engine import Engine
from sprig.runtime.engine.request import EMPTY_META, DeltaChannel, StepDelta

STALL_S = 10.0
MAX_NEW = 1500


def _delta(index: int, ids: list[int], finished: bool = False) -> StepDelta:
    return StepDelta(index, ids, [f"<{i}>" for i in ids], [], [],
                     dataclasses.replace(EMPTY_META, completion_tokens=len(ids)), finished)


def test_a_channel_merges_unread_deltas_per_sequence() -> None:
    channel = DeltaChannel(waker=None)
    for step in range(100):
        channel.put(_delta(step % 2, [step]))
    assert channel.pending_deltas == 2  # one per sequence, not one per step
    assert channel.pending_items == 200  # 100 ids + 100 text pieces: exactly the unread output
    taken = channel.take_nowait()
    assert [d.index for d in taken] == [0, 1]
    assert taken[0].ids == list(range(0, 100, 2)) and taken[1].ids == list(range(1, 100, 2))
    assert "".join(taken[0].text) == "".join(f"<{i}>" for i in range(0, 100, 2))
    assert channel.take_nowait() == [] and channel.pending_items == 0


@pytest.mark.slow
def test_a_stalled_reader_holds_only_its_unread_output_while_others_stream(tiny_paths, capsys):
    params = {"max_new_tokens": MAX_NEW, "temperature": 0, "ignore_eos": True}
    other = {"max_new_tokens": 48, "temperature": 0, "ignore_eos": True}

    def stream_rate(engine: Engine, k: int) -> float:
        t0 = time.monotonic()
        chunks = list(engine.generate(f"another stream {k}", other, stream=True))
        return len(chunks[-1]["output_ids"]) / (time.monotonic() - t0)

    with Engine(str(tiny_paths["tiny-llama"]), max_total_tokens=8192) as engine:
        alone = [stream_rate(engine, k) for k in range(5)]  # the other streams' pace with nobody stalled
        stalled = engine.generate("a reader that stops reading", params, stream=True, return_logprob=True)
        first = next(stalled)
        stall_start = time.monotonic()
        samples: list[tuple[int, int]] = []
        others: list[float] = []  # tokens per second of each other stream, while the reader stalls
        while time.monotonic() - stall_start < STALL_S:
            others.append(stream_rate(engine, len(others)))
            samples.append((stalled.channel.pending_deltas, stalled.channel.pending_items))
        still_running = any(r.rid == first["meta_info"]["id"] for r in engine.core.requests.values())
        generated_while_stalled = engine.stats()["generated_tokens"] - 48 * (len(others) + len(alone))
        rest = list(stalled)

    final = rest[-1]
    assert final["meta_info"]["finish_reason"]["type"] == "length"
    assert len(final["output_ids"]) == MAX_NEW == len(final["meta_info"]["output_token_logprobs"])
    assert final["text"].startswith(first["text"])
    # The bound: one pending delta, holding at most one id, one text piece and one logprob per unread token.
    assert max(d for d, _ in samples) <= 1
    assert max(items for _, items in samples) <= 3 * MAX_NEW
    assert len(others) >= 3  # other calls started and finished while this reader read nothing
    with capsys.disabled():
        print(f"\nstalled {STALL_S:.0f}s (still generating at the end: {still_running}); "
              f"{generated_while_stalled} tokens generated meanwhile; pending deltas max {max(d for d, _ in samples)},"
              f" items max {max(i for _, i in samples)} (bound {3 * MAX_NEW}); {len(others)} other streams at "
              f"{min(others):.0f}-{max(others):.0f} tok/s (median {sorted(others)[len(others) // 2]:.0f}; alone before "
              f"the stall: median {sorted(alone)[len(alone) // 2]:.0f})")


def test_sequence_meta_is_typed_and_keeps_the_meta_info_shape() -> None:
    from sprig.runtime.engine.output_text import FinishReason, FinishType
    from sprig.runtime.engine.request import SequenceMeta

    running = SequenceMeta("r", 5, 2, 3, None, 0.5, cached_host_tokens=1)
    assert not running.finished and running.finish_type is None and running.failure is None
    assert running.to_dict() == {"id": "r", "prompt_tokens": 5, "completion_tokens": 2, "cached_tokens": 3,
                                 "finish_reason": None, "e2e_latency": 0.5,
                                 "cached_tokens_details": {"device": 2, "host": 1}}
    failed = SequenceMeta("r", 5, 2, 0, FinishReason(FinishType.ABORT), 0.5, error="engine failure: OSError",
                          spec_verify_ct=2, spec_accept_length=1.5)
    assert failed.failure == "engine failure: OSError"
    assert failed.to_dict()["finish_reason"] == {"type": "abort", "matched": None, "message": "engine failure: OSError"}
    assert (failed.to_dict()["spec_verify_ct"], failed.to_dict()["spec_accept_length"]) == (2, 1.5)
    shutdown = running.aborted()  # shutdown's abort is not an engine failure (no 500)
    assert shutdown.finish_type == "abort" and shutdown.failure is None and shutdown.prompt_tokens == 5
    stopped = SequenceMeta("r", 5, 2, 0, FinishReason(FinishType.STOP, 7), 0.5)
    assert stopped.finish_type == "stop" and stopped.to_dict()["finish_reason"] == {"type": "stop", "matched": 7}
