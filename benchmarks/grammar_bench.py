"""Grammar costs: compile time and per-token mask time, sprig side by side with xgrammar and llguidance.

    python benchmarks/grammar_bench.py [--vocabs 32000,128000] [--rounds 300] [--decode-runs 3]

For each tokenizer (byte-level BPE tokenizers trained here on synthetic text, since the shipped corpus is too
small for 128k merges; cached under ~/.cache/sprig/bench-tokenizers; 2048 means the tiny checkpoint's) and
each schema: cold compile time and the per-token cost of filling the next-token bitmask (p50/p99) along a
valid instance, for sprig with JSON Schema's default of allowing undeclared properties (exact) and with
allow_extra_properties=False (strict), on its default llguidance backend and on the outlines backend
(`sprig-outlines`), and for xgrammar (strict_mode off/on) and llguidance's own JSON Schema support when
installed (`pip install -e '.[bench]'`); see grammar_peers.py. A summary per vocabulary and engine gives
compile p50/p99 over the schemas and mask-fill p50/p99 over every warm token. Then, on the demo model, decode throughput with and
without a JSON-schema constraint and the tokens and time jump-forward saves (grammar_decode.py). Prints a
table and saves JSON to results/grammar_bench.json.
"""

from __future__ import annotations

import argparse
import itertools
import json
import random
import sys
import time
from pathlib import Path

import torch

from sprig.grammar import GrammarCompiler, GrammarError, GrammarSpec, JsonOptions, TokenizerInfo
from sprig.grammar.matcher import allocate_token_bitmask
from sprig.grammar.schema.ordering import schema_ordered_dumps
from sprig.kernels.bitmask import apply_token_bitmask_
from sprig.runtime.model.checkpoints import SPECIAL_TOKENS, cache_dir, checkpoint_path

sys.path.insert(0, str(Path(__file__).resolve().parent))  # why: run as a script, beside its helpers
from grammar_decode import constraint_overhead, jump_forward  # noqa: E402
from grammar_peers import WalkResult, llguidance_walk, percentile, sprig_walk, xgrammar_walk  # noqa: E402

RESULTS = Path(__file__).resolve().parent.parent / "results" / "grammar_bench.json"
CORPUS = Path(__file__).resolve().parent.parent / "tests" / "data" / "real_world" / "corpus.json"

USER = {"type": "object", "properties": {
    "login": {"type": "string", "maxLength": 39}, "id": {"type": "integer", "minimum": 1},
    "type": {"enum": ["User", "Bot", "Organization"]}, "site_admin": {"type": "boolean"},
    "html_url": {"type": "string", "format": "uri"}}, "required": ["login", "id", "type"]}
ISSUE_SCHEMA = {"type": "object", "properties": {  # a GitHub-issue-like API object: large, real-world style
    "id": {"type": "integer", "minimum": 1}, "number": {"type": "integer", "minimum": 1},
    "title": {"type": "string", "maxLength": 256}, "body": {"type": ["string", "null"]},
    "state": {"enum": ["open", "closed"]}, "state_reason": {"enum": ["completed", "not_planned", "reopened", None]},
    "locked": {"type": "boolean"}, "user": USER, "assignees": {"type": "array", "items": USER, "maxItems": 10},
    "labels": {"type": "array", "items": {"type": "object", "properties": {
        "id": {"type": "integer"}, "name": {"type": "string", "maxLength": 50},
        "color": {"type": "string", "pattern": "^[0-9a-f]{6}$"}, "default": {"type": "boolean"}},
        "required": ["id", "name", "color"], "additionalProperties": False}},
    "milestone": {"anyOf": [{"type": "null"}, {"type": "object", "properties": {
        "number": {"type": "integer"}, "title": {"type": "string"}, "due_on": {"type": ["string", "null"],
                                                                             "format": "date-time"}},
        "required": ["number", "title"], "additionalProperties": False}]},
    "comments": {"type": "integer", "minimum": 0}, "created_at": {"type": "string", "format": "date-time"},
    "updated_at": {"type": "string", "format": "date-time"},
    "closed_at": {"type": ["string", "null"], "format": "date-time"},
    "author_association": {"enum": ["OWNER", "MEMBER", "COLLABORATOR", "CONTRIBUTOR", "NONE"]},
    "reactions": {"type": "object", "properties": {k: {"type": "integer", "minimum": 0} for k in (
        "total_count", "+1", "-1", "laugh", "hooray", "confused", "heart", "rocket", "eyes")},
        "additionalProperties": False}},
    "required": ["id", "number", "title", "state", "locked", "user", "labels", "comments", "created_at",
                 "updated_at", "author_association"]}
ISSUE_INSTANCE = {
    "id": 1, "number": 1347, "title": "Found a bug", "body": "I'm having a problem with this.", "state": "open",
    "state_reason": None, "locked": False,
    "user": {"login": "octocat", "id": 1, "type": "User", "site_admin": False,
             "html_url": "https://github.com/octocat"},
    "assignees": [{"login": "hubot", "id": 2, "type": "Bot"}],
    "labels": [{"id": 208045946, "name": "bug", "color": "f29513", "default": True}],
    "milestone": {"number": 1, "title": "v1.0", "due_on": "2012-10-09T23:39:01Z"}, "comments": 0,
    "created_at": "2011-04-22T13:33:48Z", "updated_at": "2011-04-22T13:33:48Z", "closed_at": None,
    "author_association": "COLLABORATOR",
    "reactions": {"total_count": 3, "+1": 2, "-1": 0, "laugh": 0, "hooray": 1, "confused": 0, "heart": 0,
                  "rocket": 0, "eyes": 0}}

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
    "issue": (ISSUE_SCHEMA, ISSUE_INSTANCE),
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


def apply_cost(vocab: int, batch: int, reps: int = 50) -> float:
    logits = torch.randn(batch, vocab)
    bitmask = allocate_token_bitmask(batch, vocab)
    times = []
    for _ in range(reps):
        t0 = time.perf_counter()
        apply_token_bitmask_(logits, bitmask)
        times.append(time.perf_counter() - t0)
    return percentile(times, 0.5) * 1e6


def walks(info: TokenizerInfo, engines: list[str], rounds: int, schemas: list[str]) -> list[WalkResult]:
    """Every engine on every schema: compile, then masked walks through the valid instance."""
    # the engine's defaults: 60 s, 4 GiB per compile
    with GrammarCompiler(info, max_workers=1) as compiler, \
            GrammarCompiler(info, max_workers=1, backend="outlines") as outlines:
        for comp in (compiler, outlines):
            comp.compile(GrammarSpec.regex("warm"))  # why: worker start-up is not compile time
        return _walks({"llguidance": compiler, "outlines": outlines}, engines, rounds, schemas)


def _walks(compilers: dict[str, GrammarCompiler], engines: list[str], rounds: int,
           schemas: list[str]) -> list[WalkResult]:
    info = compilers["llguidance"].tokenizer_info
    out = []
    for name in schemas:
        schema, instance = SCHEMAS[name]
        text = schema_ordered_dumps(schema, instance, JsonOptions())
        ids = info.tokenizer.encode(text, add_special_tokens=False).ids
        reps = max(2, rounds // max(len(ids), 1))
        for engine in engines:
            if engine.startswith("sprig"):
                compiler = compilers["outlines" if engine.endswith("-outlines") else "llguidance"]
                r = sprig_walk(compiler, name, schema, ids, reps,
                               JsonOptions(allow_extra_properties="strict" not in engine))
            elif engine in ("xgrammar", "xgrammar-strict"):
                r = xgrammar_walk(info, name, schema, ids, reps, strict=engine == "xgrammar-strict")
            else:
                r = llguidance_walk(info, name, schema, ids, reps)
            print_walk(r)
            out.append(r)
    return out


def corpus_walks(info: TokenizerInfo, engines: list[str], limit: int) -> list[WalkResult]:
    """Every engine on the real-world corpus (tests/data/real_world): compile each schema cold, then walk its
    first valid instance twice (cold, then warm)."""
    corpus = json.loads(CORPUS.read_text())[:limit]
    with GrammarCompiler(info, max_workers=1) as compiler:
        compiler.compile(GrammarSpec.regex("warm"))  # why: worker start-up is not compile time
        out = []
        for entry in corpus:
            schema, instance = entry["schema"], entry["valid"][0]
            try:
                text = schema_ordered_dumps(schema, instance, JsonOptions())
            except GrammarError:  # sprig refuses the schema: the instance as written, for the peers
                text = json.dumps(instance, separators=(",", ":"), ensure_ascii=False)
            ids = info.tokenizer.encode(text, add_special_tokens=False).ids
            for engine in engines:
                if engine == "sprig":
                    r = sprig_walk(compiler, entry["name"], schema, ids, 2, JsonOptions())
                elif engine in ("xgrammar", "xgrammar-strict"):
                    r = xgrammar_walk(info, entry["name"], schema, ids, 2, strict=engine == "xgrammar-strict")
                elif engine == "llguidance":
                    r = llguidance_walk(info, entry["name"], schema, ids, 2)
                else:
                    continue
                out.append(r)
    for engine in dict.fromkeys(r.engine for r in out):
        slow = sorted((r for r in out if r.engine == engine and r.compile_s is not None),
                      key=lambda r: -(r.compile_s or 0))[:3]
        rejected = [r.schema for r in out if r.engine == engine and r.accepted is False]
        print(f"# corpus, {engine}: slowest compiles " + ", ".join(f"{r.schema} {r.compile_s * 1e3:.0f} ms"
                                                                 for r in slow if r.compile_s is not None)
              + f"; valid instance rejected: {len(rejected)} {rejected[:5]}")
    return out


def summary(rows: list[WalkResult]) -> dict[str, dict[str, float | int | None]]:
    """Per engine: compile p50/p99 (s) over the schemas it compiled, warm mask p50/p99 (us) over all tokens."""
    out: dict[str, dict[str, float | int | None]] = {}
    for engine in dict.fromkeys(r.engine for r in rows):
        mine = [r for r in rows if r.engine == engine]
        compiled = [r for r in mine if r.compile_s is not None]  # why: a rejected walk still compiled
        fills = [f for r in mine for f in r.fills[r.tokens:] or r.fills]
        out[engine] = {
            "schemas": len(mine), "refused_or_failed": sum(1 for r in mine if r.error),
            "compiled": len(compiled), "valid_rejected": sum(1 for r in mine if r.accepted is False),
            "mask_p50_us": percentile(fills, 0.5) * 1e6 if fills else None,
            "mask_p99_us": percentile(fills, 0.99) * 1e6 if fills else None}
        for part in ("compile", "translate", "build"):
            xs = [getattr(r, f"{part}_s") for r in compiled if getattr(r, f"{part}_s") is not None]
            out[engine][f"{part}_p50_s"] = percentile(xs, 0.5) if xs else None
            out[engine][f"{part}_p99_s"] = percentile(xs, 0.99) if xs else None
    return out


def print_summary(vocab: int, table: dict[str, dict[str, float | int | None]], what: str = "schemas above") -> None:
    print(f"# summary of the {what}, vocab {vocab}: engine, schemas (refused/failed), compile p50/p99 ms, mask p50/p99 us")
    for engine, s in table.items():
        c50, c99 = (None if s[k] is None else float(s[k]) * 1e3 for k in ("compile_p50_s", "compile_p99_s"))  # type: ignore[arg-type]
        print(f"#   {engine:16} {s['schemas']:3} ({s['refused_or_failed']}) {fmt(c50, '9.1f')} {fmt(c99, '9.1f')} "
              f"{fmt(s['mask_p50_us'], '8.1f')} {fmt(s['mask_p99_us'], '8.1f')}")  # type: ignore[arg-type]


TARGET_P50_S, TARGET_P99_S = 0.001, 0.020  # issue 33: compile p50 <= 1 ms, p99 <= 20 ms, cold, on the corpus


def print_targets(vocab: int, table: dict[str, dict[str, float | int | None]]) -> None:
    """Whether each engine meets issue 33's compile targets on the corpus at this vocabulary."""
    for engine, s in table.items():
        p50, p99 = s["compile_p50_s"], s["compile_p99_s"]
        if p50 is None or p99 is None:
            continue
        met = float(p50) <= TARGET_P50_S and float(p99) <= TARGET_P99_S
        print(f"# target (compile p50 <= 1 ms, p99 <= 20 ms), vocab {vocab}: {engine:16} "
              f"{float(p50) * 1e3:.2f} / {float(p99) * 1e3:.1f} ms: {'met' if met else 'NOT met'}; "
              f"compiled {s['compiled']} of {s['schemas']}, valid instance rejected {s['valid_rejected']}")
        if s.get("translate_p50_s") is not None:  # why: where sprig's compile time goes
            ms = {f"{k}{q}": float(s[f"{k}_p{q}_s"]) * 1e3 for k in ("translate", "build") for q in (50, 99)}  # type: ignore[arg-type]
            print(f"#   {engine}: translation (worker) p50/p99 {ms['translate50']:.2f} / {ms['translate99']:.1f} ms, "
                  f"llguidance build (with the initial mask) {ms['build50']:.2f} / {ms['build99']:.1f} ms; "
                  "the rest of the wall time is the worker round trip and waiting for a core")


def fmt(x: float | None, spec: str) -> str:
    return "-" if x is None else format(x, spec)


def print_walk(r: WalkResult) -> None:
    ok = {True: "yes", False: "NO", None: "-"}[r.accepted]
    print(f"{r.vocab:7} {r.schema:7} {r.engine:16} {fmt(r.compile_s, '9.3f')} {fmt(r.mask_p50_us, '8.1f')} "
          f"{fmt(r.mask_p99_us, '8.1f')} {fmt(r.cold_p99_us, '9.1f')} {fmt(r.accept_us, '7.1f')} {r.tokens:6} "
          f"{ok:>5}  {r.error}", flush=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--vocabs", default="32000,128000", help='"" runs only the decode part')
    parser.add_argument("--rounds", type=int, default=300, help="masked tokens per engine and schema (warm)")
    parser.add_argument("--schemas", default=",".join(SCHEMAS))
    parser.add_argument("--engines",
                        default="sprig,sprig-strict,sprig-outlines,xgrammar,xgrammar-strict,llguidance")
    parser.add_argument("--decode-runs", type=int, default=5, help="0 skips the demo-model decode runs")
    parser.add_argument("--batch", type=int, default=8)
    parser.add_argument("--corpus", type=int, default=1000,
                        help="real-world corpus schemas to compile and walk per vocabulary (0 skips)")
    parser.add_argument("--out", default=str(RESULTS))
    args = parser.parse_args()
    torch.set_num_threads(1)
    report: dict = {"walks": [], "apply_us": {}}
    print("mask = fill the next-token bitmask, us; p50/p99 over warm walks, cold p99 over the first walk; "
          "ok = the valid instance walked to EOS")
    print(f"{'vocab':>7} {'schema':7} {'engine':16} {'compile s':>9} {'mask p50':>8} {'mask p99':>8} "
          f"{'cold p99':>9} {'accept':>7} {'tokens':>6} {'ok':>5}")
    for vocab in (int(v) for v in args.vocabs.split(",") if v):
        t0 = time.perf_counter()
        info = tokenizer_info(vocab)
        print(f"# tokenizer {vocab}: {len(info.token_bytes)} tokens, ready in {time.perf_counter() - t0:.1f} s")
        rows = walks(info, args.engines.split(","), args.rounds, args.schemas.split(","))
        report["walks"] += [r.row() for r in rows]
        report.setdefault("summary", {})[vocab] = table = summary(rows)
        print_summary(vocab, table)
        if args.corpus:
            rows = corpus_walks(info, args.engines.split(","), args.corpus)
            report.setdefault("corpus_walks", []).extend(r.row() for r in rows)
            report.setdefault("corpus_summary", {})[vocab] = table = summary(rows)
            print_summary(vocab, table, "corpus")
            print_targets(vocab, table)
        apply = {b: apply_cost(info.vocab_size, b) for b in (1, 32)}
        report["apply_us"][vocab] = apply
        print(f"# apply_token_bitmask_ (CPU, p50): batch 1 {apply[1]:.0f} us, batch 32 {apply[32]:.0f} us")
    if args.decode_runs:
        report["overhead"] = constraint_overhead(args.batch, args.decode_runs)
        print("# decode, demo model: " + json.dumps(report["overhead"]))
        report["jump_forward"] = jump_forward(args.batch, args.decode_runs)
        print("# jump-forward, demo model: " + json.dumps(report["jump_forward"]))
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(report, indent=1))
    print(f"# saved {args.out}")


if __name__ == "__main__":
    main()
