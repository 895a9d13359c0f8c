"""Runs one model call of a program state against its backend (called on the state's worker thread)."""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from typing import Any, Protocol

from sprig.lang.backends.base import Backend
from sprig.lang.document import Document, convert
from sprig.lang.errors import BackendError
from sprig.lang.ir import Gen, GenParams, Select, SelectMethod
from sprig.lang.select_scoring import decide
from sprig.lang.tool_calls import (
    MAX_TOOL_CALLS,
    TOOL_CALL_CLOSE,
    TOOL_CALL_OPEN,
    call_of,
    call_schema,
    opened_call,
)

MAX_SEED = 2**63


@dataclass(frozen=True)
class RunConfig:
    """What every state of one program run shares."""

    backend: Backend
    defaults: GenParams
    seed: int | None = None  # base seed; each gen derives its own from it (see derive_seed)
    stream: bool = False


class ProgramState(Protocol):
    """What a call needs from the program state it runs in (`sprig.lang.state.ProgramState` is the one)."""

    config: RunConfig

    @property
    def doc(self) -> Document: ...

    def next_seed(self, index: int) -> int | None: ...

    def emit(self, var: str | None, text: str, token_ids: tuple[int, ...] | None = None) -> None: ...

    def emit_partial(self, var: str | None, delta: str) -> None: ...

    def end_var(self, var: str | None, text: str, token_ids: tuple[int, ...] | None) -> None: ...

    def close_var(self, var: str | None) -> None: ...

    def store(self, name: str | None, value: Any, meta: dict[str, Any]) -> None: ...


def derive_seed(base: int | None, path: tuple[str, ...], index: int) -> int | None:
    """A per-call seed from the run's seed, the branch path and the call's position in program order.

    Deterministic whatever the thread timing, and different across branches of a fork (same seed everywhere
    would make every branch generate the same text).
    """
    if base is None:
        return None
    digest = hashlib.sha256(f"{base}|{'/'.join(path)}|{index}".encode()).digest()
    return int.from_bytes(digest[:8], "big") % MAX_SEED


def run_gen(state: ProgramState, node: Gen, index: int) -> None:
    """Generate after the state's prompt, append the text, store the (converted) value and meta info."""
    params = node.params.merged_over(state.config.defaults).to_sampling_params()
    if "seed" not in params:
        seed = state.next_seed(index)
        if seed is not None:
            params["seed"] = seed
    if node.tools is not None:
        run_tool_gen(state, node, params)
        return
    prompt = state.doc.prompt()
    backend = state.config.backend
    if state.config.stream:
        meta: dict[str, Any] = {}
        text, ids = "", None
        for chunk in backend.stream(prompt, params):
            text += chunk.delta
            state.emit_partial(node.name, chunk.delta)
            meta, ids = chunk.meta or meta, chunk.token_ids or ids
        _raise_if_aborted(meta)
        state.end_var(node.name, text, ids)
    else:
        out = backend.generate(prompt, params)
        text, meta = out.text, dict(out.meta)
        _raise_if_aborted(meta)
        state.emit(node.name, text, out.token_ids)
        state.close_var(node.name)
    state.store(node.name, convert(text, node.dtype, node.name), meta)


def run_tool_gen(state: ProgramState, node: Gen, params: dict[str, Any]) -> None:
    """`gen(tools=...)`: free segments that stop at the call opener, each call generated under the tools' call
    schema and closed; `max_new_tokens` bounds the whole (lang/tool_calls.py)."""
    assert node.tools is not None
    backend, budget = state.config.backend, params.get("max_new_tokens")
    free = {**params, "stop": [*params.get("stop", []), TOOL_CALL_OPEN]}
    call = {k: v for k, v in params.items() if k not in ("stop", "stop_regex")} | {
        "json_schema": call_schema(node.tools)}
    texts, calls, used, meta = [], [], 0, {}
    for segment in range(2 * MAX_TOOL_CALLS + 1):
        calling = segment % 2 == 1
        if budget is not None and used >= budget:
            break
        left = {} if budget is None else {"max_new_tokens": budget - used}
        seed = {"seed": (params["seed"] + segment) % MAX_SEED} if "seed" in params else {}
        out = backend.generate(state.doc.prompt(), {**(call if calling else free), **left, **seed})
        meta, text = dict(out.meta), out.text
        _raise_if_aborted(meta)
        used += int(meta.get("completion_tokens") or 0)
        complete = calling and (meta.get("finish_reason") or {}).get("type") == "stop"
        if calling and complete:
            calls.append(call_of(text))
        closing = ("\n" + TOOL_CALL_CLOSE) if complete else ""
        opening = TOOL_CALL_OPEN + "\n" if not calling and opened_call(meta) else ""
        for piece, ids in ((text, out.token_ids), (closing + opening, None)):
            if piece:
                state.emit(node.name, piece, ids)
                texts.append(piece)
        if not (complete or opening):
            break
    state.close_var(node.name)
    meta["tool_calls"] = calls
    meta["completion_tokens"] = used
    state.store(node.name, "".join(texts), meta)


def run_select(state: ProgramState, node: Select) -> None:
    """Score each choice after the prompt, append the winner, store it with the scores as meta info."""
    items = state.config.backend.score_choices(state.doc.prompt(), node.choices,
                                               unconditional=node.method is SelectMethod.UNCONDITIONAL_NORMALIZED)
    decision = decide(node.method, items)
    choice = node.choices[decision.index]
    meta: dict[str, Any] = {
        "method": node.method.value,
        "choices": list(node.choices),
        "choice": choice,
        "index": decision.index,
        "scores": list(decision.scores),
        "normalized_logprobs": list(decision.normalized),
        "token_logprobs": [list(it.logprobs) for it in items],
        "tokens": [list(it.tokens) for it in items],
        "cached_tokens": [it.meta.get("cached_tokens") for it in items],
        "prompt_tokens": [it.meta.get("prompt_tokens") for it in items],
    }
    if node.method is SelectMethod.UNCONDITIONAL_NORMALIZED:
        meta["unconditional_token_logprobs"] = [list(it.unconditional or ()) for it in items]
    state.emit(node.name, choice)
    state.close_var(node.name)
    state.store(node.name, choice, meta)


def _raise_if_aborted(meta: dict[str, Any]) -> None:
    finish = meta.get("finish_reason") or {}
    if isinstance(finish, dict) and finish.get("type") == "abort":
        raise BackendError(f"the model call was aborted: {finish.get('message') or 'no reason given'}")
