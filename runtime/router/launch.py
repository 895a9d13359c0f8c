"""Start local `sprig serve` replicas for `sprig serve --dp-size N` and the router benchmark, and stop them."""

from __future__ import annotations

import argparse
import contextlib
import os
import subprocess
import sys
import threading
import time
from dataclasses import dataclass

from sprig.runtime.errors import SprigError

STARTUP_TIMEOUT_S = 300.0
STOP_TIMEOUT_S = 30.0
READY_MARK = "sprig: serving "


class LaunchError(SprigError, RuntimeError):
    """A replica exited or never became ready (its own one-line error says why)."""


@dataclass(eq=False)
class Replica:
    """One `sprig serve` child process and the URL it serves at."""

    index: int
    proc: subprocess.Popen[str]
    url: str = ""

    @property
    def alive(self) -> bool:
        return self.proc.poll() is None


# A replica gets SIGTERM (and drains) when the process that started it dies, even by SIGKILL: no orphan replicas.
REPLICA_ENTRY = (
    "import ctypes, os, signal, sys\n"
    "ctypes.CDLL(None).prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG\n"
    "os.getppid() == int(sys.argv[1]) or sys.exit(1)\n"
    "from sprig.runtime.cli import main\n"
    "sys.exit(main(sys.argv[2:]))\n"
)


def serve_command(serve_args: list[str]) -> list[str]:
    """The command line of one replica on a free loopback port, tied to this process's lifetime (call
    `launch_replicas` from a thread that lives as long as the replicas: Linux signals them when it ends)."""
    return [sys.executable, "-c", REPLICA_ENTRY, str(os.getpid()), "serve", *serve_args, "--host", "127.0.0.1",
            "--port", "0"]


def launch_replicas(commands: list[list[str]], timeout: float = STARTUP_TIMEOUT_S) -> list[Replica]:
    """Start every command at once (they load in parallel) and wait until each prints where it serves."""
    replicas = [Replica(i, subprocess.Popen(cmd, stderr=subprocess.PIPE, text=True)) for i, cmd in enumerate(commands)]
    try:
        deadline = time.monotonic() + timeout
        for replica in replicas:
            replica.url = _wait_ready(replica, deadline)
            _forward_stderr(replica)
    except BaseException:
        stop_replicas(replicas)
        raise
    return replicas


def _wait_ready(replica: Replica, deadline: float) -> str:
    assert replica.proc.stderr is not None
    seen: list[str] = []
    while time.monotonic() < deadline:
        line = replica.proc.stderr.readline()
        if line.startswith(READY_MARK):
            return line.split(" at ", 1)[1].split()[0]
        if line:
            seen.append(line.rstrip())
        elif replica.proc.poll() is not None:
            break
    tail = "; ".join(seen[-3:]) or "no output"
    raise LaunchError(f"replica {replica.index} did not start ({tail})")


def _forward_stderr(replica: Replica) -> None:
    """Keep draining the replica's stderr (a full pipe would block it), prefixed with its index."""

    def pump() -> None:
        assert replica.proc.stderr is not None
        for line in replica.proc.stderr:
            sys.stderr.write(f"[replica {replica.index}] {line}")

    threading.Thread(target=pump, name=f"sprig-replica{replica.index}-stderr", daemon=True).start()


def stop_replicas(replicas: list[Replica], timeout: float = STOP_TIMEOUT_S) -> None:
    """SIGTERM every replica (they drain), then SIGKILL whatever is left after `timeout`."""
    for r in replicas:
        if r.alive:
            r.proc.terminate()
    deadline = time.monotonic() + timeout
    for r in replicas:
        with contextlib.suppress(subprocess.TimeoutExpired):
            r.proc.wait(max(0.0, deadline - time.monotonic()))
        if r.alive:
            r.proc.kill()
            r.proc.wait()


def args_to_argv(parser: argparse.ArgumentParser, args: argparse.Namespace, skip: set[str]) -> list[str]:
    """Re-create the command-line flags of `args` that differ from the parser's defaults (minus `skip` dests)."""
    argv: list[str] = []
    for action in parser._actions:
        if not action.option_strings or action.dest in skip or action.dest == "help":
            continue
        value = getattr(args, action.dest, action.default)
        if value == action.default:
            continue
        flag = action.option_strings[-1] if action.option_strings[-1].startswith("--") else action.option_strings[0]
        if isinstance(action, argparse._StoreTrueAction):
            argv.append(flag)
        elif isinstance(value, (list, tuple)):
            argv += [flag, *map(str, value)]
        else:
            argv += [flag, str(value)]
    return argv


def replica_args(base: list[str], index: int, device: str, tp_size: int) -> list[str]:
    """One replica's flags: GPU replicas take consecutive groups of `tp_size` devices."""
    if not device.startswith("cuda"):
        return base
    first = (int(device.split(":", 1)[1]) if ":" in device else 0) + index * tp_size
    return [*base, "--device", f"cuda:{first}"]
