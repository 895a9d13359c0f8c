"""The benchmark driver and its OpenAI-compatible HTTP client.

The driver starts sessions at Poisson or fixed-rate arrival times, keeps at most `max_concurrency` requests in
flight, and hands each request to a `Backend`. `OpenAIBackend` streams `/v1/completions` or
`/v1/chat/completions` over SSE with httpx; it knows nothing of sprig's server, so it measures vLLM, SGLang or
llama.cpp's `llama-server` the same way. Token counts come from the final `usage` chunk; cached prompt tokens
from `usage.prompt_tokens_details.cached_tokens`, SGLang's `meta_info.cached_tokens` or llama-server's
`timings.cache_n`, whichever the server sends.
"""

from __future__ import annotations

import asyncio
import json
import math
import random
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from enum import Enum
from typing import Any, Protocol

import httpx
from tqdm import tqdm

from sprig.runtime.bench.datasets import Api, Session, Turn
from sprig.runtime.bench.metrics import RequestRecord, validate_json
from sprig.runtime.model.tokenizer import Tokenizer

Clock = Callable[[], float]


class Arrival(str, Enum):
    """How session start times are spaced at a finite request rate."""

    POISSON = "poisson"
    FIXED = "fixed"


@dataclass(frozen=True)
class LoadSpec:
    """The offered load: arrival rate and process, and the bound on requests in flight."""

    request_rate: float = math.inf
    arrival: Arrival = Arrival.POISSON
    max_concurrency: int | None = None
    seed: int = 0


@dataclass(frozen=True)
class TurnCall:
    """One request as a backend sends it."""

    api: Api
    prompt: str  # completions: the prompt; chat: the rendered template (for offline engines)
    messages: list[dict[str, str]]
    max_tokens: int
    ignore_eos: bool
    json_schema: dict[str, Any] | None
    prompt_tokens_hint: int  # the client's own count, used when the server reports none


class Backend(Protocol):
    """Anything that can run one request and fill its record (HTTP client, in-process engine)."""

    async def send(self, call: TurnCall, record: RequestRecord, clock: Clock) -> None: ...


def arrival_times(n: int, load: LoadSpec) -> list[float]:
    """Start offsets (seconds) of n sessions: all at once at an infinite rate."""
    if math.isinf(load.request_rate):
        return [0.0] * n
    if load.arrival is Arrival.FIXED:
        return [i / load.request_rate for i in range(n)]
    rng = random.Random(load.seed)
    times, t = [], 0.0
    for _ in range(n):
        times.append(t)
        t += rng.expovariate(load.request_rate)
    return times


def make_call(session: Session, turn: Turn, history: list[dict[str, str]], tok: Tokenizer | None) -> TurnCall:
    """The request for a turn given the conversation so far."""
    messages = [*history, {"role": "user", "content": turn.text}]
    if session.system and not history:
        messages.insert(0, {"role": "system", "content": session.system})
    prompt, hint = turn.text, turn.input_len
    if session.api is Api.CHAT and tok is not None and tok.chat_template:
        prompt = tok.apply_chat_template(messages)
        hint = len(tok.encode(prompt, add_special_tokens=False))
    return TurnCall(session.api, prompt, messages, turn.output_len, session.ignore_eos, session.json_schema, hint)


@dataclass
class Driver:
    """Runs sessions against a backend under a `LoadSpec`, with an optional progress bar."""

    backend: Backend
    load: LoadSpec
    tokenizer: Tokenizer | None = None
    progress: bool = True
    desc: str = "bench"
    records: list[RequestRecord] = field(default_factory=list)

    async def run(self, sessions: list[Session]) -> list[RequestRecord]:
        """Send every session; returns one record per request sent."""
        self.records = []
        t0 = time.perf_counter()
        clock: Clock = lambda: time.perf_counter() - t0  # noqa: E731 - all times relative to the start
        limit = self.load.max_concurrency
        sem = asyncio.Semaphore(limit) if limit else None
        total = sum(len(s.turns) for s in sessions)
        bar = tqdm(total=total, desc=self.desc, disable=not self.progress, file=sys.stderr, leave=False)
        starts = arrival_times(len(sessions), self.load)
        try:
            await asyncio.gather(*(self._session(s, at, clock, sem, bar) for s, at in zip(sessions, starts,
                                                                                          strict=True)))
        finally:
            bar.close()
        return sorted(self.records, key=lambda r: (r.start, r.session, r.turn))

    async def _session(self, s: Session, at: float, clock: Clock, sem: asyncio.Semaphore | None,
                       bar: tqdm) -> None:
        await asyncio.sleep(max(0.0, at - clock()))
        history: list[dict[str, str]] = []
        for k, turn in enumerate(s.turns):
            call = make_call(s, turn, history, self.tokenizer)
            record = await self._send(call, s.sid, k, clock, sem)
            if s.json_schema is not None:
                record.json_valid = record.ok and validate_json(record.text, s.json_schema)
            self.records.append(record)
            bar.update(1)
            if not record.ok:
                bar.update(len(s.turns) - k - 1)  # a broken conversation sends no further turns
                return
            history = [*call.messages, {"role": "assistant", "content": record.text}]

    async def _send(self, call: TurnCall, sid: int, turn: int, clock: Clock,
                    sem: asyncio.Semaphore | None) -> RequestRecord:
        if sem is not None:
            await sem.acquire()
        try:
            record = RequestRecord(sid, turn, start=clock())
            try:
                await self.backend.send(call, record, clock)
            except Exception as e:  # noqa: BLE001 - a failed request is a result, not a crash
                record.error = f"{type(e).__name__}: {e}"
            record.end = record.end or clock()
            _fill_counts(record, call, self.tokenizer)
            return record
        finally:
            if sem is not None:
                sem.release()


def _fill_counts(record: RequestRecord, call: TurnCall, tok: Tokenizer | None) -> None:
    """Token counts the server did not report, from the client's tokenizer (or chunk count)."""
    if not record.prompt_tokens:
        record.prompt_tokens = call.prompt_tokens_hint
    if not record.completion_tokens and record.text:
        record.completion_tokens = (len(tok.encode(record.text, add_special_tokens=False)) if tok
                                    else len(record.chunk_times))


class OpenAIBackend:
    """Streams requests to an OpenAI-compatible server (`base_url` without the `/v1`)."""

    def __init__(self, base_url: str, model: str | None = None, api_key: str | None = None,
                 extra_body: dict[str, Any] | None = None, timeout: float = 600.0,
                 transport: httpx.AsyncBaseTransport | None = None) -> None:
        self.base_url = base_url.rstrip("/").removesuffix("/v1")
        self.model = model
        self.extra_body = extra_body or {}
        headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
        limits = httpx.Limits(max_connections=None, max_keepalive_connections=256)
        self.client = httpx.AsyncClient(base_url=self.base_url, headers=headers, timeout=timeout, limits=limits,
                                        transport=transport)

    async def aclose(self) -> None:
        await self.client.aclose()

    async def resolve_model(self) -> str:
        """The `model` field: as given, else the first id of /v1/models."""
        if self.model is None:
            try:
                resp = await self.client.get("/v1/models")
                resp.raise_for_status()
            except httpx.HTTPError as e:  # the user's to fix (a wrong URL, a server not up): one line
                raise ConnectionError(f"cannot list the models at {self.base_url}/v1/models: "
                                      f"{str(e).splitlines()[0]}") from e
            self.model = str(resp.json()["data"][0]["id"])
        return self.model

    def body(self, call: TurnCall) -> dict[str, Any]:
        """The JSON body of a streaming request with usage at the end."""
        body: dict[str, Any] = {"model": self.model, "max_tokens": call.max_tokens, "temperature": 0.0,
                                "stream": True, "stream_options": {"include_usage": True}}
        if call.ignore_eos:
            body["ignore_eos"] = True  # vLLM, SGLang, sprig and llama-server all accept it
        if call.api is Api.CHAT:
            body["messages"] = call.messages
        else:
            body["prompt"] = call.prompt
        if call.json_schema is not None:
            body["response_format"] = {"type": "json_schema",
                                       "json_schema": {"name": "record", "schema": call.json_schema}}
        return {**body, **self.extra_body}

    async def send(self, call: TurnCall, record: RequestRecord, clock: Clock) -> None:
        """Stream one request, timing each content chunk."""
        path = "/v1/chat/completions" if call.api is Api.CHAT else "/v1/completions"
        parts: list[str] = []
        async with self.client.stream("POST", path, json=self.body(call)) as resp:
            if resp.status_code != 200:
                detail = (await resp.aread()).decode(errors="replace")[:300]
                record.error = f"HTTP {resp.status_code}: {detail}"
                return
            async for line in resp.aiter_lines():
                if not line.startswith("data:"):
                    continue
                data = line[5:].strip()
                if data == "[DONE]":
                    break
                if not _absorb(json.loads(data), call.api, record, parts, clock):
                    break
        record.end = clock()
        record.text = "".join(parts)


def _absorb(chunk: dict[str, Any], api: Api, record: RequestRecord, parts: list[str], clock: Clock) -> bool:
    """Take one SSE chunk into the record; False on an error event."""
    if "error" in chunk:
        err = chunk["error"]
        record.error = str(err.get("message", err) if isinstance(err, dict) else err)[:300]
        return False
    for choice in chunk.get("choices") or []:
        text = choice.get("text") if api is Api.COMPLETIONS else (choice.get("delta") or {}).get("content")
        if text:
            now = clock()
            if record.ttft is None:
                record.ttft = now - record.start
            record.chunk_times.append(now)
            parts.append(text)
    _absorb_usage(chunk, record)
    return True


def _absorb_usage(chunk: dict[str, Any], record: RequestRecord) -> None:
    usage = chunk.get("usage") or {}
    if usage:
        record.prompt_tokens = int(usage.get("prompt_tokens") or record.prompt_tokens)
        record.completion_tokens = int(usage.get("completion_tokens") or record.completion_tokens)
        details = usage.get("prompt_tokens_details") or {}
        if details.get("cached_tokens") is not None:
            record.cached_tokens = int(details["cached_tokens"])
    meta = chunk.get("meta_info") or {}
    if meta.get("cached_tokens") is not None:
        record.cached_tokens = int(meta["cached_tokens"])
    timings = chunk.get("timings") or {}
    if timings.get("cache_n") is not None:
        record.cached_tokens = int(timings["cache_n"])
