"""A job's worker processes, the I/O half of the job lifecycle: started on their nodes (from a warm
standby or through the node source), each recorded in the state database before it exists (a
restarted manager finds it), signalled, killed, and found again by a restarted manager; and the
in-place jobs' configurations in the keeper's store, which the workers read.

What to start and when, and what an exit means, is the lifecycle's and its resize machine's
(:mod:`.lifecycle`, :mod:`.resize`); this part only carries it out.
"""

from __future__ import annotations

import signal
from pathlib import Path
from typing import Any, Callable, Dict, Iterable, List, Optional, Tuple

from ..sources.base import NodeSource, SourceError
from ..statedb.store import StateStore
from .files import JobFiles
from .launcher import LaunchSpec, default_python, job_environment
from .processes import AdoptedProcess, signal_processes, tagged_processes, terminate_tagged
from .resize import Configurations, method
from .runs import JobRun, NodeProcs
from .standbys import Standbys


class Workers:
    def __init__(self, *, files: JobFiles, store: StateStore, source: NodeSource, identity: str,
                 checkpoint_grace_s: float, inplace_timeout_s: float, standby: bool,
                 secret_of: Callable[[str], bytes], procs_per_node: int = 1):
        """`secret_of(job)`: the job's secret, which its connection to the keeper's store is admitted with;
        `procs_per_node`: the manager's (the standbys each node gets)."""
        self.files = files
        self.store = store
        self.source = source
        self.identity = identity
        self.checkpoint_grace_s = checkpoint_grace_s
        self.inplace_timeout_s = inplace_timeout_s
        self.store_address = ""  # set once the keeper's endpoints are known (keeper_started)
        self.report_address = ""
        self.secret_of = secret_of
        self.keeper_alive: Callable[[], bool] = lambda: True  # the keeper's (keeper_started)
        self._configurations: Optional[Configurations] = None
        # Warm standbys on the pool's nodes that run nothing of a job (for methods whose workers run the
        # script itself, as a standby does).
        self.standbys = (Standbys(source=source, identity=identity, python=default_python(),
                                  state_dir=files.state_dir, log_event=store.log_event,
                                  procs_per_node=procs_per_node) if standby else None)

    def keeper_started(self, store_address: str, report_address: str,
                       alive: Callable[[], bool] = lambda: True) -> None:
        """A keeper (a first one, or the replacement of one that died) serves the jobs' stores and
        reports: connections to the old one's store are dropped, so the next use reaches the new one.
        `alive()`: whether it still runs."""
        self.store_address, self.report_address, self.keeper_alive = store_address, report_address, alive
        if self._configurations is not None:
            self._configurations.close()
            self._configurations = None

    @property
    def configurations(self) -> Configurations:
        """In-place jobs' configurations in the keeper's store (connected on first use)."""
        if self._configurations is None:
            self._configurations = Configurations(self.store_address, self.inplace_timeout_s, self.secret_of,
                                                  keeper_gone=lambda: not self.keeper_alive())
        return self._configurations

    def read_arrivals(self, run: JobRun) -> List[str]:
        """The job's newcomers on their way that have announced themselves in the store, each of its
        processes with the ticket it was started with (its process row: not an earlier process's)."""
        arrived = []
        for node in run.machine.pending:
            agent = run.node_procs.get(node)
            try:
                if agent is not None and self.configurations.announced(run.id, node, [str(r) for r in agent.rows]):
                    arrived.append(node)
            except Exception:  # noqa: BLE001 - the store is unreachable: the newcomer's deadline decides
                break
        return arrived

    def read_beats(self, run: JobRun) -> Optional[Dict[Tuple[str, int], str]]:
        """The heartbeats of the job's workers that run and have joined: (node, pid) -> value; None if
        the store is unreachable."""
        m = run.machine
        processes = [(n, k) for n in m.live if n in m.members and n in run.node_procs
                     for k in range(len(run.node_procs[n].procs))]
        try:
            values = self.configurations.beats(run.id, processes)
        except Exception:  # noqa: BLE001 - the keeper is gone: judged afresh once it is back
            return None
        return {(n, run.node_procs[n].procs[k].pid): v for (n, k), v in values.items()}

    def warm_nodes(self) -> List[str]:
        """The idle nodes with a warm standby (none without standbys)."""
        return self.standbys.nodes() if self.standbys is not None else []

    def forget(self, job: str) -> None:
        """The job has ended: its connection to the store is closed."""
        if self._configurations is not None:
            self._configurations.forget(job)

    def start(self, run: JobRun, nodes: List[str], joining: bool = False) -> Dict[str, str]:
        """Starts the job's workers on `nodes` (its method's processes per node: one torchrun agent, or
        N in-place workers); the nodes where not all could start, with why (whatever started there is
        killed: a node is one member). Their process rows are recorded, in one commit, before any of
        them exists; their pids, or their failures, in one more. `joining`: newcomers of an in-place
        grow, each given its process row as the ticket it announces itself with."""
        row = run.row
        how = method(run.method)
        job_dir = self.files.job_dir(row.id)
        secret_file = self.files.write_secret(row.id, row.secret)
        count = how.processes(row.procs_per_node)
        with self.store.transaction():
            rows = {node: [self.store.add_proc(row.id, row.generation, node, k) for k in range(count)]
                    for node in nodes}
        started: Dict[str, List[Any]] = {}
        from_standby = set()
        failed: Dict[str, str] = {}
        low, high, restarts = how.node_range(row.min_nodes, row.max_nodes, len(run.target))
        for node in nodes:
            spec = LaunchSpec(
                job=row.id, generation=row.generation, script=row.script, args=row.args, python=row.python,
                node=node, node_address=self.source.address(node), store_address=self.store_address,
                min_nodes=low, max_nodes=high, max_restarts=restarts, log_dir=job_dir / "workers",
                procs_per_node=row.procs_per_node)
            argv = how.argv(spec)
            envs = []
            for k in range(count):
                exit_file = how.exit_file(job_dir, row.generation, node, k)
                exit_file.unlink(missing_ok=True)  # an earlier worker's on this node
                env = job_environment(job=row.id, generation=row.generation, node=node, identity=self.identity,
                                      report_address=self.report_address, secret_file=secret_file,
                                      checkpoint_dir=job_dir / "checkpoint", work=row.work,
                                      checkpoint_grace_s=self.checkpoint_grace_s, configuration=row.configuration,
                                      exit_file=exit_file,
                                      procs_per_node=row.procs_per_node)
                env.update(how.environment(spec, self.inplace_timeout_s, k, rows[node][k] if joining else None))
                envs.append(env)
            standbys = how.standbys_for(self.standbys, node, row.python, count) if self.standbys is not None else None
            if standbys is not None:
                if standbys and all(self.standbys.assign(proc, argv=argv, env=env, cwd=Path(row.cwd),
                                                         log_path=job_dir / "output.log")
                                    for proc, env in zip(standbys, envs)):
                    started[node] = standbys
                    from_standby.add(node)
                    continue
                # One of them was gone: the node starts afresh, and those already given the job must not run it.
                signal_processes([-proc.pid for proc in standbys], signal.SIGKILL)
                self.standbys.discard(standbys)
            started[node] = []
            try:
                for env in envs:
                    started[node].append(self.source.launch(node, argv, env, job_dir / "output.log", cwd=Path(row.cwd)))
            except (SourceError, OSError) as e:
                failed[node] = str(e)
                signal_processes([-proc.pid for proc in started.pop(node)], signal.SIGKILL)
        with self.store.transaction():
            for node, procs in started.items():
                for row_id, proc in zip(rows[node], procs):
                    self.store.set_proc_pid(row_id, proc.pid)
                run.machine.attach(node, NodeProcs(job=row.id, node=node, procs=procs, rows=rows[node],
                                                   standby=node in from_standby))
            for node, error in failed.items():
                for row_id in rows[node]:
                    self.store.end_proc(row_id, None)
                self.store.log_event("launch_failed", job=row.id, node=node, error=error)
        return failed

    def find_again(self, run: JobRun, procs: List[Any]) -> Dict[str, NodeProcs]:
        """The workers of the job's current generation that a previous manager started, from its open
        process rows `procs` (alive or not: the caller judges), by node; a node whose rows are not
        all there (its method's processes per node, local ranks 0..N-1) is left out."""
        row = run.row
        how = method(run.method)
        job_dir = self.files.job_dir(row.id)
        by_node: Dict[str, Dict[int, Any]] = {}
        for p in procs:
            if p["generation"] == row.generation and p["pid"]:
                by_node.setdefault(p["node"], {})[p["local_rank"]] = p
        agents = {}
        count = how.processes(row.procs_per_node)
        for node, ranks in by_node.items():
            if sorted(ranks) != list(range(count)):
                continue
            adopted = [AdoptedProcess(pid=ranks[k]["pid"], identity=self.identity, job=row.id, node=node,
                                    exit_file=how.exit_file(job_dir, row.generation, node, k)) for k in range(count)]
            agents[node] = NodeProcs(job=row.id, node=node, procs=adopted, rows=[ranks[k]["id"] for k in range(count)],
                                     standby=adopted[0].standby)
        return agents

    def adopted(self, run: JobRun, agents: Dict[str, NodeProcs]) -> None:
        """The job's workers are `agents` (those find_again found, all alive, and the machine adopted):
        a restarted manager's."""
        for node, agent in agents.items():
            run.machine.attach(node, agent)

    def carried_over(self, run: JobRun, nodes: Iterable[str]) -> None:
        """The job's workers on `nodes` stay, now of its new generation (in place, committed on its row):
        their process rows are ended and recorded again under it, in one transaction."""
        row = run.row
        with self.store.transaction():
            for node in nodes:
                agent = run.node_procs[node]
                for k, (old, pid) in enumerate(zip(agent.rows, agent.pids)):
                    self.store.end_proc(old, None)
                    agent.rows[k] = self.store.add_proc(row.id, row.generation, node, k)
                    self.store.set_proc_pid(agent.rows[k], pid)

    def exited(self, run: JobRun, node: str) -> None:
        """The job's workers on `node` have exited (reaped)."""
        run.machine.attach(node, None)

    def terminate(self, run: JobRun, nodes: Iterable[str]) -> None:
        """SIGTERM, once, to the job's workers on `nodes` (they checkpoint and exit)."""
        for node in nodes:
            agent = run.node_procs.get(node)
            if agent is None or agent.signalled:
                continue
            agent.signalled = True
            signal_processes([-pid for pid in agent.pids], signal.SIGTERM)

    def kill(self, agent: NodeProcs) -> None:
        """SIGKILL to a node's workers and whatever they started."""
        terminate_tagged(self.identity, 0.0, job=agent.job, node=agent.node)
        if agent.standby:  # no job tag: their own process groups (each leads its session)
            signal_processes([-pid for pid in agent.pids], signal.SIGKILL)

    def kill_strays(self, jobs: Iterable[str]) -> None:
        """SIGKILL to every process still tagged with one of `jobs`: a worker that outlived its agent
        (torchrun gives each its own session) must not train on. One scan of the host's processes."""
        signal_processes(tagged_processes(self.identity, jobs=jobs), signal.SIGKILL)
