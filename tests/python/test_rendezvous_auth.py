"""The rendezvous stores are open only to the job's own processes (bft.train.rendezvous, docs/security.md).

Real TCPStores behind a real relay and gateway; intruders are real store clients and raw sockets, and
another user is played by `nobody` (setpriv, so those tests need root and skip without it)."""

from __future__ import annotations

import datetime
import os
import shutil
import socket
import subprocess
import sys
import threading
import time

import pytest

from runtime_util import python_env

dist = pytest.importorskip("torch.distributed", reason="the stores are torch's TCPStore")
from bft.train import rendezvous  # noqa: E402

JOB, SECRET = "job1", bytes(range(32))
AS_NOBODY = ["setpriv", "--reuid=nobody", "--regid=nogroup", "--clear-groups"]
needs_root = pytest.mark.skipif(os.geteuid() != 0 or not shutil.which("setpriv"),
                                reason="playing another user needs root")

# A store client in a process of its own: "ok <value of key 'k'> <number of keys>" (then it writes the
# key 'written') or the error it met.
CLIENT = """
import datetime, sys, torch.distributed as dist
try:
    c = dist.TCPStore(sys.argv[1], int(sys.argv[2]), is_master=False, timeout=datetime.timedelta(seconds=3))
    print("ok", c.get("k").decode(), c.num_keys())
    c.set("written", "1")
except Exception as e:
    print("refused", type(e).__name__)
"""


@pytest.fixture
def hosted():
    """A job's store, hosted as the runtime hosts it, behind a relay that knows only JOB's secret."""
    hosted = rendezvous.HostedStore(socket.create_server(("127.0.0.1", 0)), lambda job: SECRET if job == JOB else None,
                                    wait_for_workers=False)
    hosted.store.set("k", "v")
    yield hosted
    hosted.close()


@pytest.fixture
def store(hosted):
    """The store's own (server-side) client and its relay."""
    return hosted.store, hosted.relay


def _client(host, port, timeout_s=3):
    return dist.TCPStore(host, port, is_master=False, timeout=datetime.timedelta(seconds=timeout_s))


def _closed(s):
    try:
        return s.recv(1) == b""
    except ConnectionResetError:  # closed with bytes it had not read
        return True


def _run_client(address, prefix=()):
    r = subprocess.run([*prefix, sys.executable, "-c", CLIENT, *map(str, address)], env=python_env(),
                       capture_output=True, text=True, timeout=60, cwd="/")
    return r.stdout.strip()


def test_the_jobs_gateway_reads_and_writes_its_store(store):
    master, relay = store
    gateway = rendezvous.open_gateway(relay.address, JOB, SECRET)
    try:
        c = _client(*gateway.address)
        assert c.get("k") == b"v"
        c.set("from-gateway", "1")
        assert master.get("from-gateway") == b"1"
        keys = master.num_keys()
        assert _run_client(gateway.address) == f"ok v {keys}"  # another process of the user
        assert master.get("written") == b"1"
    finally:
        gateway.close()


def test_a_newcomer_counts_as_announced_only_with_the_tickets_it_was_started_with(hosted):
    """The manager's reading of an in-place newcomer's announcement through the job's relay: every
    process of the node, each with its own ticket; an earlier process's key on the node is not it."""
    from bft.runtime.jobs.resize import Configurations
    from bft.train import protocol

    host, port = hosted.relay.address
    configurations = Configurations(f"{host}:{port}", 5.0, lambda job: SECRET)
    try:
        assert not configurations.announced(JOB, "n1", ["7", "8"])
        hosted.store.set(protocol.newcomer_key(JOB, "n1", 0), "7")
        assert not configurations.announced(JOB, "n1", ["7", "8"])  # local rank 1 is still on its way
        hosted.store.set(protocol.newcomer_key(JOB, "n1", 1), "5")  # an earlier process of the node
        assert not configurations.announced(JOB, "n1", ["7", "8"])
        hosted.store.set(protocol.newcomer_key(JOB, "n1", 1), "8")
        assert configurations.announced(JOB, "n1", ["7", "8"])
    finally:
        configurations.close()


def test_without_the_secret_nobody_reads_writes_or_lists_keys(store):
    master, relay = store
    keys = master.num_keys()
    wrong = rendezvous.open_gateway(relay.address, JOB, b"\xff" * 32)
    other_job = rendezvous.open_gateway(relay.address, "job2", SECRET)
    try:
        for address in (relay.address, wrong.address, other_job.address):  # no handshake, wrong secret, no such job
            assert _run_client(address).startswith("refused"), address
    finally:
        wrong.close()
        other_job.close()
    assert master.get("k") == b"v" and master.num_keys() == keys


def test_a_raw_connection_gets_not_a_byte_of_the_store(store, monkeypatch):
    monkeypatch.setattr(rendezvous, "HANDSHAKE_TIMEOUT_S", 1.0)
    _, relay = store
    with socket.create_connection(relay.address, timeout=10) as s:
        s.sendall(b"BFTRDZV1 job1\n" + b"x" * 64)  # a malformed hello, then anything
        assert _closed(s)
    with socket.create_connection(relay.address, timeout=10) as s:  # a valid hello, then a wrong proof
        s.sendall(b"BFTRDZV1 job1 " + b"00" * 16 + b"\n")
        assert len(s.recv(1024).split()) == 2  # the relay's nonce and proof
        s.sendall(b"0" * 64 + b"\n")
        assert _closed(s)


def test_silent_handshakes_time_out_and_hold_up_no_one(store, monkeypatch):
    monkeypatch.setattr(rendezvous, "HANDSHAKE_TIMEOUT_S", 2.0)
    monkeypatch.setattr(rendezvous, "MAX_PENDING", 32)
    master, relay = store
    silent = [socket.create_connection(relay.address, timeout=10) for _ in range(100)]  # more than MAX_PENDING
    gateway = rendezvous.open_gateway(relay.address, JOB, SECRET)
    try:
        started = time.monotonic()
        assert _client(*gateway.address).get("k") == b"v"
        assert time.monotonic() - started < 1.5  # not after the silent ones' timeout
        trickle = socket.create_connection(relay.address, timeout=10)
        silent.append(trickle)
        try:
            for byte in b"BFTRDZV1 job1":  # a byte at a time: the deadline is for the whole handshake
                trickle.sendall(bytes([byte]))
                time.sleep(0.25)
        except OSError:
            pass  # closed meanwhile
        for s in silent:
            assert _closed(s)
    finally:
        gateway.close()
        for s in silent:
            s.close()


def test_without_a_private_namespace_the_store_still_works_on_the_hosts_loopback(monkeypatch):
    from bft.train import _loopback

    monkeypatch.setattr(_loopback, "_HELPER", "import sys; sys.exit(0)")  # as where unshare() is refused
    hosted = rendezvous.HostedStore(socket.create_server(("127.0.0.1", 0)), lambda job: SECRET, wait_for_workers=False)
    gateway = rendezvous.open_gateway(hosted.relay.address, JOB, SECRET)
    try:
        assert not hosted.private
        _client(*gateway.address).set("k", "through the relay")
        assert hosted.store.get("k") == b"through the relay"
    finally:
        gateway.close()
        hosted.close()


@needs_root
def test_the_store_itself_is_out_of_another_users_reach(hosted):
    assert hosted.private  # root may always make a private namespace
    # The only port of this host's namespace that leads to the store is for its own process's user.
    assert _run_client(("127.0.0.1", hosted._store_port), AS_NOBODY).startswith("refused")
    assert not hosted.store.check(["written"])


@needs_root
def test_another_user_cannot_use_a_jobs_gateway_or_relay(store):
    master, relay = store
    gateway = rendezvous.open_gateway(relay.address, JOB, SECRET)
    try:
        assert _run_client(gateway.address, AS_NOBODY).startswith("refused")
        assert _run_client(relay.address, AS_NOBODY).startswith("refused")
        assert not master.check(["written"])
        assert _run_client(gateway.address).startswith("ok")  # the same gateway still serves its user
    finally:
        gateway.close()
    assert master.check(["written"])


def test_the_relay_answers_any_job_name_alike_until_the_proof(hosted):
    """No oracle of which job names exist: a hello for a running job and one for a made-up name get a
    reply of the same form, and both are refused only after a wrong proof (issue 31)."""
    import re

    replies = []
    for job in (JOB, "no-such-job"):
        s = socket.create_connection(hosted.relay.address, timeout=10)
        s.sendall(b"BFTRDZV1 %s %s\n" % (job.encode(), os.urandom(16).hex().encode()))
        line = s.makefile("rb").readline()
        replies.append(re.sub(rb"[0-9a-f]", b"x", line))
        s.sendall(b"0" * 64 + b"\n")  # a proof without the secret
        assert _closed(s)
        s.close()
    assert replies[0] == replies[1] and re.fullmatch(rb"x{32} x{64}\n", replies[0]), replies


# -- reaching a relay that answers late, or never -----------------------------------------------------

def test_a_client_reaches_a_relay_that_serves_its_bound_port_late():
    """A keeper binds its store port first and serves it seconds later (a loaded host): the client's
    tries meanwhile get no answer, and the first after the relay serves gets through."""
    listener = socket.create_server(("127.0.0.1", 0))
    late = []
    timer = threading.Timer(2.0, lambda: late.append(rendezvous.HostedStore(
        listener, lambda job: SECRET if job == JOB else None, wait_for_workers=False)))
    timer.start()
    try:
        client, gateway = rendezvous.store_client(listener.getsockname()[:2], JOB, SECRET, timeout_s=30)
        try:
            client.set("k", "late")
            assert late and late[0].store.get("k") == b"late"
        finally:
            gateway.close()
    finally:
        timer.join()
        for hosted in late:
            hosted.close()


def test_a_relay_that_never_answers_is_unreachable_after_the_time_given():
    listener = socket.create_server(("127.0.0.1", 0))  # bound, never served: connections wait unanswered
    try:
        with pytest.raises(rendezvous.RelayUnreachable, match=r"127\.0\.0\.1:\d+ did not answer within 1 s"):
            rendezvous.store_client(listener.getsockname()[:2], JOB, SECRET, timeout_s=30, reach_within_s=1)
    finally:
        listener.close()


def test_a_client_stops_waiting_for_a_relay_that_is_gone():
    """The manager's loop waits on its store clients: a dead keeper is given up at once, not after the
    timeout (its successor, which only the manager starts, would wait behind it)."""
    with socket.create_server(("127.0.0.1", 0)) as s:
        port = s.getsockname()[1]  # nothing listens there any more: connections are refused
    with pytest.raises(rendezvous.RelayUnreachable, match="is gone"):
        rendezvous.store_client(("127.0.0.1", port), JOB, SECRET, timeout_s=600, gone=lambda: True)
