"""Shared pytest fixtures for the libbft suite."""

from pathlib import Path

import pytest

# ../shared/data beside the checkout holds real traces and workloads (never copied into the repo).
SHARED_DATA = Path(__file__).resolve().parents[2].parent / "shared" / "data"


@pytest.fixture(scope="session")
def shared_data() -> Path:
    """The real-data directory; tests that need it skip with a clear message when it is absent."""
    if not SHARED_DATA.is_dir():
        pytest.skip(f"real data not found at {SHARED_DATA} (expected ../shared/data beside the checkout)")
    return SHARED_DATA
