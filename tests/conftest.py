"""Shared fixtures: torch on one thread (2 shared cores), tiny checkpoints built once per machine."""

from __future__ import annotations

import os

import pytest

os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")


def pytest_configure(config: pytest.Config) -> None:
    import torch

    torch.set_num_threads(1)


@pytest.fixture(scope="session")
def tiny_paths() -> dict[str, object]:
    from sprig.runtime.checkpoints import TINY_ARCHITECTURES, checkpoint_path

    return {name: checkpoint_path(name) for name in TINY_ARCHITECTURES}
