"""sprig's C kernels build for Arm (every vector path is guarded by the ISA macros the compiler defines), so an Arm
machine gets the portable paths instead of a failed build. Needs the aarch64 cross compiler (Debian:
gcc-aarch64-linux-gnu); without it the test is skipped."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

from sprig.kernels import cpu_native

CROSS_CC = "aarch64-linux-gnu-gcc"


@pytest.mark.skipif(shutil.which(CROSS_CC) is None, reason=f"{CROSS_CC} (the aarch64 cross compiler) is not installed")
@pytest.mark.parametrize("march", ["armv8-a", "armv8.6-a+sve+bf16+i8mm"])
def test_the_kernels_compile_and_link_for_aarch64(tmp_path: Path, march: str):
    src = Path(cpu_native.__file__).parent / "csrc"
    flags = [f for f in cpu_native.FLAGS if f not in ("-march=native", "-shared")]
    objects = []
    for name in cpu_native.SOURCES:
        obj = tmp_path / f"{name}.o"
        proc = subprocess.run([CROSS_CC, *flags, f"-march={march}", "-c", str(src / name), "-o", str(obj)],
                              capture_output=True, text=True, timeout=300)
        assert proc.returncode == 0, proc.stderr
        objects.append(str(obj))
    lib = tmp_path / "libsprig_kernels.so"
    proc = subprocess.run([CROSS_CC, *flags, "-shared", *objects, "-o", str(lib), "-lm"], capture_output=True,
                          text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr
    symbols = subprocess.run(["nm", "-D", "--defined-only", str(lib)], capture_output=True, text=True).stdout
    assert all(f" {name}\n" in symbols for name in cpu_native.SIGNATURES)  # every kernel the wrappers call
