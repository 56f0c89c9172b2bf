"""One owner per fact of a running job: each field of JobRun (jobs/runs.py) is written by the one
module its OWNERS table names, nowhere else in the runtime or the benches (read from the source with
`ast`: no torch, no processes).

A write is an assignment (plain, augmented, annotated, unpacked) or a ``del`` of the field or of an item
of it, a mutating call on it (``run.last_seq.clear()``), or a ``setattr(run, "field", ...)``. Every
JobRun in the runtime is named ``run`` (a parameter, a loop variable, ``p.run``): the check reads the
writes to ``run.<field>``, and a companion test keeps that naming true.

The row's columns that mirror the job's resize machine (ROW_MIRRORS in jobs/runs.py: the generation,
the retries) are written only by that module's commits, read the same way from the writes to
``run.row.<column>`` and ``row.<column>`` (the runtime's name for a JobRow)."""

from __future__ import annotations

import ast
from pathlib import Path
from typing import Callable, Dict, Iterator, List, Set, Tuple

ROOT = Path(__file__).resolve().parents[2]
RUNTIME = ROOT / "python" / "bft" / "runtime"
RUNS = RUNTIME / "jobs" / "runs.py"
MUTATORS = {"append", "appendleft", "extend", "clear", "pop", "popitem", "popleft", "update", "setdefault",
            "remove", "discard", "add", "insert", "sort"}


def _sources() -> List[Path]:
    return sorted(RUNTIME.rglob("*.py")) + sorted((ROOT / "bench").glob("*.py"))


def _row_mirrors() -> List[str]:
    """ROW_MIRRORS, from runs.py."""
    for node in ast.parse(RUNS.read_text()).body:
        target = node.targets[0] if isinstance(node, ast.Assign) else None
        if isinstance(target, ast.Name) and target.id == "ROW_MIRRORS":
            return list(ast.literal_eval(node.value))
    return []


def _jobrun() -> Tuple[List[str], Dict[str, str]]:
    """JobRun's fields and its OWNERS table (field -> module path under python/bft/runtime), from runs.py."""
    tree = ast.parse(RUNS.read_text())
    fields: List[str] = []
    owners: Dict[str, str] = {}
    for node in tree.body:
        if isinstance(node, ast.ClassDef) and node.name == "JobRun":
            fields = [s.target.id for s in node.body if isinstance(s, ast.AnnAssign) and isinstance(s.target, ast.Name)]
        if isinstance(node, (ast.Assign, ast.AnnAssign)):
            target = node.targets[0] if isinstance(node, ast.Assign) else node.target
            if isinstance(target, ast.Name) and target.id == "OWNERS":
                owners = ast.literal_eval(node.value)
    return fields, owners


def _is_run(expr: ast.AST) -> bool:
    return (isinstance(expr, ast.Name) and expr.id == "run") or (isinstance(expr, ast.Attribute) and expr.attr == "run")


def _is_row(expr: ast.AST) -> bool:
    return (isinstance(expr, ast.Name) and expr.id == "row") or \
        (isinstance(expr, ast.Attribute) and expr.attr == "row" and _is_run(expr.value))


def _field(expr: ast.AST, holder: Callable[[ast.AST], bool] = _is_run) -> str:
    """The field of a `holder` (a JobRun: run.f, run.f[k]; run.f.x is not) that `expr` names or is an
    item of, else ''."""
    while isinstance(expr, ast.Subscript):
        expr = expr.value
    if isinstance(expr, ast.Attribute) and holder(expr.value):
        return expr.attr
    return ""


def _targets(node: ast.AST) -> Iterator[ast.AST]:
    if isinstance(node, (ast.Tuple, ast.List)):
        for elt in node.elts:
            yield from _targets(elt)
    elif isinstance(node, ast.Starred):
        yield from _targets(node.value)
    else:
        yield node


def _writes(tree: ast.AST, holder: Callable[[ast.AST], bool] = _is_run) -> Iterator[Tuple[str, int]]:
    """(field, line) for every write to a field of a `holder` (a JobRun named run)."""
    for node in ast.walk(tree):
        targets: List[ast.AST] = []
        if isinstance(node, ast.Assign):
            targets = [t for target in node.targets for t in _targets(target)]
        elif isinstance(node, (ast.AugAssign, ast.AnnAssign)):
            targets = [node.target]
        elif isinstance(node, ast.Delete):
            targets = [t for target in node.targets for t in _targets(target)]
        elif isinstance(node, ast.Call):
            f = node.func
            if isinstance(f, ast.Attribute) and f.attr in MUTATORS:
                targets = [f.value]
            elif isinstance(f, ast.Name) and f.id == "setattr" and len(node.args) >= 2 and holder(node.args[0]) \
                    and isinstance(node.args[1], ast.Constant):
                yield str(node.args[1].value), node.lineno
        for target in targets:
            name = _field(target, holder)
            if name:
                yield name, node.lineno


def writers() -> Dict[str, Set[str]]:
    """JobRun field -> the modules (relative to the repository) that write it."""
    fields, _ = _jobrun()
    found: Dict[str, Set[str]] = {f: set() for f in fields}
    for path in _sources():
        for name, _ in _writes(ast.parse(path.read_text())):
            if name in found:
                found[name].add(path.relative_to(ROOT).as_posix())
    return found


def test_every_field_of_a_running_job_has_one_owner_module():
    fields, owners = _jobrun()
    assert fields and sorted(owners) == sorted(fields), \
        f"OWNERS in jobs/runs.py must name an owner for each JobRun field: {sorted(set(fields) ^ set(owners))}"
    missing = [m for m in set(owners.values()) if not (RUNTIME / m).is_file()]
    assert not missing, f"OWNERS names modules that do not exist: {missing}"


def test_no_module_but_its_owner_writes_a_field_of_a_running_job():
    _, owners = _jobrun()
    strays = []
    for path in _sources():
        module = path.relative_to(RUNTIME).as_posix() if RUNTIME in path.parents else None
        for name, line in _writes(ast.parse(path.read_text())):
            if name in owners and module != owners[name]:
                strays.append(f"{path.relative_to(ROOT)}:{line} writes run.{name} (owner: {owners[name]})")
    assert not strays, "\n".join(strays)


def test_only_the_commits_of_runs_py_write_the_row_columns_that_mirror_the_machine():
    """The machine holds a running job's generation and retries; its row mirrors them, written (and
    stored) only by jobs/runs.py's commits when a transition of the machine commits."""
    mirrors = _row_mirrors()
    assert mirrors, "ROW_MIRRORS in jobs/runs.py names the row's columns that mirror the machine"
    strays = []
    for path in _sources():
        module = path.relative_to(RUNTIME).as_posix() if RUNTIME in path.parents else None
        for name, line in _writes(ast.parse(path.read_text()), _is_row):
            if name in mirrors and module != "jobs/runs.py":
                strays.append(f"{path.relative_to(ROOT)}:{line} writes the row's {name} "
                              "(only jobs/runs.py's commits may)")
    assert not strays, "\n".join(strays)


def test_the_check_finds_each_kind_of_write():
    """The check cannot pass by seeing nothing: each kind of write it reads is found."""
    source = """
run.a = 1
run.b += 1
x, run.c = 1, 2
run.d[k] = 1
del run.e[k]
run.f.clear()
p.run.g = 1
setattr(run, "h", 1)
run.i.j = 1
other.k = 1
"""
    assert sorted(name for name, _ in _writes(ast.parse(source))) == list("abcdefgh")
    rows = """
row.a += 1
run.row.b = 1
p.run.row.c = 1
setattr(row, "d", 1)
other.row.e = 1
run.f = 1
"""
    assert sorted(name for name, _ in _writes(ast.parse(rows), _is_row)) == list("abcd")


def test_every_job_run_in_the_runtime_is_named_run():
    """What keeps the check whole: a JobRun under another name would escape it. Parameters annotated
    JobRun, and the loop variables over the manager's active runs, are named run."""
    misnamed = []
    for path in _sources():
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.arg) and node.annotation is not None \
                    and ast.unparse(node.annotation) in ("JobRun", "Optional[JobRun]") and node.arg != "run":
                misnamed.append(f"{path.relative_to(ROOT)}:{node.lineno} {node.arg}")
            if isinstance(node, (ast.For, ast.comprehension)) and "active_runs" in ast.unparse(node.iter) \
                    and isinstance(node.target, ast.Name) and node.target.id != "run":
                misnamed.append(f"{path.relative_to(ROOT)}:{getattr(node, 'lineno', node.iter.lineno)} "
                                f"{node.target.id}")
    assert not misnamed, f"JobRuns not named run: {misnamed}"


# The facts of a running job that its resize machine alone holds (jobs/resize/): JobRun reads them
# through properties (run.target, run.node_procs), and nothing outside the package assigns them.
MACHINE_FACTS = ("target", "members", "generation", "retries", "workers", "procs", "phase")


def _machine_writes(tree: ast.AST) -> Iterator[Tuple[str, int]]:
    """(fact, line) for every write of an attribute named as a machine fact on anything but a row
    (a row's mirrored columns have their own check) or ``self`` (an object's own fields)."""
    def holder(expr: ast.AST) -> bool:
        return not _is_row(expr) and not (isinstance(expr, ast.Name) and expr.id == "self")
    for name, line in _writes(tree, holder):
        if name in MACHINE_FACTS:
            yield name, line


def test_only_the_resize_machine_writes_what_it_holds_of_a_running_job():
    """Target, members, generation, retries and the node -> process map live in the machine; the
    lifecycle tells it (place, start, attach, ...) and never assigns them, nor JobRun's views of them."""
    properties = [f.name for node in ast.parse(RUNS.read_text()).body
                  if isinstance(node, ast.ClassDef) and node.name == "JobRun"
                  for f in node.body if isinstance(f, ast.FunctionDef)
                  and any(ast.unparse(d) == "property" for d in f.decorator_list)]
    assert {"target", "node_procs"} <= set(properties)
    strays = []
    for path in _sources():
        if RUNTIME / "jobs" / "resize" in path.parents:
            continue
        tree = ast.parse(path.read_text())
        strays += [f"{path.relative_to(ROOT)}:{line} writes run.{name} (a view of the machine)"
                   for name, line in _writes(tree) if name in properties]
        strays += [f"{path.relative_to(ROOT)}:{line} writes a machine's {name}"
                   for name, line in _machine_writes(tree)]
    assert not strays, "\n".join(strays)


def test_the_machine_check_finds_each_kind_of_write():
    source = """
run.machine.target = []
m.members.append("n")
run.machine.workers[n].procs = p
machine.generation += 1
self.generation = 1
row.retries = 1
run.node_procs[n] = p
"""
    found = sorted(name for name, _ in _machine_writes(ast.parse(source)))
    assert found == ["generation", "members", "procs", "target"]
