"""dev.sh's own inputs: a bad value is one line and exit 2, before anything is installed or built."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]


@pytest.mark.parametrize("workers", ["0", "two", "-1", "1.5"])
def test_a_bad_test_worker_count_is_one_line_and_exit_2_before_any_build(workers):
    r = subprocess.run([str(REPO / "dev.sh"), "test"], env={**os.environ, "BFT_TEST_WORKERS": workers},
                       capture_output=True, text=True, timeout=30)
    assert r.returncode == 2
    assert r.stdout == ""
    assert r.stderr.splitlines() == [f"dev.sh: BFT_TEST_WORKERS must be a positive whole number, got '{workers}'"]
