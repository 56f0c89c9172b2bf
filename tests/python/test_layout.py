"""CONTRIBUTING.md's layout table stays true: it has a row for every top folder of the repository
and every package of python/bft, and every path it names exists."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]


def _layout_paths():
    text = (REPO / "CONTRIBUTING.md").read_text()
    table = text[text.index("## Layout"):].split("\n\n", 2)[1]
    return [m.group(1) for m in re.finditer(r"^\| `([^`]+)` \|", table, re.M)]


def _tracked_top_folders():
    files = subprocess.run(["git", "ls-files"], cwd=REPO, capture_output=True, text=True, check=True).stdout
    return sorted({f.split("/")[0] + "/" for f in files.split() if "/" in f})


def test_the_layout_table_has_a_row_for_every_top_folder_and_python_package():
    rows = set(_layout_paths())
    packages = sorted(f"{p.parent.relative_to(REPO)}/" for p in (REPO / "python" / "bft").rglob("__init__.py"))
    missing = [p for p in [*_tracked_top_folders(), *packages] if p not in rows]
    assert not missing, f"CONTRIBUTING.md's layout table has no row for {missing}"


def test_every_path_of_the_layout_table_exists():
    gone = [p for p in _layout_paths() if not (REPO / p).exists()]
    assert not gone, f"CONTRIBUTING.md's layout table names paths that do not exist: {gone}"
