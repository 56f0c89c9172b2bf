"""End to end: an intruder against a running job's rendezvous (docs/security.md, "Rendezvous").

A real manager and a real DDP job. The intruder holds hundreds of silent connections open to every
socket the keeper and the job's agents listen on (the keeper's relay, rank 0's worker-store relay,
the nodes' gateways) and tries to use them as store clients; as `nobody` where the test runs as root.
The job must grow across a new node meanwhile (a new rendezvous and a new worker store)."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from bft.runtime import tagged_processes
from runtime_util import listening_sockets, python_env, write_trace

pytestmark = pytest.mark.runtime

HELD_PER_SOCKET = 300  # more than a relay or gateway keeps of unfinished handshakes (MAX_PENDING)

# A store client: "ok <number of keys>" if it got in, else "refused".
CLIENT = """
import datetime, sys, torch.distributed as dist
try:
    c = dist.TCPStore(sys.argv[1], int(sys.argv[2]), is_master=False, timeout=datetime.timedelta(seconds=3))
    print("ok", c.num_keys())
except Exception:
    print("refused")
"""


# Keeps HELD_PER_SOCKET silent connections open to each address "host:port" in argv (reopening what
# the far end closes) until its stdin closes; then prints how many it opened in all.
FLOOD = """
import select, socket, sys
held = {(a.rsplit(":", 1)[0], int(a.rsplit(":", 1)[1])): [] for a in sys.argv[2:]}
opened = 0
while not select.select([sys.stdin], [], [], 0.2)[0]:
    for address, conns in held.items():
        for c in list(conns):
            c.setblocking(False)
            try:
                gone = c.recv(1) == b""
            except BlockingIOError:
                gone = False
            except OSError:
                gone = True
            if gone:
                conns.remove(c)
                c.close()
        while len(conns) < int(sys.argv[1]):
            try:
                conns.append(socket.create_connection(address, timeout=2))
                opened += 1
            except OSError:
                break
print(opened)
"""


def test_an_intruder_cannot_read_join_or_stall_a_running_jobs_rendezvous(harness):
    # n2 joins late enough for the flood to fill every target before the grow replaces the agents
    # (on a busy 2-core machine the job may take 20 s to train on two nodes).
    trace = write_trace(harness.root / "trace.csv", [(0, "n0", "idle"), (0, "n1", "idle"),
                                                      (50, "n2", "idle")])
    harness.start("--local-trace", str(trace), "--local-nodes", "3", "--grace", "10")
    harness.submit("j", "--min", "1", "--max", "3", "--samples", "100000000", "--", "--step-s", "0.02")
    harness.wait(lambda s: len(s["jobs"][0]["nodes"]) == 2 and s["jobs"][0]["samples"] > 0, 120, "two nodes to train")
    keeper = harness.keeper_pid()
    # The agents, not their workers (whose gloo sockets are the data plane, unauthenticated: docs/security.md).
    agents = {pid for pid in tagged_processes(harness.identity)
              if b"bft.runtime.agent" in Path(f"/proc/{pid}/cmdline").read_bytes()}
    targets = sorted({local for proto, local, _ in listening_sockets({keeper, *agents}, with_port=True)
                      if proto == "tcp"})
    # The keeper's relay, rank 0's worker-store relay, a gateway per agent for each store.
    assert len(targets) >= 4, targets
    # As root the intruder is `nobody`; as the user itself its own gateways would (rightly) let it in.
    as_nobody = ["setpriv", "--reuid=nobody", "--regid=nogroup", "--clear-groups"] \
        if os.geteuid() == 0 and shutil.which("setpriv") else []
    probes = targets if as_nobody else ["%s:%d" % _keeper_relay(harness)]
    flood = subprocess.Popen([*as_nobody, sys.executable, "-c", FLOOD, str(HELD_PER_SOCKET), *targets],
                             stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, cwd="/")
    try:
        for target in probes:
            host, port = target.rsplit(":", 1)
            r = subprocess.run([*as_nobody, sys.executable, "-c", CLIENT, host, port], env=python_env(),
                               capture_output=True, text=True, timeout=60, cwd="/")
            assert r.stdout.strip() == "refused", (target, r.stdout, r.stderr[-2000:])
        before = harness.job("j")["samples"]
        # The trace frees n2 at t=50 s: the job grows onto it through a new rendezvous, flood or not.
        harness.wait(lambda s: len(s["jobs"][0]["nodes"]) == 3, 150, "the job to grow onto the third node")
        harness.wait(lambda s: s["jobs"][0]["samples"] > before and s["jobs"][0]["state"] == "running", 90,
                     "the grown job to train")
        assert flood.poll() is None, "the intruder's flood ended early"
        opened = int(flood.communicate("", timeout=60)[0])
        assert opened > HELD_PER_SOCKET * len(targets), opened  # it held them all, and reopened what was closed
    finally:
        if flood.poll() is None:
            flood.kill()
            flood.wait(10)
    assert "Traceback" not in harness.job_log("j"), harness.job_log("j")[-3000:]


def _keeper_relay(harness):
    import json

    info = json.loads((harness.state_dir / "keeper.json").read_text())
    return (info["bind"], int(info["store_port"]))
