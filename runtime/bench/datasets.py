"""Benchmark workloads: the sessions a benchmark sends (random, batch1, shared-prefix, multi-turn, json-schema, JSONL
file).

A workload is a list of `Session`s. Single-turn workloads have one turn per session; a multi-turn session sends
its turns one after another, each with the previous turns and the server's answers as chat history. Prompts are
built from random token ids of the model's tokenizer, decoded to text, so every server sees the same text and
input lengths are known in the model's own tokens.
"""

from __future__ import annotations

import json
import random
from dataclasses import dataclass, field
from enum import Enum
from pathlib import Path
from typing import Any

from sprig.runtime.model.tokenizer import Tokenizer


class DatasetKind(str, Enum):
    """The built-in workloads (a path to a .jsonl file is `FILE`)."""

    RANDOM = "random"
    BATCH1 = "batch1"  # random prompts sent one at a time: the batch-1 decode speed
    SHARED_PREFIX = "shared-prefix"
    MULTI_TURN = "multi-turn"
    JSON_SCHEMA = "json-schema"
    FILE = "file"

    @property
    def max_concurrency(self) -> int | None:
        """The bound on requests in flight the workload itself imposes (batch1: one), whatever the flags say."""
        return 1 if self is DatasetKind.BATCH1 else None


class Api(str, Enum):
    """Which OpenAI route a session uses."""

    COMPLETIONS = "completions"
    CHAT = "chat"


# A small record schema: bounded strings and numbers, so a valid answer fits in ~60 tokens of any tokenizer.
PERSON_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {
        "name": {"type": "string", "maxLength": 12},
        "age": {"type": "integer", "minimum": 0, "maximum": 99},
        "city": {"type": "string", "enum": ["Paris", "Lima", "Oslo", "Tokyo"]},
        "member": {"type": "boolean"},
    },
    "required": ["name", "age", "city", "member"],
    "additionalProperties": False,
}


@dataclass(frozen=True)
class Turn:
    """One request of a session: the prompt text (or user message) and the output budget."""

    text: str
    input_len: int  # tokens of `text` by the workload's tokenizer
    output_len: int


@dataclass(frozen=True)
class Session:
    """A unit of arrival: one request, or a conversation whose turns are sent in order."""

    sid: int
    turns: tuple[Turn, ...]
    api: Api = Api.COMPLETIONS
    system: str | None = None  # chat system message
    json_schema: dict[str, Any] | None = None
    ignore_eos: bool = True  # fixed output lengths unless the output must end by itself (JSON)


@dataclass(frozen=True)
class WorkloadSpec:
    """Everything that determines a generated workload (same spec and tokenizer → same sessions)."""

    kind: DatasetKind = DatasetKind.RANDOM
    num_prompts: int = 64
    input_len: int = 128
    output_len: int = 64
    range_ratio: float = 1.0  # lengths drawn uniformly from [ratio * len, len]
    seed: int = 0
    prefix_len: int = 512  # shared-prefix: tokens shared by a group
    num_groups: int = 4  # shared-prefix: number of distinct prefixes
    num_turns: int = 3  # multi-turn: turns per conversation
    path: str | None = None  # FILE: a JSONL file
    extra: dict[str, Any] = field(default_factory=dict)

    def validate(self) -> None:
        """Raise ValueError on impossible sizes."""
        if self.num_prompts < 1:
            raise ValueError("--num-prompts must be positive")
        if self.input_len < 1 or self.output_len < 1:
            raise ValueError("--input-len and --output-len must be positive")
        if not 0 < self.range_ratio <= 1:
            raise ValueError("--range-ratio must be in (0, 1]")
        if self.kind is DatasetKind.SHARED_PREFIX and (self.num_groups < 1 or self.prefix_len < 0):
            raise ValueError("--num-groups must be positive and --prefix-len >= 0")
        if self.kind is DatasetKind.MULTI_TURN and self.num_turns < 1:
            raise ValueError("--num-turns must be positive")
        if self.kind is DatasetKind.FILE and not self.path:
            raise ValueError("a file dataset needs a path")


def parse_dataset(value: str) -> tuple[DatasetKind, str | None]:
    """`random|batch1|shared-prefix|multi-turn|json-schema` or a path to a .jsonl file."""
    try:
        return DatasetKind(value), None
    except ValueError:
        pass
    if value.endswith(".jsonl") or Path(value).is_file():
        return DatasetKind.FILE, value
    names = ", ".join(k.value for k in DatasetKind if k is not DatasetKind.FILE)
    raise ValueError(f"unknown dataset {value!r}: use one of {names} or a .jsonl file")


class TextSampler:
    """Random text of an exact token length in a tokenizer (ids → text → ids, cut to length)."""

    def __init__(self, tokenizer: Tokenizer, rng: random.Random) -> None:
        self.tok = tokenizer
        self.rng = rng
        special = tokenizer.special_token_ids
        self.ids = [i for i in range(tokenizer.vocab_size) if i not in special]

    def text(self, n: int) -> tuple[str, int]:
        """A random text of `n` tokens (exact when a few tries find one that re-encodes to n) and its count."""
        best = ("", 0)
        for _ in range(8):  # decoding can merge bytes into other tokens; retry until the length round-trips
            ids = self.tok.encode(self.tok.decode([self.rng.choice(self.ids) for _ in range(n + 2)]),
                                  add_special_tokens=False)[:n]
            text = self.tok.decode(ids)
            count = len(self.tok.encode(text, add_special_tokens=False))
            if count == n:
                return text, count
            if abs(count - n) < abs(best[1] - n) or not best[0]:
                best = (text, count)
        return best

    def length(self, n: int, ratio: float) -> int:
        """A length drawn uniformly from [ratio * n, n]."""
        return self.rng.randint(max(1, int(n * ratio)), n)


def build_workload(spec: WorkloadSpec, tokenizer: Tokenizer) -> list[Session]:
    """Generate the sessions of a workload (deterministic for a spec and tokenizer)."""
    spec.validate()
    sampler = TextSampler(tokenizer, random.Random(spec.seed))
    builders = {DatasetKind.RANDOM: _random, DatasetKind.BATCH1: _random, DatasetKind.SHARED_PREFIX: _shared_prefix,
                DatasetKind.MULTI_TURN: _multi_turn, DatasetKind.JSON_SCHEMA: _json_schema}
    if spec.kind is DatasetKind.FILE:
        return load_jsonl(Path(spec.path or ""), spec, tokenizer)
    return builders[spec.kind](spec, sampler)


def _random(spec: WorkloadSpec, s: TextSampler) -> list[Session]:
    sessions = []
    for i in range(spec.num_prompts):
        text, n = s.text(s.length(spec.input_len, spec.range_ratio))
        sessions.append(Session(i, (Turn(text, n, s.length(spec.output_len, spec.range_ratio)),)))
    return sessions


def _shared_prefix(spec: WorkloadSpec, s: TextSampler) -> list[Session]:
    prefixes = [s.text(spec.prefix_len)[0] for _ in range(spec.num_groups)]
    sessions = []
    for i in range(spec.num_prompts):
        question, _ = s.text(s.length(spec.input_len, spec.range_ratio))
        text = prefixes[i % spec.num_groups] + question
        n = len(s.tok.encode(text, add_special_tokens=False))
        sessions.append(Session(i, (Turn(text, n, s.length(spec.output_len, spec.range_ratio)),)))
    s.rng.shuffle(sessions)  # groups arrive interleaved, as users of several apps would
    return [Session(i, x.turns) for i, x in enumerate(sessions)]


def _multi_turn(spec: WorkloadSpec, s: TextSampler) -> list[Session]:
    sessions = []
    for i in range(spec.num_prompts):
        turns = []
        for _ in range(spec.num_turns):
            text, n = s.text(s.length(spec.input_len, spec.range_ratio))
            turns.append(Turn(text, n, s.length(spec.output_len, spec.range_ratio)))
        sessions.append(Session(i, tuple(turns), api=Api.CHAT, system="You are a helpful assistant."))
    return sessions


def _json_schema(spec: WorkloadSpec, s: TextSampler) -> list[Session]:
    schema = spec.extra.get("json_schema", PERSON_SCHEMA)
    sessions = []
    for i in range(spec.num_prompts):
        noise, _ = s.text(s.length(spec.input_len, spec.range_ratio))
        text = f"Describe the person in this note as JSON: {noise}"
        n = len(s.tok.encode(text, add_special_tokens=False))
        sessions.append(Session(i, (Turn(text, n, spec.output_len),), api=Api.CHAT, json_schema=schema,
                                ignore_eos=False))
    return sessions


def load_jsonl(path: Path, spec: WorkloadSpec, tokenizer: Tokenizer) -> list[Session]:
    """Sessions from a JSONL file: one object a line with `prompt` (completions) or `turns` (chat user
    messages), optional `output_len`, `system` and `json_schema`. The first `num_prompts` lines are used."""
    if not path.is_file():
        raise ValueError(f"dataset file not found: {path}")
    sessions: list[Session] = []
    for lineno, line in enumerate(path.read_text().splitlines(), 1):
        if not line.strip():
            continue
        try:
            row = json.loads(line)
        except json.JSONDecodeError as e:
            raise ValueError(f"{path}:{lineno}: not JSON: {e.msg}") from None
        sessions.append(_session_of(row, len(sessions), spec, tokenizer, f"{path}:{lineno}"))
        if len(sessions) == spec.num_prompts:
            break
    if not sessions:
        raise ValueError(f"{path} has no requests")
    return sessions


def _session_of(row: Any, sid: int, spec: WorkloadSpec, tok: Tokenizer, where: str) -> Session:
    if not isinstance(row, dict) or not isinstance(row.get("prompt", row.get("turns")), str | list):
        raise ValueError(f"{where}: expected an object with 'prompt' (string) or 'turns' (list of strings)")
    out = int(row.get("output_len", spec.output_len))
    schema = row.get("json_schema")
    texts = [row["prompt"]] if "prompt" in row else list(row["turns"])
    turns = tuple(Turn(t, len(tok.encode(t, add_special_tokens=False)), out) for t in texts)
    chat = "turns" in row or schema is not None
    return Session(sid, turns, api=Api.CHAT if chat else Api.COMPLETIONS, system=row.get("system"),
                   json_schema=schema, ignore_eos=bool(row.get("ignore_eos", schema is None)))


def load_tokenizer(name_or_path: str) -> Tokenizer:
    """A tokenizer from a checkpoint folder or a sprig recipe name (`llama-100m`, `tiny-llama`, ...)."""
    from sprig.runtime.model.checkpoints import RECIPES, checkpoint_path

    if name_or_path in RECIPES:
        return Tokenizer(checkpoint_path(name_or_path))
    if not (Path(name_or_path) / "tokenizer.json").exists():
        raise ValueError(f"no tokenizer.json in {name_or_path!r} (give a checkpoint folder or a recipe name)")
    return Tokenizer(name_or_path)
