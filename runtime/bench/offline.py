"""In-process benchmark backends: `sprig.Engine` (streaming, same driver as the HTTP benchmark) and
`transformers.generate` in static batches (the baseline sprig's batching is measured against).
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass
from typing import Any

from sprig.runtime.bench.client import Clock, TurnCall, make_call
from sprig.runtime.bench.datasets import Session
from sprig.runtime.bench.metrics import RequestRecord, validate_json


class EngineBackend:
    """Runs requests through `Engine.async_generate(stream=True)`; one chunk per new output token."""

    def __init__(self, engine: Any) -> None:
        self.engine = engine

    @staticmethod
    def params(call: TurnCall) -> dict[str, Any]:
        """Engine sampling params of a call (greedy, as the HTTP benchmark sends)."""
        params: dict[str, Any] = {"max_new_tokens": call.max_tokens, "temperature": 0.0,
                                  "ignore_eos": call.ignore_eos}
        if call.json_schema is not None:
            params["json_schema"] = json.dumps(call.json_schema)
        return params

    async def send(self, call: TurnCall, record: RequestRecord, clock: Clock) -> None:
        stream = await self.engine.async_generate(prompt=call.prompt, sampling_params=self.params(call),
                                                  stream=True)
        seen = 0
        last: dict[str, Any] = {}
        async for result in stream:
            n = len(result["output_ids"])
            if n > seen:  # a step may add several tokens (jump-forward): one chunk, like an SSE event
                now = clock()
                if record.ttft is None:
                    record.ttft = now - record.start
                record.chunk_times.append(now)
                seen = n
            last = result
        record.end = clock()
        meta = last.get("meta_info", {})
        record.text = last.get("text", "")
        record.prompt_tokens = int(meta.get("prompt_tokens", 0))
        record.completion_tokens = int(meta.get("completion_tokens", 0))
        record.cached_tokens = meta.get("cached_tokens")
        finish = meta.get("finish_reason") or {}
        if finish.get("type") == "abort":
            record.error = f"aborted: {finish.get('message', '')}"


@dataclass
class StaticBatchRunner:
    """`transformers.generate` over the workload in static, left-padded batches of `batch_size`.

    All requests are submitted at t=0, as an offline caller would; each batch starts when the previous one has
    finished (its longest row), which is what static batching costs. Per-token times come from a stopping
    criterion called once per generated token. JSON schemas are not enforced (transformers has none built in):
    rows run unconstrained and are validated like every other system's.
    """

    model: Any
    tokenizer: Any  # sprig Tokenizer
    batch_size: int
    pad_id: int = 0

    def run(self, sessions: list[Session]) -> list[RequestRecord]:
        """Generate every single-turn session; returns one record per request."""
        if any(len(s.turns) != 1 for s in sessions):
            raise ValueError("the transformers baseline runs single-turn workloads only")
        t0 = time.perf_counter()
        records: list[RequestRecord] = []
        for i in range(0, len(sessions), self.batch_size):
            records += self._batch(sessions[i : i + self.batch_size], lambda: time.perf_counter() - t0)
        return records

    def _batch(self, batch: list[Session], clock: Clock) -> list[RequestRecord]:
        import torch

        calls = [make_call(s, s.turns[0], [], self.tokenizer) for s in batch]
        ids = [self.tokenizer.encode(c.prompt) for c in calls]
        width = max(len(x) for x in ids)
        inputs = torch.full((len(ids), width), self.pad_id, dtype=torch.long)
        mask = torch.zeros_like(inputs)
        for j, x in enumerate(ids):
            inputs[j, width - len(x) :] = torch.tensor(x)
            mask[j, width - len(x) :] = 1
        steps: list[float] = []
        start = clock()
        n = max(c.max_tokens for c in calls)
        fixed = all(c.ignore_eos for c in calls)
        with torch.inference_mode():
            out = self.model.generate(inputs, attention_mask=mask, max_new_tokens=n, min_new_tokens=n if fixed else 0,
                                      do_sample=False, pad_token_id=self.pad_id,
                                      stopping_criteria=[_StepClock(steps, clock)])
        return [self._record(s, c, out[j, width:].tolist(), ids[j], start, steps)
                for j, (s, c) in enumerate(zip(batch, calls, strict=True))]

    def _record(self, s: Session, call: TurnCall, new: list[int], prompt: list[int], start: float,
                steps: list[float]) -> RequestRecord:
        eos = set(self.model.generation_config.eos_token_id or [])
        count = min(call.max_tokens, len(new))
        if not call.ignore_eos:
            count = next((k + 1 for k, t in enumerate(new[:count]) if t in eos), count)
        times = steps[:count]
        text = self.tokenizer.decode(new[:count])
        rec = RequestRecord(s.sid, 0, start=start, end=times[-1] if times else start,
                            ttft=(times[0] - start) if times else None, chunk_times=times,
                            prompt_tokens=len(prompt), completion_tokens=count, text=text)
        if s.json_schema is not None:
            rec.json_valid = validate_json(text, s.json_schema)
        return rec


class _StepClock:
    """A stopping criterion that never stops: it timestamps each generation step."""

    def __init__(self, steps: list[float], clock: Clock) -> None:
        self.steps = steps
        self.clock = clock

    def __call__(self, input_ids: Any, scores: Any, **kwargs: Any) -> Any:
        import torch

        self.steps.append(self.clock())
        return torch.zeros(input_ids.shape[0], dtype=torch.bool, device=input_ids.device)


def load_hf_model(path: str, dtype: str) -> Any:
    """The checkpoint as a transformers model in eval mode."""
    import torch
    from transformers import AutoModelForCausalLM

    torch_dtype = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16,
                   "auto": "auto"}[dtype]
    return AutoModelForCausalLM.from_pretrained(path, dtype=torch_dtype).eval()
