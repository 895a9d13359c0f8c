"""The tokenizer as the grammar sees it: the raw bytes of every token, the EOS ids and the model's vocab size.

Decoded strings are not enough: byte-level BPE tokens that hold part of a UTF-8 character all decode to
U+FFFD, and SentencePiece pieces decode differently alone than in context. So each token's bytes are
reconstructed from its vocabulary entry: the GPT-2 byte-to-unicode alphabet for byte-level BPE, `▁` and
`<0xNN>` for SentencePiece-style vocabularies. Special tokens are left out (they are never text), ids past
the tokenizer's vocabulary (padding up to the model's size) have no bytes and are never allowed.
"""

from __future__ import annotations

import hashlib
import json
import re
from dataclasses import dataclass, field
from enum import Enum
from pathlib import Path
from typing import Any


class TokenEncoding(Enum):
    """How a vocabulary entry spells its bytes."""

    BYTE_LEVEL = "byte_level"  # GPT-2 / Llama 3 / Qwen: every byte mapped to a printable character
    SENTENCEPIECE = "sentencepiece"  # Llama 2 / Mistral: "▁" is a space, "<0x0A>" is a raw byte
    PLAIN = "plain"  # the entry is the text itself (UTF-8)


def _byte_alphabet() -> dict[str, int]:
    """The byte-level BPE alphabet: printable Latin-1 bytes stand for themselves, the rest are shifted."""
    printable = [*range(ord("!"), ord("~") + 1), *range(0xA1, 0xAD), *range(0xAE, 0x100)]
    mapping = {chr(b): b for b in printable}
    shift = 0
    for b in range(256):
        if b not in printable:
            mapping[chr(256 + shift)] = b
            shift += 1
    return mapping


_BYTE_ALPHABET = _byte_alphabet()
_SP_BYTE = re.compile(r"^<0x([0-9A-Fa-f]{2})>$")


@dataclass
class TokenizerInfo:
    """Everything the grammar needs from a tokenizer. Build with `from_tokenizer`.

    token_bytes[i] is the text of token i as bytes, or None for special tokens and unused ids;
    vocab_size is the model's (the bitmask width), at least len(token_bytes).
    """

    token_bytes: list[bytes | None]
    eos_token_ids: tuple[int, ...]
    vocab_size: int
    encoding: TokenEncoding = TokenEncoding.BYTE_LEVEL
    tokenizer: Any = field(default=None, repr=False, compare=False)  # tokenizers.Tokenizer, for jump-forward
    fingerprint: str = ""

    def __post_init__(self) -> None:
        if self.vocab_size < len(self.token_bytes):
            raise ValueError(f"vocab_size {self.vocab_size} is smaller than the tokenizer ({len(self.token_bytes)})")
        bad = [t for t in self.eos_token_ids if not 0 <= t < self.vocab_size]
        if not self.eos_token_ids or bad:
            raise ValueError(f"eos_token_ids must be non-empty ids below vocab_size (got {self.eos_token_ids})")
        if not self.fingerprint:
            digest = hashlib.sha256()
            for tok in self.token_bytes:
                digest.update(b"\xff" if tok is None else len(tok).to_bytes(4, "little") + tok)
            digest.update(repr((self.eos_token_ids, self.vocab_size)).encode())
            self.fingerprint = digest.hexdigest()[:24]

    @classmethod
    def from_tokenizer(cls, tokenizer: Any, eos_token_ids: list[int] | tuple[int, ...] | int | None = None,
                       vocab_size: int | None = None) -> TokenizerInfo:
        """From a `tokenizers.Tokenizer` or a path to a tokenizer.json (or its folder).

        eos_token_ids default to the special token among `<|im_end|>`, `<|eot_id|>`, `</s>`, `<|endoftext|>`
        that the vocabulary has; vocab_size defaults to the tokenizer's size.
        """
        from tokenizers import Tokenizer

        if isinstance(tokenizer, str | Path):
            path = Path(tokenizer)
            tokenizer = Tokenizer.from_file(str(path / "tokenizer.json" if path.is_dir() else path))
        spec = json.loads(tokenizer.to_str())
        encoding = _detect_encoding(spec)
        size = tokenizer.get_vocab_size(with_added_tokens=True)
        token_bytes: list[bytes | None] = [None] * size
        special = {t["id"] for t in spec.get("added_tokens", []) if t.get("special")}
        for piece, idx in tokenizer.get_vocab(with_added_tokens=True).items():
            if idx not in special and 0 <= idx < size:
                token_bytes[idx] = _piece_bytes(piece, encoding)
        eos = _default_eos(tokenizer) if eos_token_ids is None else eos_token_ids
        eos_ids = (eos,) if isinstance(eos, int) else tuple(eos)
        return cls(token_bytes, eos_ids, vocab_size or size, encoding, tokenizer)

    def single_byte_tokens(self) -> list[int]:
        """For each byte value, a token id spelling exactly that byte, or -1 (EOS ids excluded)."""
        cached = self.__dict__.get("_byte_tokens")
        if cached is None:
            cached = [-1] * 256
            eos = set(self.eos_token_ids)
            for token_id, raw in enumerate(self.token_bytes):
                if raw is not None and len(raw) == 1 and token_id not in eos and cached[raw[0]] < 0:
                    cached[raw[0]] = token_id
            self.__dict__["_byte_tokens"] = cached
        return cached

    def __getstate__(self) -> dict[str, Any]:  # why: compile workers get the bytes, not the Rust tokenizer
        return {**self.__dict__, "tokenizer": None, "_byte_tokens": None}


def _detect_encoding(spec: dict[str, Any]) -> TokenEncoding:
    text = json.dumps([spec.get("pre_tokenizer"), spec.get("decoder")])
    if '"ByteLevel"' in text:
        return TokenEncoding.BYTE_LEVEL
    if "\u2581" in text or '"ByteFallback"' in text or spec.get("model", {}).get("byte_fallback"):
        return TokenEncoding.SENTENCEPIECE
    return TokenEncoding.PLAIN


def _piece_bytes(piece: str, encoding: TokenEncoding) -> bytes:
    if encoding is TokenEncoding.BYTE_LEVEL:
        try:
            return bytes(_BYTE_ALPHABET[c] for c in piece)
        except KeyError:  # an added, non-special token written as plain text
            return piece.encode("utf-8")
    if encoding is TokenEncoding.SENTENCEPIECE:
        match = _SP_BYTE.match(piece)
        if match:
            return bytes([int(match.group(1), 16)])
        return piece.replace("\u2581", " ").encode("utf-8")
    return piece.encode("utf-8")


def _default_eos(tokenizer: Any) -> int:
    for name in ("<|im_end|>", "<|eot_id|>", "<|end_of_text|>", "</s>", "<|endoftext|>", "<eos>"):
        idx = tokenizer.token_to_id(name)
        if idx is not None:
            return idx
    raise ValueError("cannot guess the EOS token; pass eos_token_ids")
