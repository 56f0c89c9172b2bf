"""The Slurm pilot: holds one node for a bft manager (docs/slurm.md).

It reports "start", then holds the node until Slurm takes it back. Slurm sends SIGTERM to the steps
of a job at preemption (SIGKILL after GraceTime), at the time limit and at scancel (SIGKILL after
KillWait); the batch shell is not signalled at preemption, so the pilot runs as step 0 of its own
job. On the first SIGTERM it reports "term" and keeps holding, so that training steps in the
allocation get the whole grace time; it exits at once when the source answers "release" (the
source cancelled it) or on a second SIGTERM. It never exits by itself.

The node source sends this file inline in the batch script (python3 -c), so compute nodes need
only a python3, not libbft: it must hold no single quote and import only the standard library.
"""
import hashlib
import hmac
import json
import os
import signal
import socket
import sys
import time


class Pilot:
    def __init__(self, env):
        self.secret = bytes.fromhex(env.pop("BFT_PILOT_SECRET"))  # out of the environment of what runs here
        self.host, self.port = env["BFT_PILOT_ADDR"].rsplit(":", 1)
        self.job, self.node = env["SLURM_JOB_ID"], env["SLURMD_NODENAME"]
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
        self.report("start")
        while True:
            signal.pause()


if __name__ == "__main__":
    Pilot(os.environ).hold()
