"""A loopback that only this process can reach: 127.0.0.1 of a private network namespace.

A store on the host's own 127.0.0.1 is open to every user of that host. So a small helper process
enters a new user and network namespace (no privileges needed where the kernel allows unprivileged
user namespaces) and hands this process sockets of that namespace over a Unix socket (SCM_RIGHTS):
a listener for the store, and a fresh socket for each connection to it. Nothing else has a way in.
Where the kernel refuses, it falls back to the host's 127.0.0.1 and says so (``private`` is False).
"""

from __future__ import annotations

import socket
import subprocess
import sys
import threading

# The helper: standard library only, and it calls unshare() first, while it has one thread.
_HELPER = r"""
import ctypes, fcntl, socket, struct, sys
ctl = socket.socket(fileno=int(sys.argv[1]))
if ctypes.CDLL(None, use_errno=True).unshare(0x10000000 | 0x40000000) != 0:  # CLONE_NEWUSER | CLONE_NEWNET
    sys.exit(0)  # the parent reads end-of-file: no private namespace here
with socket.socket() as s:  # a new namespace's loopback is down (SIOCSIFFLAGS: up, loopback, running)
    fcntl.ioctl(s, 0x8914, struct.pack("16sh22x", b"lo", 0x1 | 0x8 | 0x40))
ctl.sendall(b"ready")
while True:
    request = ctl.recv(16)
    if not request:
        break
    s = socket.socket()
    if request != b"socket":
        s.bind(("127.0.0.1", int(request)))
        s.listen(512)
    socket.send_fds(ctl, [b"s"], [s.fileno()])
    s.close()
"""


class PrivateLoopback:
    def __init__(self) -> None:
        ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        self._proc = subprocess.Popen([sys.executable, "-I", "-c", _HELPER, str(theirs.fileno())],
                                      pass_fds=[theirs.fileno()], stdin=subprocess.DEVNULL,
                                      stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        theirs.close()
        ours.settimeout(30)
        try:
            self.private = ours.recv(16) == b"ready"
        except OSError:
            self.private = False
        ours.settimeout(None)
        self._ctl = ours
        self._lock = threading.Lock()
        if not self.private:
            self.close()

    def _socket(self, request: bytes) -> socket.socket:
        if not self.private:
            s = socket.socket()
            if request != b"socket":
                s.bind(("127.0.0.1", int(request)))
                s.listen(512)
            return s
        with self._lock:  # one request and its answer at a time
            self._ctl.sendall(request)
            _, fds, _, _ = socket.recv_fds(self._ctl, 1, 1)
        if not fds:
            raise OSError("the private loopback's helper has gone")
        return socket.socket(fileno=fds[0])

    def listener(self, port: int) -> socket.socket:
        """A socket listening on 127.0.0.1:`port` of this loopback."""
        return self._socket(str(port).encode())

    def connect(self, port: int, timeout: float) -> socket.socket:
        """A connection to 127.0.0.1:`port` of this loopback."""
        s = self._socket(b"socket")
        s.settimeout(timeout)
        try:
            s.connect(("127.0.0.1", port))
        except OSError:
            s.close()
            raise
        return s

    def close(self) -> None:
        """Ends the helper (sockets already handed out stay usable)."""
        self._ctl.close()  # the helper reads end-of-file and exits
        try:
            self._proc.wait(10)
        except subprocess.TimeoutExpired:
            self._proc.kill()
            self._proc.wait()
