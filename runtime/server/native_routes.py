"""Native routes compatible with SGLang's frontend protocol: /generate, /model_info (and its old name
/get_model_info), /server_info, /flush_cache (GET or POST; vLLM's POST /reset_prefix_cache does the same).

`/generate` takes `text` or `input_ids` (one or a batch), `sampling_params` as in `Engine.generate` (one dict or
one per prompt; ``null`` values mean the default, as in SGLang), `return_logprob`, `logprob_start_len`,
`top_logprobs_num`, `return_text_in_logprobs`, `stream`, `priority` and a sprig `timeout`. It answers the result
dict (a list for a batch or n > 1) with logprobs as ``[logprob, token_id, text]`` triples (text null unless
`return_text_in_logprobs`). Streams send cumulative results as SSE ``data:`` lines (only what is new with
``--incremental-streaming-output``; at most one per `stream_interval` tokens: `native_stream.ChunkCutter`), then
``data: [DONE]``.
"""

from __future__ import annotations

import asyncio
import logging
import math
import time
import uuid
from typing import Any

from fastapi import APIRouter, Request
from pydantic import ConfigDict, Field
from starlette.responses import Response

from sprig.runtime.engine.engine import Engine
from sprig.runtime.engine.generate_request import generate_request
from sprig.runtime.engine.request import StepDelta
from sprig.runtime.server.auth import forbidden
from sprig.runtime.server.http_common import bad_request, body_spec, json_response, read_model
from sprig.runtime.server.native_stream import ChunkCutter, stream_intervals
from sprig.runtime.server.openai_protocol import StrictModel
from sprig.runtime.server.reasoning import PROMPT_TAIL_TOKENS, ReasoningPlan, ResultSplitter
from sprig.runtime.server.run import (
    EventStream,
    GenerationRun,
    ServerCall,
    check_timeout,
    run_to_end,
    sse_body,
    start_run,
)
from sprig.runtime.server.state import ServerState, TokenTexts, get_state, state_texts, tenant_of

logger = logging.getLogger(__name__)

_LOGPROB_KEYS = ("input_token_logprobs", "output_token_logprobs")
_TOP_KEYS = ("input_top_logprobs", "output_top_logprobs")
PROMPT_TAIL_CHARS = 256  # why: where a text prompt's thinking markers are looked for
FLUSH_POLL_S = 0.05  # how often a flush with a timeout asks the engine again


class GenerateRequest(StrictModel):
    """POST /generate (SGLang's GenerateReqInput subset)."""

    model_config = ConfigDict(json_schema_extra={"examples": [
        {"text": "The capital of France is", "sampling_params": {"max_new_tokens": 8, "temperature": 0}},
        {"text": ["a", "b"], "sampling_params": {"max_new_tokens": 4}, "return_logprob": True, "stream": True},
    ]})

    text: str | list[str] | None = None
    input_ids: list[int] | list[list[int]] | None = None
    sampling_params: dict[str, Any] | list[dict[str, Any]] | None = None
    return_logprob: bool | None = False
    logprob_start_len: int | None = -1
    top_logprobs_num: int | None = 0
    return_text_in_logprobs: bool | None = False
    stream: bool | None = False
    rid: str | None = Field(None, max_length=128)
    timeout: float | None = None
    priority: int | None = None  # higher is scheduled first (SGLang's field)
    # reasoning models (with --reasoning-parser): SGLang's `require_reasoning` (the output starts inside thinking and a
    # constraint waits for its end); `separate_reasoning` splits each text into `text` and `reasoning_text`
    require_reasoning: bool | None = False
    separate_reasoning: bool | None = False
    lora_path: str | list[str | None] | None = None  # a LoRA adapter by name, or one (or null) per prompt


def _is_batch(req: GenerateRequest) -> bool:
    if req.text is not None:
        return isinstance(req.text, list)
    return bool(req.input_ids) and isinstance(req.input_ids[0], list)  # type: ignore[index]


def _clean_params(params: dict[str, Any] | list[dict[str, Any]] | None) -> Any:
    """Drop null values (SGLang's frontend sends unset fields as null)."""
    if params is None:
        return None
    if isinstance(params, list):
        return [{k: v for k, v in p.items() if v is not None} for p in params]
    return {k: v for k, v in params.items() if v is not None}


def _n_of(params: dict[str, Any], max_n: int) -> int:
    n = params.get("n", 1)
    if isinstance(n, bool) or not isinstance(n, int) or not 1 <= n <= max_n:
        raise bad_request(f"n must be an integer in [1, {max_n}]", "n", "out_of_range")
    return n


def _prompt_count(req: GenerateRequest) -> int:
    if _is_batch(req):
        return len(req.text if req.text is not None else req.input_ids)  # type: ignore[arg-type]
    return 1


def count_sequences(req: GenerateRequest, params: Any, max_n: int, limit: int) -> int:
    """Prompts x n, bounded before anything is tokenized."""
    prompts = _prompt_count(req)
    if isinstance(params, list):
        if len(params) != prompts:
            raise bad_request("sampling_params must be one object or one per prompt", "sampling_params")
        total = sum(_n_of(p, max_n) for p in params)
    else:
        total = prompts * _n_of(params or {}, max_n)
    if total > limit:
        raise bad_request(f"prompts x n = {total} exceeds the limit of {limit} sequences per request", "text",
                          "too_many")
    return max(total, 1)


def server_call(req: GenerateRequest, params: Any, rid: str) -> ServerCall:
    """The engine call of a /generate request (worker thread: `SamplingParams.from_dict` runs here)."""
    request = generate_request(req.text, params, req.input_ids, bool(req.return_logprob),
                               -1 if req.logprob_start_len is None else req.logprob_start_len,
                               req.top_logprobs_num or 0, priority=req.priority or 0, rid=rid, text_field="text",
                               require_reasoning=bool(req.require_reasoning),
                               lora_path=req.lora_path)
    return ServerCall(request, req.timeout)


def result_splitter(req: GenerateRequest, call: ServerCall, engine: Engine) -> ResultSplitter | None:
    """With `separate_reasoning`, how each sequence's text splits (its prompt's end says where thinking stands)."""
    if not req.separate_reasoning:
        return None
    fmt = engine.reasoning_format
    if fmt is None:
        raise bad_request("separate_reasoning needs a reasoning parser (--reasoning-parser)", "separate_reasoning",
                          "unsupported")
    plans: list[ReasoningPlan] = []
    for prompt, params in zip(call.request.prompts, call.request.params, strict=True):
        tail = prompt[-PROMPT_TAIL_CHARS:] if isinstance(prompt, str) else \
            engine.tokenizer.decode(list(prompt[-PROMPT_TAIL_TOKENS:]), skip_special_tokens=False)
        plans += [ReasoningPlan.after(fmt, tail, True, inside=bool(req.require_reasoning))] * params.n
    return ResultSplitter(plans)


def native_result(result: dict[str, Any], texts: TokenTexts | None) -> dict[str, Any]:
    """The result dict with logprobs as (logprob, token_id, text) triples."""
    meta = result["meta_info"]
    if not any(k in meta for k in _LOGPROB_KEYS):
        return result
    meta = dict(meta)
    for key in _LOGPROB_KEYS:
        if key in meta:
            meta[key] = [(lp, tid, texts(tid) if texts else None) for lp, tid in meta[key]]
    for key in _TOP_KEYS:
        if key in meta:
            meta[key] = [[(lp, tid, texts(tid) if texts else None) for lp, tid in top] if top else top
                         for top in meta[key]]
    return {**result, "meta_info": meta}


def native_stream(state: ServerState, run: GenerationRun, texts: TokenTexts | None, cutter: ChunkCutter,
                  split: ResultSplitter | None = None) -> Any:
    """The SSE body: chunks cut by `cutter` (their text split by `split`); at shutdown each unfinished sequence's
    last chunk."""

    def separated(delta: StepDelta, out: dict[str, Any], finished: bool) -> dict[str, Any]:
        if split is None:
            return out
        return split.increment(delta.index, out, finished) if cutter.incremental else split.result(delta.index, out)

    def chunk(delta: StepDelta) -> dict[str, Any] | None:
        out = cutter.cut(delta)
        return None if out is None else native_result(separated(delta, out, delta.meta.finished), texts)

    def aborted() -> list[dict[str, Any]]:
        return [native_result(separated(d, cutter.cut(d, force=True) or {"text": ""}, True), texts)
                for d in run.unfinished_deltas()]

    return sse_body(state, run, chunk, aborted)


def native_router() -> APIRouter:
    """The authenticated native routes."""
    router = APIRouter()

    @router.post("/generate", openapi_extra=body_spec(GenerateRequest), response_model=None)
    async def generate(request: Request) -> Response:
        """Generate like `Engine.generate` (SGLang native protocol)."""
        state = get_state(request)
        engine = state.ready_engine()
        req = await read_model(request, GenerateRequest, state.settings.max_request_bytes)
        params = _clean_params(req.sampling_params)
        sequences = count_sequences(req, params, engine.max_n, state.settings.max_sequences_per_request)
        check_timeout(req.timeout)
        rid = f"gen-{uuid.uuid4().hex}"

        def plan() -> tuple[tuple[ServerCall, ResultSplitter | None], ServerCall]:
            call = server_call(req, params, rid)
            return (call, result_splitter(req, call, engine)), call

        (call, split), run = await start_run(state, tenant_of(request), sequences, "generate", plan)
        texts = state_texts(state) if req.return_text_in_logprobs else None
        if req.stream:
            cutter = ChunkCutter(stream_intervals(params, _prompt_count(req)),
                                 state.settings.incremental_streaming_output, call.request.logprobs,
                                 run.num_sequences > 1, run.acc.result)
            return EventStream(run, lambda: native_stream(state, run, texts, cutter, split))
        run.watch_disconnect(request.receive)
        results = [native_result(split.result(i, r) if split else r, texts)
                   for i, r in enumerate(await run_to_end(run))]
        many = _is_batch(req) or len(results) > 1
        return json_response(results if many else results[0])

    @router.get("/model_info", response_model=None)
    async def model_info(request: Request) -> Response:
        """Model path and shape; `tokenizer_path` is a folder `AutoTokenizer.from_pretrained` loads (what
        SGLang's RuntimeEndpoint and bench_serving read at start)."""
        return json_response(_model_info(get_state(request)))

    @router.get("/get_model_info", response_model=None)
    async def get_model_info(request: Request) -> Response:
        """SGLang's deprecated name of /model_info."""
        return json_response(_model_info(get_state(request)))

    @router.get("/server_info", response_model=None)
    async def server_info(request: Request) -> Response:
        """Engine stats (load, KV usage, cache figures, step timings) and server figures."""
        return json_response(await _server_info(get_state(request)))

    @router.get("/get_server_info", response_model=None, include_in_schema=False)
    async def get_server_info(request: Request) -> Response:
        return json_response(await _server_info(get_state(request)))

    @router.api_route("/flush_cache", methods=["GET", "POST"], response_model=None)
    async def flush_cache(request: Request) -> Response:
        """Empty the prefix cache (admin keys only). While requests are running it answers 400, at once or,
        with SGLang's `timeout` query parameter (seconds), once that long has passed without the engine idling."""
        return await _flush(request)

    @router.post("/reset_prefix_cache", response_model=None)
    async def reset_prefix_cache(request: Request) -> Response:
        """vLLM's name of /flush_cache (what `sglang.bench_serving --backend vllm --flush-cache` calls)."""
        return await _flush(request)

    return router


async def _flush(request: Request) -> Response:
    state = get_state(request)
    engine = state.ready_engine()
    if not tenant_of(request).admin:
        raise forbidden("flushing the cache needs an admin API key")
    deadline = time.monotonic() + _flush_timeout(request)
    while not await asyncio.to_thread(engine.flush_cache):
        if state.draining or time.monotonic() >= deadline:
            raise bad_request("the cache was not flushed: requests are running", None, "cache_busy")
        await asyncio.sleep(FLUSH_POLL_S)
    return json_response({"success": True, "message": "cache flushed"})


def _flush_timeout(request: Request) -> float:
    raw = request.query_params.get("timeout", "0")
    try:
        seconds = float(raw)
    except ValueError:
        seconds = -1.0
    if not (math.isfinite(seconds) and seconds >= 0):
        raise bad_request(f"timeout must be a number of seconds >= 0, got {raw!r}", "timeout")
    return seconds


def _model_info(state: ServerState) -> dict[str, Any]:
    engine = state.ready_engine()
    fmt = engine.checkpoint_format
    return {"model_path": engine.model_path, "tokenizer_path": engine.model_path, "is_generation": True,
            "served_model_name": state.model_name, "context_length": engine.context_length,
            "vocab_size": engine.vocab_size, "model_format": fmt.name, "file_type": fmt.file_type}


async def _server_info(state: ServerState) -> dict[str, Any]:
    engine = state.ready_engine()
    stats = await asyncio.to_thread(engine.stats)
    server = {"model_path": engine.model_path, "served_model_name": state.model_name,
              "inflight_sequences": state.inflight_sequences, "active_requests": len(state.runs),
              "draining": state.draining, "health": state.health().value,
              "max_queued_requests": state.settings.max_queued_requests,
              "max_request_bytes": state.settings.max_request_bytes,
              "constrained_decoding": engine.constrained_decoding}
    return {**stats, "server": server}
