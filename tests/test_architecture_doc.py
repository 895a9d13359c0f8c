"""docs/architecture.md stays true: every file, folder, class and function it names exists, and the numbers it
states about the path of a chat completion are the counts of what that section lists."""

from __future__ import annotations

import builtins
import fnmatch
import os
import re
from functools import cache
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
DOC = (ROOT / "docs" / "architecture.md").read_text()
CODE = re.compile(r"`([^`\n]+)`")
PATH = re.compile(r"^[\w./*-]+(\.py|\.c|\.h|/)$")
# A dotted name or a call as code mentions it: `EngineCore.step()`, `Scheduler.remove`, `make_requests`.
NAME = re.compile(r"^([A-Za-z_]\w*)(\.[A-Za-z_]\w*)*(\(\))?$")
SKIPPED_DIRS = {".git", ".venv", "build", "__pycache__"}
WORDS = {"free", "alloc", "node", "pages", "code", "param", "version", "tools", "fork", "function", "gen", "select",
         "sprig", "transformers", "jsonschema", "residency", "abort", "return_logprob", "sampling_params",
         "response_format"}  # plain words and field names of the prose, not definitions to look up


EXTERNAL = {*dir(builtins), "asyncio", "loop", "posix_fallocate"}  # Python's and the OS's names, not sprig's


@cache
def _source_files() -> list[Path]:
    files = []
    for folder, dirs, names in os.walk(ROOT):
        dirs[:] = [d for d in dirs if d not in SKIPPED_DIRS and not d.startswith(".")]
        files.extend(Path(folder, n) for n in names)
    return files


@cache
def _python_source() -> str:
    return "\n".join(p.read_text(errors="replace") for p in _source_files() if p.suffix == ".py")


def _path_exists(name: str) -> bool:
    """`name` as the map writes it: from the root, from runtime/ (`engine/core.py`), or a bare file name."""
    if name.endswith("/"):  # a folder: from the root, from runtime/, or by its name within its room (`csrc/`)
        folders = {str(p.parent.relative_to(ROOT)) for p in _source_files()}
        return any(f == name.rstrip("/") or f.endswith("/" + name.rstrip("/")) for f in folders)
    if "/" in name:
        return any(_matches(p, f"{base}/{name}") for base in ("", "runtime") for p in _relative_files())
    return any(_matches(p, name) for p in (f.name for f in _source_files()))


@cache
def _relative_files() -> list[str]:
    return [str(p.relative_to(ROOT)) for p in _source_files()]


def _matches(path: str, pattern: str) -> bool:
    return fnmatch.fnmatchcase(path, pattern.lstrip("/"))


def _defined(identifier: str) -> bool:
    """A class, function, attribute, module or counter key of that name exists in sprig's code."""
    if identifier in {p.stem for p in _source_files()}:
        return True
    pattern = (rf"(\b(class|def)\s+{identifier}\b)|(^\s*{identifier}\s*[:=])|(\bself\.{identifier}\s*[:=])"
               rf"|([\"']{identifier}[\"'])")
    return re.search(pattern, _python_source(), re.M) is not None


def test_every_file_and_folder_the_map_names_exists():
    named = {m for m in CODE.findall(DOC) if PATH.match(m) and not m.startswith(("test_", "tests/"))}
    missing = sorted(n for n in named if not _path_exists(n))
    assert not missing, f"docs/architecture.md names files that do not exist: {missing}"


def test_every_class_and_function_the_map_names_is_defined():
    names = set()
    for mention in CODE.findall(DOC):
        m = NAME.match(mention)
        if m and not PATH.match(mention) and mention not in WORDS and ("." in mention or "_" in mention
                                                                         or mention[0].isupper()):
            parts = mention.removesuffix("()").split(".")
            if parts[0] not in EXTERNAL:
                names.update(parts)
    missing = sorted(n for n in names if not _defined(n) and not n.isupper())
    assert not missing, f"docs/architecture.md names code that is not defined anywhere: {missing}"


def _section(title: str) -> str:
    start = DOC.index(f"## {title}")
    end = DOC.find("\n## ", start + 1)
    return DOC[start:end if end > 0 else None]


def test_the_request_path_counts_what_it_lists():
    path = _section("The path of one chat completion")
    files = {m for m in CODE.findall(path) if PATH.match(m) and m.endswith((".py", ".c"))}
    stated = re.search(r"(\d+) files", path)
    assert stated and int(stated.group(1)) == len(files), (stated and stated.group(0), sorted(files))
    hops = re.search(r"(\w+) thread hops in all: ([^.]+)\.", path)
    assert hops, "the section states how many thread hops a request takes"
    numbers = {"one": 1, "two": 2, "three": 3, "four": 4, "five": 5, "six": 6}
    assert numbers[hops.group(1).lower()] == hops.group(2).count("→"), hops.group(0)
