"""docs/runtime.md's commands as a new user copies them: every file they read exists (the repository's
own, and the real data of ../shared/data beside the checkout), and the trace-driven manager command
runs as written, from the checkout's root."""

from __future__ import annotations

import re
import shlex
from pathlib import Path
from typing import List, Tuple

import pytest

from runtime_util import REPO, ManagerHarness

DOCS = REPO / "docs" / "runtime.md"
# Flags whose value a command writes, not reads.
OUTPUT_FLAGS = ("--csv", "--png", "--out", "--metrics-textfile", "--curve-out")
SHARED = "../shared/data/"


def doc_commands() -> List[Tuple[int, List[str]]]:
    """(line, argv) of every `bft ...` command of the page: inline code, and lines of code blocks
    (fenced or indented, continuation backslashes joined), without a trailing comment or '&'."""
    text = DOCS.read_text()
    found = [(text.count("\n", 0, m.start()) + 1, m.group(1)) for m in re.finditer(r"`(bft [^`]+)`", text)]
    lines = text.splitlines()
    fenced, k = False, 0
    while k < len(lines):
        if lines[k].startswith("```"):
            fenced = not fenced
        elif (fenced or lines[k].startswith("    ")) and lines[k].strip().startswith("bft "):
            first, command = k + 1, lines[k].strip()
            while command.endswith("\\") and k + 1 < len(lines):
                k += 1
                command = command[:-1] + " " + lines[k].strip()
            found.append((first, command))
        k += 1
    return [(line, shlex.split(command.split(" #")[0].rstrip(" &"))) for line, command in found]


def files_read(argv: List[str]) -> List[str]:
    """The files a command names that it reads (a script, a trace, a workload, a config)."""
    return [t for k, t in enumerate(argv) if re.search(r"\.(py|csv|csv\.gz|jsonl|toml)$", t)
            and not (k > 0 and argv[k - 1] in OUTPUT_FLAGS)]


def test_the_runtime_docs_commands_read_files_of_the_repository_that_exist():
    named = [(line, f) for line, argv in doc_commands() for f in files_read(argv) if not f.startswith(SHARED)]
    assert named, "no command of docs/runtime.md names a file: the parsing is broken"
    missing = [(line, f) for line, f in named if not (REPO / f).is_file()]
    assert not missing, f"docs/runtime.md names files that are not in the repository (line, file): {missing}"


def test_the_runtime_docs_commands_name_real_data_that_exists(shared_data):
    named = [(line, f) for line, argv in doc_commands() for f in files_read(argv) if f.startswith(SHARED)]
    assert named, "docs/runtime.md names no file of ../shared/data: this test checks nothing"
    missing = [(line, f) for line, f in named if not (shared_data / f[len(SHARED):]).is_file()]
    assert not missing, f"docs/runtime.md names data that ../shared/data lacks (line, file): {missing}"


@pytest.mark.runtime
def test_the_trace_driven_manager_command_runs_as_written(shared_data, tmp_path, monkeypatch):
    """docs/runtime.md's `bft manager --local-trace ../shared/data/... --local-start 72000`, run from
    the checkout's root as written (with a state directory of its own): nodes of the trace join."""
    pytest.importorskip("torch", reason="the manager needs PyTorch (./dev.sh installs torch==2.13.0)")
    (line, argv), = [(n, a) for n, a in doc_commands() if a[:2] == ["bft", "manager"] and "--local-trace" in a
                     and "--local-emulate" not in a]
    monkeypatch.chdir(REPO)  # the page's relative paths are the checkout root's
    harness = ManagerHarness(Path(tmp_path))
    try:
        proc = harness.start(*argv[2:])
        harness.wait(lambda s: len(s["nodes"]["pool"]) > 0, 120, f"docs/runtime.md:{line}'s trace to give nodes",
                     proc=proc)
        harness.stop(proc)
    finally:
        harness.close()
