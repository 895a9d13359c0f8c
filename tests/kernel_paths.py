"""pytest parameters for the code paths of sprig's C kernels: one per path, skipped where this build lacks it."""

from __future__ import annotations

from enum import IntEnum

import pytest

from sprig.kernels.cpu_native import native_kernels

needs_kernels = pytest.mark.skipif(native_kernels() is None, reason="sprig's C kernels are not built here")


def path_params(paths: type[IntEnum], best: IntEnum | None) -> list:
    """Each of `paths` as a parameter with its lowercase name as id, skipped above `best` (None: no kernels)."""
    return [pytest.param(p, id=p.name.lower(), marks=pytest.mark.skipif(
        best is None or p > best, reason=f"this build of the kernels has no {p.name.lower()} path (CPU or compiler)"))
        for p in paths]
