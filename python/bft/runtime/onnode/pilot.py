"""The pilot: holds one node for a bft manager, under any batch scheduler (the side of the
manager: bft.runtime.sources.pilot_reports; how Slurm runs it: docs/slurm.md).

It reports "start", then holds the node until the scheduler takes it back. A scheduler sends SIGTERM
at preemption, at the time limit and at cancellation (SIGKILL after its grace time; under Slurm the
pilot runs as step 0 of its job, as the batch shell is not signalled at preemption). On the first
SIGTERM it reports "term" and keeps holding, so that training in the allocation gets the whole
grace time; it exits at once when the source answers "release" (the source cancelled it: to a "term",
or to its "start" when it started while a main job was taking nodes back) or on a second SIGTERM. It
never exits by itself.

It knows no scheduler: its environment names the variables of the scheduler that hold its job id and
node (BFT_PILOT_JOB_VAR, BFT_PILOT_NODE_VAR; no node variable: the host name). The node source sends
this file inline in the batch script (python3 -c), so compute nodes need only a python3, not libbft:
it must hold no single quote and import only the standard library.
"""
import hashlib
import hmac
import json
import os
import signal
import socket
import sys
import time


def read_secret(path):
    """The key of the manager from its file in the shared state directory (the submission carries only the
    path: it crosses the network in the clear): a file of this user, private to it, not a link."""
    fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW)
    with os.fdopen(fd) as f:
        st = os.fstat(fd)
        if st.st_uid != os.getuid() or st.st_mode & 0o077:
            sys.exit(f"pilot: {path} is not a file private to this user (mode {st.st_mode & 0o777:o})")
        return bytes.fromhex(json.load(f)["secret"])


class Pilot:
    def __init__(self, env):
        self.secret = read_secret(env.pop("BFT_PILOT_SECRET_FILE"))
        self.host, self.port = env["BFT_PILOT_ADDR"].rsplit(":", 1)
        self.job = env[env["BFT_PILOT_JOB_VAR"]]
        self.node = env.get(env.get("BFT_PILOT_NODE_VAR") or "", "") or socket.gethostname()
        self.identity = env["BFT_PILOT_IDENTITY"]
        self.terms = 0

    def report(self, event):
        """Sends one signed event to the node source; its answer ("release" or ""), "" if unreachable."""
        body = json.dumps({"identity": self.identity, "job": self.job, "node": self.node, "event": event,
                           "time": time.time()})
        mac = hmac.new(self.secret, body.encode(), hashlib.sha256).hexdigest()
        for _ in range(3):
            try:
                with socket.create_connection((self.host, int(self.port)), timeout=2) as s:
                    s.sendall((mac + " " + body + "\n").encode())
                    return s.makefile().readline().strip()
            except OSError as e:
                print(f"pilot {self.job}: report {event} to {self.host}:{self.port} failed: {e}", file=sys.stderr,
                      flush=True)
                time.sleep(0.2)
        return ""

    def on_term(self, signum, frame):
        self.terms += 1
        if self.terms > 1 or self.report("term") == "release":
            sys.exit(0)

    def hold(self):
        signal.signal(signal.SIGTERM, self.on_term)
        if self.report("start") == "release":
            sys.exit(0)  # it started while a main job takes nodes back: the node is given back at once
        while True:
            signal.pause()


if __name__ == "__main__":
    Pilot(os.environ).hold()
