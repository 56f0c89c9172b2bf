"""bft.train.ElasticState outside the manager, and the in-place workers' wrapper (bft.train.run).

The in-place resizes themselves are tested end to end in test_runtime_inplace.py.
"""

from __future__ import annotations

import subprocess
import sys
import time

import pytest

from runtime_util import free_port, python_env

torch = pytest.importorskip("torch", reason="bft.train.ElasticState needs PyTorch")

import bft.train as bt  # noqa: E402


def _parts(seed: int):
    torch.manual_seed(seed)
    model = torch.nn.Linear(4, 2)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    return model, optimizer, bt.ElasticSampler(100, seed=3)


def test_state_goes_on_from_its_checkpoint_under_plain_python(tmp_path, monkeypatch):
    monkeypatch.setenv("BFT_CHECKPOINT_DIR", str(tmp_path))
    model, optimizer, sampler = _parts(0)
    state = bt.ElasticState(model=model, optimizer=optimizer, sampler=sampler, checkpoint_every_s=-1, epoch=0)
    model(torch.ones(3, 4)).sum().backward()
    optimizer.step()
    sampler.record(40)
    state.epoch += 2
    assert state.commit() is False  # alone, nothing to agree on; no periodic checkpoint (-1)
    assert not (tmp_path / "checkpoint.pt").exists()
    state.save()

    model2, optimizer2, sampler2 = _parts(1)
    state2 = bt.ElasticState(model=model2, optimizer=optimizer2, sampler=sampler2, epoch=0)
    assert state2.epoch == 2
    assert sampler2.samples == 40
    assert torch.equal(model2.weight, model.weight)
    momentum = [o.state_dict()["state"][0]["momentum_buffer"] for o in (optimizer, optimizer2)]
    assert momentum[0].equal(momentum[1])
    assert state2.ddp_model is model2  # alone: no DistributedDataParallel
    with pytest.raises(AttributeError):
        state2.missing  # noqa: B018 - only declared user fields are attributes


def test_periodic_checkpoint_is_written_by_commit(tmp_path, monkeypatch):
    monkeypatch.setenv("BFT_CHECKPOINT_DIR", str(tmp_path))
    model, optimizer, sampler = _parts(0)
    state = bt.ElasticState(model=model, optimizer=optimizer, sampler=sampler, checkpoint_every_s=0)
    sampler.record(7)
    state.commit()
    assert bt.resume()["sampler"]["samples"] == 7


@pytest.mark.parametrize("body, code", [("import sys; sys.exit(3)", 3), ("raise ValueError('x')", 1), ("pass", 0)])
def test_run_wrapper_exits_like_the_script_and_leaves_its_status(tmp_path, body, code):
    script = tmp_path / "s.py"
    script.write_text(body + "\n")
    status = tmp_path / "status"
    env = {**python_env(), "BFT_AGENT_EXIT_FILE": str(status)}
    r = subprocess.run([sys.executable, "-m", "bft.train.run", str(script)], env=env, capture_output=True, text=True,
                       timeout=60)
    assert r.returncode == code, r.stderr
    assert status.read_text() == str(code)
    assert ("ValueError: x" in r.stderr) == (code == 1)


def test_the_backend_follows_the_device_unless_the_manager_names_one(monkeypatch):
    from bft.train.elastic import backend

    cpu, gpu = torch.device("cpu"), torch.device("cuda:0")  # a device object only: no GPU needed
    monkeypatch.delenv("BFT_DIST_BACKEND", raising=False)
    assert (backend(cpu), backend(gpu)) == ("gloo", "nccl")
    monkeypatch.setenv("BFT_DIST_BACKEND", "gloo")
    assert backend(gpu) == "gloo"  # ranks sharing a GPU
    for bad, device in (("nccl", cpu), ("mpi", gpu)):
        monkeypatch.setenv("BFT_DIST_BACKEND", bad)
        with pytest.raises(ValueError, match=f"BFT_DIST_BACKEND='{bad}'"):
            backend(device)


@pytest.mark.parametrize("nodes, gpus, node, expected", [(2, 2, "local-1", "1 default"),
                                                         (3, 2, "local-2", "0 gloo"),
                                                         (2, 1, "local-1", "0 gloo")])
def test_local_nodes_sharing_a_gpu_are_told_to_use_gloo(tmp_path, nodes, gpus, node, expected):
    """--local-gpus: node k sees GPU k mod N; where nodes outnumber GPUs, NCCL (one device per rank)
    cannot work, so the workers are told to use gloo on the GPU."""
    from bft.runtime.sources.local import LocalNodeSource

    source = LocalNodeSource("test-gpus", tmp_path, nodes=nodes, gpus=gpus)
    source.start(lambda event: None)
    show = "import os; print(os.environ['CUDA_VISIBLE_DEVICES'], os.environ.get('BFT_DIST_BACKEND', 'default'))"
    env = {k: v for k, v in python_env().items() if k not in ("CUDA_VISIBLE_DEVICES", "BFT_DIST_BACKEND")}
    log = tmp_path / "node.log"
    assert source.launch(node, [sys.executable, "-c", show], env, log).wait(60) == 0
    assert log.read_text().strip() == expected


def test_the_state_size_counts_weights_and_optimizer_state_and_reaches_the_reports_after_a_step(tmp_path,
                                                                                                  monkeypatch):
    from bft.train import _reporter

    monkeypatch.setenv("BFT_CHECKPOINT_DIR", str(tmp_path))
    monkeypatch.setattr(_reporter.REPORTER, "state_bytes", 0)
    model, optimizer, sampler = _parts(0)
    state = bt.ElasticState(model=model, optimizer=optimizer, sampler=sampler, checkpoint_every_s=-1)
    weights = sum(p.numel() * p.element_size() for p in model.parameters())
    assert state.state_bytes == weights  # no momentum before the first step
    model(torch.ones(3, 4)).sum().backward()
    optimizer.step()
    assert state.state_bytes == 2 * weights  # and a momentum buffer per parameter after it
    state.commit()
    assert _reporter.REPORTER.state_bytes == 2 * weights


_BROADCAST_WORKER = r"""
import collections, os, sys
import torch, torch.distributed as dist
from bft.train import exit_finished
from bft.train.elastic import broadcast_state

dist.init_process_group("gloo")
shared = torch.arange(6, dtype=torch.float32).reshape(2, 3)
expected = {"model": collections.OrderedDict(w=shared, tied=shared, b=torch.tensor([1.5], dtype=torch.float64)),
            "optimizer": {"state": {0: {"step": torch.tensor(3), "momentum_buffer": torch.ones(4)[::2]}},
                          "param_groups": [{"lr": 0.1, "params": [0]}]},
            "user": {"epoch": 2, "pair": (torch.zeros(0), "x")}}
got = broadcast_state(expected if dist.get_rank() == 0 else None, 0, torch.device("cpu"))


def same(a, b):
    if isinstance(a, torch.Tensor):
        return isinstance(b, torch.Tensor) and a.dtype == b.dtype and a.shape == b.shape and torch.equal(a, b)
    if isinstance(a, dict):
        return type(a) is type(b) and list(a) == list(b) and all(same(a[k], b[k]) for k in a)
    if isinstance(a, (list, tuple)):
        return type(a) is type(b) and len(a) == len(b) and all(same(x, y) for x, y in zip(a, b))
    return a == b


assert same(got, expected), got
assert got["model"]["w"] is got["model"]["tied"]  # tied weights stay one tensor
print("same", dist.get_rank(), flush=True)
exit_finished()  # barrier, group's end, an exit gloo cannot abort
"""


def test_the_state_broadcast_to_a_newcomer_equals_the_senders_in_structure_dtypes_and_values():
    """What an in-place grow sends (bft.train.elastic.broadcast_state, two gloo ranks): nested dicts in
    their order and type, lists, tuples, plain values, tensors of several dtypes, a non-contiguous one,
    an empty one and a tied pair."""
    env = dict(python_env(), MASTER_ADDR="127.0.0.1", MASTER_PORT=str(free_port()), WORLD_SIZE="2")
    procs = [subprocess.Popen([sys.executable, "-c", _BROADCAST_WORKER], env=dict(env, RANK=str(rank)),
                              stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True) for rank in range(2)]
    try:
        outs = [proc.communicate(timeout=120)[0] for proc in procs]
    finally:
        for proc in procs:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
    assert [proc.returncode for proc in procs] == [0, 0], outs
    assert "same 1" in outs[1], outs


def test_an_in_place_worker_that_reaches_no_keeper_exits_76_naming_the_relay(tmp_path):
    """No keeper answers at BFT_STORE_ADDR (its port refuses): the worker ends with EXIT_INPLACE_FAILED
    once --inplace-timeout has passed, saying which relay did not answer (it used to wait a second
    timeout in _rejoin and then blame "'NoneType' object has no attribute 'get'")."""
    import socket

    from runtime_util import REPO

    with socket.create_server(("127.0.0.1", 0)) as s:
        port = s.getsockname()[1]  # closed again: nothing listens there
    env = {**python_env(), "BFT_RESIZE": "inplace", "BFT_STORE_ADDR": f"127.0.0.1:{port}", "BFT_JOB_ID": "j",
           "BFT_JOB_SECRET": "00" * 32, "BFT_NODE": "n0", "BFT_INPLACE_TIMEOUT_S": "2", "BFT_GENERATION": "1",
           "BFT_CHECKPOINT_DIR": str(tmp_path)}
    script = REPO / "examples" / "runtime" / "elastic_synthetic.py"
    r = subprocess.run([sys.executable, "-m", "bft.train.run", str(script)], env=env, capture_output=True, text=True,
                       timeout=120, cwd=tmp_path)
    assert r.returncode == bt.worker.EXIT_INPLACE_FAILED, r.stderr[-2000:]
    assert f"relay 127.0.0.1:{port} did not answer within 2 s" in r.stderr, r.stderr[-2000:]


_DDP_HOOK_RANK = r"""
import os, sys
import torch, torch.distributed as dist
from bft.train import exit_finished
from bft.train.elastic import _allreduce_or_zero
rank = int(sys.argv[1])
dist.init_process_group("gloo", init_method="file://" + sys.argv[2], rank=rank, world_size=2)
torch.manual_seed(0)
model = torch.nn.Linear(3, 1, bias=False)
ddp = torch.nn.parallel.DistributedDataParallel(model)
ddp.register_comm_hook(dist.group.WORLD, _allreduce_or_zero)
ddp(torch.full((1, 3), float(rank + 1))).sum().backward()  # rank r's gradient is r + 1 everywhere
print(model.weight.grad.tolist())
exit_finished()  # barrier, group's end, an exit gloo cannot abort
"""


def test_the_in_place_ddp_hook_is_accepted_by_ddp_and_averages_the_gradients(tmp_path):
    """ElasticState.ddp_model registers _allreduce_or_zero on its DDP model when it runs in place: DDP
    checks a hook's annotations (only dist.GradBucket), and the hook averages as DDP's own does."""
    script = tmp_path / "rank.py"
    script.write_text(_DDP_HOOK_RANK)
    init = tmp_path / "init"
    ranks = [subprocess.Popen([sys.executable, str(script), str(r), str(init)], env=python_env(),
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) for r in (0, 1)]
    outs = [p.communicate(timeout=120) for p in ranks]
    assert [p.returncode for p in ranks] == [0, 0], [err for _, err in outs]
    assert [out.strip() for out, _ in outs] == ["[[1.5, 1.5, 1.5]]"] * 2


def test_a_join_builds_the_ddp_wrapper_of_a_script_that_trains_through_it_inside_the_join(tmp_path, monkeypatch):
    """Once a script has used state.ddp_model, each in-place join (_formed, inside the join's guard)
    builds the new group's DistributedDataParallel: a peer lost during its construction (a broadcast)
    raises there, where the survivors rejoin, not in their next step. A script that never used it
    gets none built (DDP's construction would cost the resize a broadcast of the parameters)."""
    monkeypatch.setenv("BFT_CHECKPOINT_DIR", str(tmp_path))
    used, unused = (bt.ElasticState(model=torch.nn.Linear(3, 1), checkpoint_every_s=-1) for _ in range(2))
    assert used.ddp_model is used.model  # alone (no group yet): the model itself, which the script trains through

    def peer_lost(*args, **kwargs):
        raise RuntimeError("peer lost while the parameters were broadcast")

    for state in (used, unused):
        monkeypatch.setattr(state, "_sync", lambda has_state, lost_peer=False: None)  # (the state is agreed)
        state._ddp = None  # (as the join found it: the old group's wrapper dropped)
    monkeypatch.setattr(torch.distributed, "is_initialized", lambda: True)
    monkeypatch.setattr(torch.distributed, "get_world_size", lambda group=None: 2)  # the new group: two ranks
    monkeypatch.setattr(torch.nn.parallel, "DistributedDataParallel", peer_lost)
    unused._formed(has_state=True)
    assert unused._ddp is None
    with pytest.raises(RuntimeError, match="peer lost"):
        used._formed(has_state=True)


def test_the_heartbeat_closes_the_gateway_of_each_connection_it_loses(monkeypatch):
    """A keeper lost and found again many times must not leave a gateway (a listener and its thread)
    open per reconnection: the heartbeat closes the lost connection's before it opens the next."""
    from bft.train import store_link

    class Gateway:
        def __init__(self):
            self.closed = False

        def close(self):
            self.closed = True

    class LostStore:
        def set(self, key, value):
            raise ConnectionError("the keeper is gone")

    gateways = []

    def store_client(*args):
        gateways.append(Gateway())
        return LostStore(), gateways[-1]

    monkeypatch.setattr(store_link.rendezvous, "store_client", store_client)
    monkeypatch.setattr(store_link, "BEAT_S", 0.01)
    monkeypatch.setenv("BFT_STORE_ADDR", "127.0.0.1:1")
    monkeypatch.setenv("BFT_JOB_ID", "j")
    monkeypatch.setenv("BFT_JOB_SECRET", "00" * 16)
    store_link.Heartbeat("n0", 0)
    deadline = time.monotonic() + 30
    while len(gateways) < 5 and time.monotonic() < deadline:
        time.sleep(0.01)
    assert len(gateways) >= 5 and all(g.closed for g in gateways[:-2]), [g.closed for g in gateways]
