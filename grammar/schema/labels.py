"""IDNA A-labels ("xn--...") in `format: hostname`, decided beside the token automaton.

An A-label is valid when its Punycode decodes to a U-label that IDNA2008 allows (RFC 5891 section 4.4:
permitted code points, NFC, the contextual and bidi rules) and encodes back to itself. That is arithmetic
on the decoded code points, not a regular property, so the hostname regex admits every LDH label that
starts with "xn--" (formats.py) and the matcher decides with the `idna` package:

  * accepting: a token that ends such a label (with "." or the closing quote) is refused if the label is
    not a valid A-label, so a walk accepts exactly the valid host names;
  * generating: the mask never lets a label start with "xn--" (the tokens that would write it are
    cleared), because a random prefix of an A-label usually has no valid completion and a dead end would
    leave the model no token. Generated host names are the LDH subset; accepted ones are exact.

Where: in grammars whose regex admits A-labels (a `hostname` format), on the JSON string being written,
while everything written in it so far is letters, digits, "-" and "." (a host name's alphabet). Another
string of such a grammar with that shape so far (a key, a free string) follows the same rule, which keeps
the grammar a subset of the schema's language, never more.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING

import idna

from sprig.grammar.spec import GrammarKind
from sprig.grammar.vocabulary import TokenizerInfo

if TYPE_CHECKING:  # why: compile workers import this module (strings.py) and must stay free of torch
    import torch

A_LABEL_MARK = r"[Xx][Nn]\-\-"  # how the rendered hostname regex spells the start of an A-label
LDH = frozenset(b"abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789-")
PREFIXES = (b"", b"x", b"xn", b"xn-")  # label starts that can still become "xn--"; anything else: OTHER
OTHER = len(PREFIXES)


def is_a_label(label: bytes) -> bool:
    return label[:4].lower() == b"xn--"


@functools.lru_cache(maxsize=8192)
def valid_a_label(label: bytes) -> bool:
    """Whether an "xn--" label is a valid IDNA2008 A-label (decodes, and re-encodes to itself)."""
    try:
        text = label.decode("ascii")
        return idna.encode(idna.decode(text)).decode("ascii") == text.lower()
    except (idna.IDNAError, UnicodeError, ValueError):
        return False


def host_labels_valid(text: str) -> bool:
    """Whether every A-label of the host name `text` is valid (other labels are the regex's business)."""
    return all(valid_a_label(label.encode()) for label in text.split(".") if label.isascii() and is_a_label(
        label.encode()))


@dataclass(frozen=True)
class StringScan:
    """Where the generated JSON text stands: inside a string? all of it a host name's alphabet so far?"""

    in_string: bool = False
    escaped: bool = False
    hosty: bool = False  # every character of the current string so far is LDH or "."
    label: bytes = b""  # the current label (since the string's start or the last "."), while hosty

    def feed(self, data: bytes) -> tuple[StringScan, bool]:
        """The scan after `data`, and whether `data` ended an invalid A-label."""
        in_string, escaped, hosty, label = self.in_string, self.escaped, self.hosty, self.label
        for b in data:
            if not in_string:
                if b == 0x22:  # why: outside strings, a quote always opens one in JSON
                    in_string, hosty, label = True, True, b""
            elif escaped:
                escaped = False
            elif b == 0x5C:
                escaped, hosty = True, False
            elif b in (0x22, 0x2E):  # closing quote or "."
                if hosty and is_a_label(label) and not valid_a_label(label):
                    return self, True
                in_string, label = b == 0x2E, b""
            elif hosty and b in LDH and len(label) < 64:
                label += bytes((b,))
            else:
                hosty = False
        return StringScan(in_string, escaped, hosty and in_string, label), False

    def creates_a_label(self, data: bytes) -> bool:
        """Whether `data` would write "xn--" at the start of a label of a host-name-shaped string."""
        scan = self
        for b in data:
            scan, _ = scan.feed(bytes((b,)))
            if scan.hosty and len(scan.label) == 4 and is_a_label(scan.label):
                return True
            if not scan.in_string:
                return False
        return False

    def prefix_class(self) -> int:
        low = self.label.lower()
        return PREFIXES.index(low) if low in PREFIXES else OTHER


@dataclass
class ALabelRules:
    """Per compiled grammar: which tokens to clear from a mask row, by how the current label starts."""

    clear: list[torch.Tensor]  # per prefix class: an int32 row, bits of tokens that would start an A-label off
    closers: list[int]  # tokens containing "." or '"' (they may end a label)

    def restrict(self, row: torch.Tensor, scan: StringScan, token_bytes: list[bytes | None]) -> None:
        """Clear, in a filled mask row, the tokens the matcher must not offer in this scan state."""
        if not (scan.in_string and scan.hosty):
            return
        original = row.clone()
        row &= self.clear[scan.prefix_class()]
        if is_a_label(scan.label):  # why: reached only by accepting a given text; close it validly only
            for tok in self.closers:
                if (int(row[tok // 32]) >> (tok % 32)) & 1 and scan.feed(token_bytes[tok] or b"")[1]:
                    row[tok // 32] &= ~_bit(tok % 32)
        if not bool(row.any()):
            row.copy_(original)  # why: never an empty row (a grammar whose only way on is an A-label)


def rules_for(kind: GrammarKind, regex: str, info: TokenizerInfo) -> ALabelRules | None:
    """The A-label rules of a compiled grammar, or None where its regex admits no A-label."""
    if kind not in (GrammarKind.JSON_SCHEMA, GrammarKind.JSON_OBJECT) or A_LABEL_MARK not in regex:
        return None
    rules = _RULES.get(info.fingerprint)
    if rules is None:
        if len(_RULES) >= 8:
            _RULES.pop(next(iter(_RULES)))
        rules = _RULES[info.fingerprint] = _rules(info)
    return rules


_RULES: dict[str, ALabelRules] = {}  # by tokenizer fingerprint: the rules depend on the vocabulary only


def _rules(info: TokenizerInfo) -> ALabelRules:
    import torch

    words = (info.vocab_size + 31) // 32
    clear = [torch.full((words,), -1, dtype=torch.int32) for _ in range(OTHER + 1)]
    closers = []
    starts = [replace(StringScan(True, False, True, b""), label=p) for p in PREFIXES] + [
        StringScan(True, False, True, b"a")]
    for tok, raw in enumerate(info.token_bytes):
        if not raw:
            continue
        if b"." in raw or b'"' in raw:
            closers.append(tok)
        if b"-" not in raw:
            continue  # why: "xn--" needs a "-" from this token
        for cls, scan in enumerate(starts):
            if scan.creates_a_label(raw):
                clear[cls][tok // 32] &= ~_bit(tok % 32)
    return ALabelRules(clear, closers)


def _bit(j: int) -> int:
    return -(1 << 31) if j == 31 else 1 << j  # why: int32 bit 31 is the sign bit
