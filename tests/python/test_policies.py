"""Every policy registered in C++ (alloc::Policies, the one table) is documented and reachable from each
front end: bft.allocate, the replay, `bft replay --policy` and the manager's `--policy`; and the inputs
it declares are what bft.allocate takes by those names, and the manager says which it cannot supply
(CONTRIBUTING.md, "Where to add")."""

import argparse
import inspect
import json
import re
from pathlib import Path

import pytest

import bft
from bft import alloc, cli, sim
from bft._core import alloc as core
from bft.runtime import cli_options as runtime_cli
from bft.runtime.options import ManagerOptions

DOCS = Path(__file__).resolve().parents[2] / "docs" / "alloc.md"
TRACE = "time,node,state\n0,a,idle\n0,b,idle\n100,b,busy\n200,b,idle\n"
JOB = {
    "name": "j", "submit": 0, "min_nodes": 1, "max_nodes": 2, "work": 1e6, "scale_up_s": 5.0,
    "scale_down_s": 3.0, "nodes": [0, 1, 2], "throughput": [0.0, 10.0, 18.0],
}
POLICIES = [p.name for p in core.policies()]


def test_the_front_ends_list_the_registered_policies_in_order():
    assert POLICIES[0] == "exact"
    assert alloc.SOLVERS == sim.POLICIES == tuple(POLICIES)
    assert set(alloc.MILP_SOLVERS) == {p.name for p in core.policies() if p.solves_milp} == {"count_milp", "node_milp"}
    assert [kind.value for kind in alloc.SolverKind] == POLICIES
    with pytest.raises(ValueError, match=f"expected one of {', '.join(POLICIES)}"):
        alloc.policy_inputs("simplex")
    with pytest.raises(ValueError, match="unknown solver 'simplex'"):
        bft.allocate([JOB], [0, 1], solver="simplex")


@pytest.mark.parametrize("name", POLICIES)
def test_every_policy_is_documented(name):
    assert re.search(rf"`{name}`", DOCS.read_text()), f"docs/alloc.md does not mention `{name}`"


@pytest.mark.parametrize("name", POLICIES)
def test_every_declared_input_is_an_argument_of_allocate(name):
    arguments = inspect.signature(bft.allocate).parameters
    for field in alloc.policy_inputs(name):
        assert field in arguments, f"{name} reads {field}, which bft.allocate does not take"
    assert alloc.policy_inputs("lifetime_aware") == ("expected_idle_s",)
    assert alloc.policy_inputs("completion_aware") == ("remaining_samples",)
    assert alloc.policy_inputs(alloc.SolverKind[name.upper()]) == alloc.policy_inputs(name)


@pytest.mark.parametrize("name", POLICIES)
def test_every_policy_is_reachable_from_python(name):
    inputs = {"remaining_samples": [100.0], "expected_idle_s": [50.0, 60.0]}
    given = {field: inputs[field] for field in alloc.policy_inputs(name)}
    result = bft.allocate([JOB], [0, 1], solver=name, **given)
    assert result.solver == name
    assert result.nodes_after.tolist() in ([1], [2])
    assert bft.allocate([JOB], [0, 1], solver=alloc.SolverKind[name.upper()]).solver == name


@pytest.mark.parametrize("name", POLICIES)
def test_every_policy_is_reachable_from_the_replay(name):
    trace = sim.parse_trace(TRACE)
    jobs = sim.parse_jobs(json.dumps(JOB))
    summary = sim.replay(trace, jobs, name, end_s=300).summary
    assert summary["policy"] == name and summary["samples_done"] > 0


@pytest.mark.parametrize("name", POLICIES)
def test_every_policy_is_offered_by_bft_replay(name, capsys):
    with pytest.raises(SystemExit):
        cli.main(["replay", "--help"])
    assert name in capsys.readouterr().out
    assert cli._parse_policies([name]) == [name]


@pytest.mark.parametrize("name", POLICIES)
def test_every_policy_is_accepted_by_the_manager(name):
    sub = argparse.ArgumentParser(prog="bft").add_subparsers(dest="command")
    runtime_cli.add_parsers(sub)
    assert name in sub.choices["manager"].format_help()
    ManagerOptions(policy=name).check()


@pytest.mark.parametrize("name", POLICIES)
def test_the_manager_says_which_declared_inputs_it_cannot_supply(name, tmp_path):
    from bft.runtime.decide.curvebook import CurveBook
    from bft.runtime.decide.decider import Decider
    from bft.runtime.statedb.store import StateStore
    from runtime_util import make_run

    store = StateStore(tmp_path / "state.db")
    try:
        book = CurveBook(store, warmup_s=0.0, scale_up_s=5.0, scale_down_s=5.0)
        decider = Decider(book, store, policy=name, tfwd_s=10.0, max_jobs=10, curve_change=0.15)
        runs = [make_run(store, "job", max_nodes=2)]
        for _ in range(2):
            decider.decide(decider.admitted(runs), ["n0", "n1"], 0.0)
        logged = [(e["policy"], e["inputs"]) for e in store.events(kinds=("policy_inputs_missing",))]
    finally:
        store.close()
    # The manager knows each job's remaining samples; it does not predict how long its nodes stay idle.
    missing = [field for field in alloc.policy_inputs(name) if field != "remaining_samples"]
    assert logged == ([(name, missing)] if missing else [])
