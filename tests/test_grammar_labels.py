"""IDNA A-labels in `format: hostname`: accepted exactly when valid, never started by generation (schema/labels.py)."""

from __future__ import annotations

import random

import pytest
from grammar_helpers import walk

from sprig.grammar import GrammarCompiler, GrammarSpec, matcher_for
from sprig.grammar.matcher import allocate_token_bitmask
from sprig.grammar.schema.labels import StringScan, host_labels_valid, valid_a_label

VALID = ["xn--9n2bp8q.xn--9t4b11yi5a", "xn--ll-0ea", "XN--9N2BP8Q", "www.xn--bck0j.example", "a--b.com"]
INVALID = ["xn--X", "xn--hello-txk", "xn--al-0ea", "www.xn--ngb6iyr", "XN--aa---o47jg78q", "xn--a.com"]


@pytest.fixture(scope="module")
def hostname(info):
    with GrammarCompiler(info, max_workers=1, isolate=False) as comp:
        yield comp.compile(GrammarSpec.json_schema({"type": "string", "format": "hostname"}))


def test_the_label_check_agrees_with_idna_on_known_labels():
    assert all(host_labels_valid(v) for v in VALID)
    assert not any(host_labels_valid(v) for v in INVALID)
    assert valid_a_label(b"xn--zca29lwxobi7a") and not valid_a_label(b"xn--chb89f")


def test_walks_accept_valid_and_refuse_invalid_a_labels(hostname):
    for text in VALID:
        assert walk(hostname, f'"{text}"'), text
    for text in INVALID:
        assert not walk(hostname, f'"{text}"'), text


def test_the_scan_follows_strings_and_labels():
    scan, bad = StringScan().feed(b'{"k":"ab.xn')
    assert not bad and scan.in_string and scan.hosty and scan.label == b"xn"
    assert StringScan().feed(b'"xn--X"')[1] and StringScan().feed(b'"xn--X.')[1]
    assert not StringScan().feed(b'"a b xn--X"')[1]  # not a host name's alphabet: not checked
    assert not StringScan().feed(b'"\\"xn--X"')[1]  # an escape: not a host name
    assert StringScan(True, False, True, b"xn-").creates_a_label(b"-a")
    assert StringScan(True, False, True, b"ab").creates_a_label(b".XN--")
    assert not StringScan(True, False, True, b"ab").creates_a_label(b"-x")


def test_generation_never_starts_an_a_label_and_always_has_a_token(hostname, info):
    """Random walks through the masks: every host name finishes, none has an "xn--" label, none is stuck."""
    rng = random.Random(0)
    bitmask = allocate_token_bitmask(1, info.vocab_size)
    for _ in range(60):
        matcher = matcher_for(hostname)
        out = b""
        while not matcher.is_terminated():
            matcher.fill_bitmask(bitmask, 0)
            row = bitmask[0]
            allowed = [t for t in range(info.vocab_size) if (int(row[t // 32]) >> (t % 32)) & 1]
            assert allowed, f"no token allowed after {out!r}"
            eos_ok = 2 in allowed
            tok = 2 if eos_ok and (len(out) > 30 or rng.random() < 0.3) else rng.choice(
                [t for t in allowed if t != 2] or [2])
            assert matcher.accept_token(tok), (out, tok)
            out += b"" if tok == 2 else info.token_bytes[tok]
        text = out.decode()[1:-1]
        assert "xn--" not in text.lower() and host_labels_valid(text), text


def test_rollback_restores_the_scan(hostname, info):
    matcher = matcher_for(hostname)
    ids = info.tokenizer.encode('"xn--X', add_special_tokens=False).ids
    assert matcher.accept_tokens(ids)
    quote = info.tokenizer.encode('"', add_special_tokens=False).ids
    assert not matcher.accept_tokens(quote)  # would close an invalid A-label
    matcher.rollback(len(ids))
    good = info.tokenizer.encode('"xn--ll-0ea', add_special_tokens=False).ids
    assert matcher.accept_tokens(good) and matcher.accept_tokens(quote) and matcher.can_finish()


def test_other_grammars_are_untouched(info):
    with GrammarCompiler(info, max_workers=1, isolate=False) as comp:
        free = comp.compile(GrammarSpec.json_schema({"type": "string"}))
        assert walk(free, '"xn--X"')  # no hostname format: a free string may say anything


def test_compile_workers_stay_free_of_torch():
    """The worker imports the builder (and through strings.py this module) under a small memory limit."""
    import subprocess
    import sys

    code = "import sys, sprig.grammar.compile.worker; sys.exit('torch' in sys.modules)"
    assert subprocess.run([sys.executable, "-c", code], check=False).returncode == 0
