"""The top-level package: what `dir(sprig)` shows a newcomer is the public API, and every name in it resolves."""

from __future__ import annotations

import sprig


def test_dir_lists_the_public_api_and_no_import_helpers():
    names = dir(sprig)
    assert {"Engine", "function", "gen", "select", "RuntimeEndpoint", "OpenAICompatible", "__version__"} <= set(names)
    assert "Any" not in names and "annotations" not in names


def test_every_public_name_resolves():
    for name in sprig.__all__:
        assert getattr(sprig, name) is not None, name
