"""bft.train.ElasticState outside the manager, and the in-place workers' wrapper (bft.train.run).

The in-place resizes themselves are tested end to end in test_runtime_inplace.py.
"""

from __future__ import annotations

import subprocess
import sys

import pytest

from runtime_util import python_env

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
    from bft.runtime.local import LocalNodeSource

    source = LocalNodeSource("test-gpus", tmp_path, nodes=nodes, gpus=gpus)
    source.start(lambda event: None)
    show = "import os; print(os.environ['CUDA_VISIBLE_DEVICES'], os.environ.get('BFT_DIST_BACKEND', 'default'))"
    env = {k: v for k, v in python_env().items() if k not in ("CUDA_VISIBLE_DEVICES", "BFT_DIST_BACKEND")}
    log = tmp_path / "node.log"
    assert source.launch(node, [sys.executable, "-c", show], env, log).wait(60) == 0
    assert log.read_text().strip() == expected
