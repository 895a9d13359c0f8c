"""The caller's side of a call's output: `DeltaStream` (the engine's deltas, read on an event loop; the HTTP
path) and the Python API's iterators, which fold the deltas into cumulative result dicts (SGLang's stream shape).

Closing a stream (or dropping it) before every sequence finished aborts the requests still running.
"""

from __future__ import annotations

import contextlib
from collections import deque
from collections.abc import AsyncIterator, Iterator
from typing import Any, Protocol

from sprig.runtime.engine.request import DeltaChannel, Request, StepDelta, StreamAccumulator


class Reader(Protocol):
    """What a stream needs of the engine: block for deltas, abort the call's requests."""

    def next_deltas(self, channel: DeltaChannel) -> list[StepDelta]: ...

    def abort_all_of(self, reqs: list[Request]) -> None: ...


def accumulator(reqs: list[Request]) -> StreamAccumulator:
    lp = reqs[0].logprobs  # one call: the same logprob options for every sequence
    return StreamAccumulator(len(reqs), lp.return_logprob, lp.top_logprobs_num > 0)


class DeltaStream(AsyncIterator[list[StepDelta]]):
    """One call's output as the engine sends it: batches of `StepDelta`s, read on the caller's event loop.

    Closing it (or dropping it) before every sequence finished aborts the ones still running (their KV is
    freed on the next step).
    """

    def __init__(self, engine: Reader, channel: DeltaChannel, reqs: list[Request]) -> None:
        self.engine, self.channel, self.reqs = engine, channel, reqs
        self.pending = len(reqs)

    async def __anext__(self) -> list[StepDelta]:
        if not self.pending:
            raise StopAsyncIteration
        try:
            deltas = await self.channel.take_async()
        except BaseException:
            self.close()
            raise
        self.pending -= sum(d.finished for d in deltas)
        return deltas

    def close(self) -> None:
        """Stop reading; requests still running are aborted."""
        if self.pending:
            self.pending = 0
            self.engine.abort_all_of(self.reqs)

    async def aclose(self) -> None:
        self.close()

    def __del__(self) -> None:
        with contextlib.suppress(Exception):  # why: may run at interpreter exit, with the engine gone
            self.close()


class _Folder:
    """Cumulative result dicts (SGLang's stream shape) folded from deltas, for the Python streaming API."""

    def __init__(self, reqs: list[Request]) -> None:
        self._acc = accumulator(reqs)
        self._many = len(reqs) > 1
        self.ready: deque[dict[str, Any]] = deque()

    def fold(self, deltas: list[StepDelta]) -> None:
        for delta in deltas:
            self._acc.apply(delta)
            result = self._acc.result(delta.index)
            self.ready.append({**result, "index": delta.index} if self._many else result)


class GenerationStream(Iterator[dict[str, Any]]):
    """The iterator `generate(stream=True)` returns. Closing it (or dropping it) before the end aborts the
    requests still running."""

    def __init__(self, engine: Reader, channel: DeltaChannel, reqs: list[Request]) -> None:
        self.engine, self.channel, self._reqs = engine, channel, reqs
        self._folder = _Folder(reqs)
        self._pending = len(reqs)

    def __next__(self) -> dict[str, Any]:
        ready = self._folder.ready
        while not ready:
            if not self._pending:
                raise StopIteration
            try:
                deltas = self.engine.next_deltas(self.channel)
            except BaseException:
                self.close()
                raise
            self._pending -= sum(d.finished for d in deltas)
            self._folder.fold(deltas)
        return ready.popleft()

    def close(self) -> None:
        """Stop reading; requests still running are aborted (their KV is freed on the next step)."""
        if self._pending:
            self._pending = 0
            self.engine.abort_all_of(self._reqs)

    def __del__(self) -> None:
        with contextlib.suppress(Exception):  # why: may run at interpreter exit, with the engine gone
            self.close()


class AsyncGenerationStream(AsyncIterator[dict[str, Any]]):
    """The async iterator `async_generate(stream=True)` returns: a `DeltaStream` folded into cumulative dicts."""

    def __init__(self, deltas: DeltaStream) -> None:
        self.deltas = deltas
        self._folder = _Folder(deltas.reqs)

    async def __anext__(self) -> dict[str, Any]:
        ready = self._folder.ready
        while not ready:
            self._folder.fold(await self.deltas.__anext__())  # StopAsyncIteration ends this stream too
        return ready.popleft()

    def close(self) -> None:
        self.deltas.close()

    async def aclose(self) -> None:
        self.close()
