"""Grammar compile and mask costs at 2k, 32k and 128k vocabularies.

    python benchmarks/grammar_bench.py [--vocabs 2048,32000,128000] [--rounds 200]

For each tokenizer (the tiny checkpoint's, and byte-level BPE tokenizers trained here on synthetic text,
since the shipped corpus is too small for 128k merges; cached under ~/.cache/sprig/bench-tokenizers) and each
schema: cold compile time (spec -> regex -> outlines-core index, in process), index size, and the per-token
costs of a walk through a valid instance: `fill_bitmask` (p50/p99), `accept_token`, and
`apply_token_bitmask_` for a batch of 1 and 32 rows on CPU. Schemas compile twice: with JSON Schema's
default of allowing undeclared properties (exact) and with allow_extra_properties=False (strict mode).
"""

from __future__ import annotations

import argparse
import itertools
import random
import statistics
import time
from dataclasses import dataclass

import torch

from sprig.grammar import GrammarSpec, JsonOptions, TokenizerInfo
from sprig.grammar.automaton import CompiledGrammar
from sprig.grammar.builder import build
from sprig.grammar.matcher import GrammarMatcher, allocate_token_bitmask
from sprig.grammar.ordering import schema_ordered_dumps
from sprig.kernels.bitmask import apply_token_bitmask_
from sprig.runtime.checkpoints import SPECIAL_TOKENS, cache_dir, checkpoint_path

SCHEMAS: dict[str, tuple[dict, object]] = {
    "person": ({"type": "object", "properties": {
        "name": {"type": "string", "maxLength": 40}, "age": {"type": "integer", "minimum": 0, "maximum": 150},
        "email": {"type": "string", "format": "email"}, "tags": {"type": "array", "items": {"type": "string"},
                                                                 "maxItems": 5}},
        "required": ["name", "age"]},
        {"name": "Ada Lovelace", "age": 36, "email": "ada@example.com", "tags": ["math", "poetry"]}),
    "order": ({"type": "object", "properties": {
        "id": {"type": "string", "format": "uuid"}, "created": {"type": "string", "format": "date-time"},
        "status": {"enum": ["pending", "paid", "shipped", "cancelled"]},
        "items": {"type": "array", "minItems": 1, "items": {"type": "object", "properties": {
            "sku": {"type": "string", "pattern": "^[A-Z]{3}-[0-9]{4}$"}, "qty": {"type": "integer", "minimum": 1},
            "price": {"type": "number", "exclusiveMinimum": 0}}, "required": ["sku", "qty", "price"]}}},
        "required": ["id", "created", "status", "items"]},
        {"id": "2eb8aa08-aa98-11ea-b4aa-73b441d16380", "created": "2024-05-01T10:00:00Z", "status": "paid",
         "items": [{"sku": "ABC-1234", "qty": 2, "price": 9.99}, {"sku": "XYZ-0001", "qty": 1, "price": 120.5}]}),
    "union": ({"oneOf": [
        {"type": "object", "properties": {"kind": {"const": "circle"}, "r": {"type": "number"}},
         "required": ["kind", "r"], "additionalProperties": False},
        {"type": "object", "properties": {"kind": {"const": "rect"}, "w": {"type": "number"},
                                          "h": {"type": "number"}},
         "required": ["kind", "w", "h"], "additionalProperties": False}]},
        {"kind": "rect", "w": 3, "h": 4.5}),
    "tree": ({"$defs": {"node": {"type": "object", "properties": {
        "label": {"type": "string"}, "children": {"type": "array", "items": {"$ref": "#/$defs/node"}}},
        "required": ["label"]}}, "$ref": "#/$defs/node"},
        {"label": "root", "children": [{"label": "a"}, {"label": "b", "children": [{"label": "c"}]}]}),
}


def synthetic_corpus(n_lines: int, seed: int = 0) -> list[str]:
    """Zipf-distributed pseudo-words, numbers, JSON fragments and code-ish punctuation."""
    rng = random.Random(seed)
    syllables = [c + v for c in "bcdfghjklmnprstvwz" for v in ("a", "e", "i", "o", "u", "ai", "ou", "ee")]
    words = list({"".join(rng.choice(syllables) for _ in range(rng.randint(1, 4))) for _ in range(300_000)})
    cum = list(itertools.accumulate(1.0 / (i + 1) for i in range(len(words))))  # why: Zipf, computed once
    lines = []
    for _ in range(n_lines):
        kind = rng.random()
        ws = rng.choices(words, cum_weights=cum, k=rng.randint(5, 14))
        if kind < 0.55:
            lines.append(" ".join(ws).capitalize() + rng.choice([".", ",", "?", "!", ":"]))
        elif kind < 0.85:
            pairs = ", ".join(f'"{w}": {rng.choice([str(rng.randint(0, 10**rng.randint(1, 7))), f"{w!r}"])}'
                              for w in ws[:4])
            lines.append("{" + pairs.replace("'", '"') + "}")
        else:
            lines.append(f"def {ws[0]}_{ws[1]}({ws[2]}, {ws[3]}):\n    return {ws[4]}[{rng.randint(0, 99)}] + 0.{rng.randint(0, 999)}")
    return lines


def bench_tokenizer(vocab: int):
    """A byte-level BPE tokenizer with `vocab` entries, trained once and cached."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

    path = cache_dir() / "bench-tokenizers" / f"bpe-{vocab}.json"
    if path.exists():
        return Tokenizer.from_file(str(path))
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=vocab, special_tokens=SPECIAL_TOKENS, show_progress=False,
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    tok.train_from_iterator(synthetic_corpus(600_000 if vocab > 64_000 else 250_000), trainer)
    path.parent.mkdir(parents=True, exist_ok=True)
    tok.save(str(path))
    return tok


def tokenizer_info(vocab: int) -> TokenizerInfo:
    if vocab <= 4096:
        return TokenizerInfo.from_tokenizer(checkpoint_path("tiny-llama"), eos_token_ids=[2], vocab_size=2100)
    tok = bench_tokenizer(vocab)
    size = tok.get_vocab_size()
    return TokenizerInfo.from_tokenizer(tok, eos_token_ids=[tok.token_to_id("<|im_end|>")],
                                        vocab_size=(size + 63) // 64 * 64)


@dataclass
class Row:
    vocab: int
    schema: str
    extra: bool
    compile_s: float
    index_mb: float
    cold_p50_us: float
    cold_p99_us: float
    warm_p50_us: float
    warm_p99_us: float
    accept_us: float
    tokens: int


def percentile(xs: list[float], q: float) -> float:
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(q * len(xs)))]


def measure(info: TokenizerInfo, name: str, extra: bool, rounds: int) -> Row:
    schema, instance = SCHEMAS[name]
    options = JsonOptions(allow_extra_properties=extra)
    spec = GrammarSpec.json_schema(schema, options)
    start = time.perf_counter()
    result = build(spec, info)
    import pickle

    compiled = CompiledGrammar(spec, result.regex, pickle.loads(result.index_binary), info, 0.0,
                               len(result.index_binary))
    compile_s = time.perf_counter() - start
    ids = info.tokenizer.encode(schema_ordered_dumps(schema, instance, options), add_special_tokens=False).ids
    bitmask = allocate_token_bitmask(1, info.vocab_size)
    cold, warm, accepts = walk(compiled, ids, bitmask), [], []
    for _ in range(max(1, rounds // max(len(ids), 1))):
        warm += walk(compiled, ids, bitmask, accepts)
    return Row(info.vocab_size, name, extra, compile_s, compiled.nbytes / 2**20, percentile(cold, 0.5) * 1e6,
               percentile(cold, 0.99) * 1e6, percentile(warm, 0.5) * 1e6, percentile(warm, 0.99) * 1e6,
               statistics.mean(accepts) * 1e6, len(ids))


def walk(compiled: CompiledGrammar, ids: list[int], bitmask: torch.Tensor, accepts: list[float] | None = None):
    """Fill the mask and accept each token of a valid instance; returns the fill times."""
    fills: list[float] = []
    matcher = GrammarMatcher(compiled)
    for tok in ids:
        t0 = time.perf_counter()
        matcher.fill_bitmask(bitmask, 0)
        t1 = time.perf_counter()
        assert matcher.accept_token(tok), "the instance must be valid"
        fills.append(t1 - t0)
        if accepts is not None:
            accepts.append(time.perf_counter() - t1)
    return fills


def apply_cost(vocab: int, batch: int, reps: int = 50) -> float:
    logits = torch.randn(batch, vocab)
    bitmask = allocate_token_bitmask(batch, vocab)
    times = []
    for _ in range(reps):
        t0 = time.perf_counter()
        apply_token_bitmask_(logits, bitmask)
        times.append(time.perf_counter() - t0)
    return percentile(times, 0.5) * 1e6


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--vocabs", default="2048,32000,128000")
    parser.add_argument("--rounds", type=int, default=300)
    parser.add_argument("--schemas", default=",".join(SCHEMAS))
    args = parser.parse_args()
    torch.set_num_threads(1)
    print("mask = fill_bitmask per token; cold = first walk through the grammar, warm = later walks")
    print(f"{'vocab':>7} {'schema':8} {'extra':5} {'compile s':>9} {'index MB':>8} {'cold p50':>8} {'cold p99':>8} "
          f"{'warm p50':>8} {'warm p99':>8} {'accept':>6} {'tokens':>6}   (times in us)")
    for vocab in (int(v) for v in args.vocabs.split(",")):
        t0 = time.perf_counter()
        info = tokenizer_info(vocab)
        print(f"# tokenizer {vocab}: {len(info.token_bytes)} tokens, ready in {time.perf_counter() - t0:.1f} s")
        for name in args.schemas.split(","):
            for extra in (True, False):
                r = measure(info, name, extra, args.rounds)
                print(f"{r.vocab:7} {r.schema:8} {str(r.extra):5} {r.compile_s:9.3f} {r.index_mb:8.2f} "
                      f"{r.cold_p50_us:8.1f} {r.cold_p99_us:8.1f} {r.warm_p50_us:8.1f} {r.warm_p99_us:8.1f} "
                      f"{r.accept_us:6.1f} {r.tokens:6}", flush=True)
        print(f"# apply_token_bitmask_ (CPU, p50): batch 1 {apply_cost(info.vocab_size, 1):.0f} us, "
              f"batch 32 {apply_cost(info.vocab_size, 32):.0f} us")


if __name__ == "__main__":
    main()
