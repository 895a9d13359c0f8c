"""What machine a comparison ran on: the CPU model, the ISA flags that decide which kernels run, the kernel
overrides set in the environment, and the kernels sprig picks in this process."""

from __future__ import annotations

import os
import platform
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

# /proc/cpuinfo flags that change which kernels sprig, llama.cpp or torch can use (x86, then Arm).
ISA_FLAGS = ("avx2", "fma", "f16c", "avx512f", "avx512bw", "avx512_vnni", "avx512_bf16", "avx_vnni", "amx_tile",
             "amx_bf16", "amx_int8", "asimd", "sve", "sve2", "bf16", "i8mm")
KERNEL_ENV = ("SPRIG_AMX", "SPRIG_CPU_ISA", "ONEDNN_MAX_CPU_ISA", "SPRIG_NATIVE_KERNELS")


@dataclass(frozen=True)
class CpuInfo:
    """The CPU model and the flags of ISA_FLAGS it has (in ISA_FLAGS order)."""

    model: str
    flags: tuple[str, ...] = field(default_factory=tuple)

    def to_dict(self) -> dict[str, Any]:
        return {**asdict(self), "flags": list(self.flags)}


def parse_cpuinfo(text: str, fallback_model: str = "") -> CpuInfo:
    """The first processor's model and ISA flags from /proc/cpuinfo text (x86 `flags`, Arm `Features`)."""
    fields: dict[str, str] = {}
    for line in text.splitlines():
        key, _, value = line.partition(":")
        fields.setdefault(key.strip(), value.strip())  # the first processor's block comes first
    present = set((fields.get("flags") or fields.get("Features") or "").split())
    return CpuInfo(fields.get("model name") or fallback_model, tuple(f for f in ISA_FLAGS if f in present))


def cpu_info() -> CpuInfo:
    """This machine's CPU (model from `platform` where /proc/cpuinfo has none, as on most Arm boards)."""
    fallback = platform.processor() or platform.machine()
    try:
        return parse_cpuinfo(Path("/proc/cpuinfo").read_text(), fallback)
    except OSError:
        return CpuInfo(fallback)


def kernel_env(environ: dict[str, str] | None = None) -> dict[str, str]:
    """The kernel overrides that are set (an "AMX forced off" run shows SPRIG_AMX=0)."""
    env = os.environ if environ is None else environ
    return {k: env[k] for k in KERNEL_ENV if k in env}


def local_kernels() -> dict[str, str]:
    """What sprig's kernels pick in this process (the servers inherit the same environment)."""
    try:
        from sprig.kernels.cpu_gemm import vec_isa
        from sprig.kernels.cpu_native import amx_available
    except ImportError as e:  # no torch or no kernel module: say so rather than fail the run
        return {"error": str(e)}
    isa = vec_isa()
    return {"vec_isa": "none" if isa is None else isa.name.lower(),
            "amx_available": str(amx_available())}


def machine_line(cpu: CpuInfo) -> str:
    """CPU model, cores and memory in one line."""
    try:
        mem = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") / 2**30
    except (OSError, ValueError):
        mem = float("nan")
    return f"{cpu.model}, {os.cpu_count()} cores, {mem:.0f} GiB RAM, {platform.system()} {platform.release()}"


def machine_facts() -> dict[str, Any]:
    """Everything above, for compare.json."""
    cpu = cpu_info()
    return {"machine": machine_line(cpu), "cpu": cpu.to_dict(), "kernel_env": kernel_env(),
            "local_kernels": local_kernels()}
