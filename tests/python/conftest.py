"""Shared pytest fixtures for the libbft suite."""

from pathlib import Path

import pytest

from bft.runtime.statedb.store import StateStore
from runtime_util import ManagerHarness

# ../shared/data beside the checkout holds real traces and workloads (never copied into the repo).
SHARED_DATA = Path(__file__).resolve().parents[2].parent / "shared" / "data"


@pytest.fixture(scope="session")
def shared_data() -> Path:
    """The real-data directory; tests that need it skip with a clear message when it is absent."""
    if not SHARED_DATA.is_dir():
        pytest.skip(f"real data not found at {SHARED_DATA} (expected ../shared/data beside the checkout)")
    return SHARED_DATA


@pytest.fixture
def store(tmp_path):
    """A fresh state database (the manager's store) in tmp_path, closed afterwards."""
    s = StateStore(tmp_path / "state.db")
    yield s
    s.close()


@pytest.fixture
def harness(tmp_path, request):
    """A real `bft manager` in tmp_path; everything it started is stopped afterwards, pass or fail.
    A failed test prints what its jobs went through (CI keeps only the output)."""
    pytest.importorskip("torch", reason="the runtime tests need PyTorch (./dev.sh installs torch==2.13.0)")
    h = ManagerHarness(tmp_path)
    try:
        yield h
    finally:
        report = getattr(request.node, "rep_call", None)
        if report is not None and report.failed:
            print(h.diagnosis())
        h.close()


@pytest.hookimpl(wrapper=True, tryfirst=True)
def pytest_runtest_makereport(item, call):
    """Keeps each phase's report on the test item, so that a fixture's teardown knows the outcome."""
    report = yield
    setattr(item, f"rep_{report.when}", report)
    return report


def pytest_collection_modifyitems(items):
    """Under pytest-xdist (./dev.sh test runs two processes) every Slurm test goes to one process:
    its test clusters are per session or module, and one at a time is what they were written for."""
    for item in items:
        if item.get_closest_marker("slurm"):
            item.add_marker(pytest.mark.xdist_group("slurm"))
