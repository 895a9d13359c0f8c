"""A `tokenizers.Tokenizer` built from a GGUF file's metadata, plus its special tokens and chat template.

Built here rather than through transformers' GGUF conversion (`AutoTokenizer.from_pretrained(folder,
gguf_file=...)`), for start-up time: on SmolLM2-135M's file (49k tokens, 49k merges) on the 2-core dev machine,
transformers took 7.8 s to import and 10.5 s to convert, where this takes 1.3-1.5 s once the file is open (opening
it, 1.7-2.1 s, is shared with the config and the weights), at load average ~10.

The pipelines are the ones transformers builds, so the ids are equal (`tests/test_gguf_tokenizer.py` checks them
on 10,000 lines against transformers for a byte-level and a SentencePiece vocabulary):

- `gpt2` (byte-level BPE): the vocabulary (a token outside the byte alphabet respelled byte by byte), the file's
  merges, GPT-2's byte-level pre-tokenizer, or the split regex `tokenizer.ggml.pre` names followed by a byte-level
  step without its own regex.
- `llama` (SentencePiece BPE): the vocabulary, the merges (the file's, or recovered from the token scores),
  byte fallback, a `▁` metaspace prepended to the first word; BOS added unless the file says otherwise.

Control tokens (token type 3) and the bos / eos / unknown / padding tokens are special tokens, matched whole in the
text; user-defined tokens (type 4) are matched whole too, but are not special.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import IntEnum

from tokenizers import AddedToken, Regex, Tokenizer, decoders, models, pre_tokenizers

from sprig.runtime.errors import CheckpointError
from sprig.runtime.model.gguf_file import GGUFFile

TOKENIZER_MODELS = ("gpt2", "llama")  # `tokenizer.ggml.model`: byte-level BPE, SentencePiece BPE
SPIECE_SPACE = "\u2581"  # SentencePiece's visible space, "▁"

_LLAMA3_SPLIT = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*"
                 r"|\s*[\r\n]+|\s+(?!\S)|\s+")
_QWEN2_SPLIT = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*"
                r"|\s*[\r\n]+|\s+(?!\S)|\s+")
_CASED_WORDS = (r"[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]*[\p{Ll}\p{Lm}\p{Lo}\p{M}]+{suffix}"
                r"|[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]+[\p{Ll}\p{Lm}\p{Lo}\p{M}]*{suffix}")
_TEKKEN_SPLIT = _CASED_WORDS.replace("{suffix}", "") + r"|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n/]*|\s*[\r\n]+|\s+(?!\S)|\s+"
_GPT4O_SPLIT = (_CASED_WORDS.replace("{suffix}", r"(?i:'s|'t|'re|'ve|'m|'ll|'d)?")
                + r"|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n/]*|\s*[\r\n]+|\s+(?!\S)|\s+")
# llama.cpp's `tokenizer.ggml.pre` names -> the split regex of the tokenizer they stand for; any other name
# (`default`, `gpt-2`, `smollm`, ...) gets GPT-2's own, built into the byte-level pre-tokenizer.
PRE_TOKENIZER_SPLITS = {
    **dict.fromkeys(("llama3", "llama-v3", "llama-bpe", "falcon3", "falcon-h1", "pixtral", "dbrx", "smaug-bpe"),
                    _LLAMA3_SPLIT),
    **dict.fromkeys(("qwen2", "deepseek-r1-qwen", "megrez"), _QWEN2_SPLIT),
    "tekken": _TEKKEN_SPLIT,
    **dict.fromkeys(("gpt-4o", "llama4"), _GPT4O_SPLIT),
}


class TokenType(IntEnum):
    """llama.cpp's token types (`tokenizer.ggml.token_type`)."""

    NORMAL = 1
    UNKNOWN = 2
    CONTROL = 3
    USER_DEFINED = 4
    UNUSED = 5
    BYTE = 6


@dataclass(frozen=True)
class GGUFTokenizer:
    """What sprig's `Tokenizer` takes from a GGUF file."""

    hf: Tokenizer
    bos_token: str | None
    eos_token: str | None
    add_bos: bool
    chat_template: str | None


def gguf_tokenizer(gguf: GGUFFile) -> GGUFTokenizer:
    """Build the file's tokenizer; a one-line CheckpointError for a tokenizer model sprig cannot build."""
    kind = gguf.get("tokenizer.ggml.model")
    tokens = gguf.get("tokenizer.ggml.tokens")
    if tokens is None:
        raise CheckpointError(f"{gguf.path.name}: GGUF metadata lacks tokenizer.ggml.tokens")
    types = [TokenType.NORMAL] * len(tokens)
    raw_types = gguf.get("tokenizer.ggml.token_type")
    if raw_types is not None:
        types = [TokenType(t) if t in TokenType._value2member_map_ else TokenType.NORMAL for t in raw_types]
    merges = gguf.get("tokenizer.ggml.merges")
    if kind == "gpt2":
        hf = _byte_level(tokens, merges or [], gguf.get("tokenizer.ggml.pre"))
        default_bos = False
    elif kind == "llama":
        hf = _sentencepiece(tokens, merges, gguf.get("tokenizer.ggml.scores"))
        default_bos = True  # why: llama.cpp adds BOS to a SentencePiece vocabulary that does not say otherwise
    else:
        raise CheckpointError(f"{gguf.path.name}: unsupported GGUF tokenizer model {kind!r}; supported: "
                              f"{', '.join(TOKENIZER_MODELS)}")
    special = {name: _token_at(tokens, gguf.get(f"tokenizer.ggml.{name}_token_id"))
               for name in ("bos", "eos", "unknown", "padding")}
    _add_special_tokens(hf, tokens, types, [t for t in special.values() if t is not None], kind == "gpt2")
    add_bos = bool(gguf.get("tokenizer.ggml.add_bos_token", default_bos)) and special["bos"] is not None
    return GGUFTokenizer(hf, special["bos"], special["eos"], add_bos, gguf.get("tokenizer.chat_template"))


def _token_at(tokens: list[str], index: int | None) -> str | None:
    return tokens[index] if index is not None and 0 <= index < len(tokens) else None


def _byte_level(tokens: list[str], merges: list[str], pre: str | None) -> Tokenizer:
    alphabet = pre_tokenizers.ByteLevel.alphabet()
    to_unicode = _bytes_to_unicode()
    vocab = {t if set(t) <= set(alphabet) else "".join(to_unicode[b] for b in t.encode("utf-8")): i
             for i, t in enumerate(tokens)}
    pairs = [_merge_pair(m) for m in merges]
    hf = Tokenizer(models.BPE(vocab=vocab, merges=pairs, dropout=None, continuing_subword_prefix="",
                              end_of_word_suffix="", fuse_unk=False))
    split = PRE_TOKENIZER_SPLITS.get(pre or "")
    if split is None:
        hf.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    else:
        hf.pre_tokenizer = pre_tokenizers.Sequence([pre_tokenizers.Split(Regex(split), behavior="isolated"),
                                                    pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)])
    hf.decoder = decoders.ByteLevel()
    return hf


def _bytes_to_unicode() -> dict[int, str]:
    """GPT-2's printable spelling of each byte, in the order `ByteLevel.alphabet` does not keep."""
    printable = [*range(ord("!"), ord("~") + 1), *range(ord("¡"), ord("¬") + 1), *range(ord("®"), ord("ÿ") + 1)]
    spelling = {b: chr(b) for b in printable}
    extra = 0
    for b in range(256):
        if b not in spelling:
            spelling[b] = chr(256 + extra)
            extra += 1
    return spelling


def _merge_pair(merge: str) -> tuple[str, str]:
    left, _, right = merge.partition(" ")
    return left, right


def _sentencepiece(tokens: list[str], merges: list[str] | None, scores: list[float] | None) -> Tokenizer:
    vocab = {t: i for i, t in enumerate(tokens)}
    if merges is not None:
        pairs = [_merge_pair(m) for m in merges]
    elif scores is not None and len(scores) == len(tokens):
        pairs = _merges_from_scores(vocab, dict(zip(tokens, scores, strict=True)))
    else:
        raise CheckpointError("a SentencePiece GGUF vocabulary needs tokenizer.ggml.merges or tokenizer.ggml.scores")
    hf = Tokenizer(models.BPE(vocab=vocab, merges=pairs, fuse_unk=True, byte_fallback=True, dropout=None))
    hf.pre_tokenizer = pre_tokenizers.Metaspace(replacement=SPIECE_SPACE, prepend_scheme="first", split=False)
    hf.decoder = decoders.Sequence([decoders.Replace(SPIECE_SPACE, " "), decoders.ByteFallback(), decoders.Fuse(),
                                    decoders.Strip(content=" ", left=1)])
    return hf


def _merges_from_scores(vocab: dict[str, int], scores: dict[str, float]) -> list[tuple[str, str]]:
    """SentencePiece BPE's merges: every split of a token into two tokens, the merged token's score first (then
    shorter left parts, then shorter right parts; among a token's own splits, by the parts' ids)."""
    found: list[tuple[str, str, float]] = []
    for token, score in scores.items():
        splits = [(token[:k], token[k:], score) for k in range(1, len(token)) if token[:k] in vocab
                  and token[k:] in vocab]
        found.extend(sorted(splits, key=lambda s: (vocab[s[0]], vocab[s[1]])))
    found.sort(key=lambda s: (s[2], len(s[0]), len(s[1])), reverse=True)
    return [(left, right) for left, right, _ in found]


def _add_special_tokens(hf: Tokenizer, tokens: list[str], types: list[TokenType], named: list[str],
                        byte_level: bool) -> None:
    """Control and named tokens as special added tokens, user-defined ones as plain added tokens. In a byte-level
    vocabulary a control token spelled outside the byte alphabet is a converter's mislabel and stays ordinary."""
    alphabet = set(pre_tokenizers.ByteLevel.alphabet()) if byte_level else None
    control = [t for t, kind in zip(tokens, types, strict=True) if kind is TokenType.CONTROL
               and (alphabet is None or set(t) <= alphabet)]
    special = list(dict.fromkeys([*control, *named]))
    hf.add_special_tokens([AddedToken(t, normalized=False, special=True) for t in special])
    vocab = hf.get_vocab()
    user = [t for t, kind in zip(tokens, types, strict=True) if kind is TokenType.USER_DEFINED and t in vocab]
    hf.add_tokens([AddedToken(t, normalized=False, special=False) for t in user])


def check_tokenizer_metadata(gguf: GGUFFile, embedding_rows: int) -> None:
    """A tokenizer model sprig builds, with one token per embedding row (llama.cpp's own requirement); a one-line
    CheckpointError otherwise. Cheap: nothing is built."""
    kind = gguf.get("tokenizer.ggml.model")
    if kind not in TOKENIZER_MODELS:
        raise CheckpointError(f"{gguf.path.name}: unsupported GGUF tokenizer model {kind!r}; supported: "
                              f"{', '.join(TOKENIZER_MODELS)}")
    field = gguf.fields.get("tokenizer.ggml.tokens")
    count = len(field.data) if field is not None else 0
    if count != embedding_rows:
        raise CheckpointError(f"{gguf.path.name}: the tokenizer has {count} tokens but token_embd.weight has "
                              f"{embedding_rows} rows")
