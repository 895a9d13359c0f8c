"""The official JSON-Schema-Test-Suite, drafts 2020-12 and 7, walked token by token on the default backend.

Issue 15, acceptance 1. Every schema is compiled (with the draft's `$schema` where it names none) or
refused; a refusal must name the keyword (and its JSON pointer) that forced it. Every instance of a
compiled schema is spelled the way the grammar writes it (`schema_ordered_dumps`: compact, declared keys
first), tokenized by the tiny model's tokenizer and walked: a valid instance must be accepted token by token
and then allow EOS, an invalid one must be rejected. Formats sprig enforces are asserted (the documented
setting, see tests/grammar_helpers.expected_valid); other formats are annotations.

Targets, all asserted: 0 false accepts and 0 false rejects, at most 10 % of schemas refused per draft, and
a ceiling at today's refusal counts so they never grow back.
"""

from __future__ import annotations

import collections

import pytest
from grammar_helpers import suite_files, walk_suite_file

# why: today's refusal counts; lower them as keywords become enforced, never raise them
REFUSED_CEILING = {"draft2020-12": 39, "draft7": 19}


@pytest.mark.parametrize("draft", ["draft2020-12", "draft7"])
def test_suite_walk(compiler, draft):
    total: collections.Counter = collections.Counter()
    problems: list[str] = []
    rows = []
    for path in suite_files(draft):
        counts, found = walk_suite_file(compiler, path, draft)
        rows.append((path.name if path.parent.name == draft else f"optional/{path.name}", counts))
        total.update(counts)
        problems += found
    schemas = total["compiled"] + total["refused"]
    reasons = sorted(((k[8:], v) for k, v in total.items() if k.startswith("refused:")), key=lambda kv: -kv[1])
    print(f"\n{draft}: {schemas} schemas, {total['compiled']} compiled, {total['refused']} refused "
          f"({100 * total['refused'] / schemas:.1f} %), {total['instances']} instances walked, "
          f"{total['false_accepts']} false accepts, {total['false_rejects']} false rejects")
    print("refused for: " + ", ".join(f"{k} x{v}" for k, v in reasons))
    assert not problems, "\n".join(problems[:40])
    assert total["false_accepts"] == 0 and total["false_rejects"] == 0
    assert total["refused"] <= REFUSED_CEILING[draft] and total["refused"] <= 0.10 * schemas
    assert total["compiled"] >= 200 and total["instances"] >= 900
