"""Which network interface gloo uses on a node: the one holding the node's cluster address.

gloo (the workers' CPU backend) takes the address its host name resolves to, else loopback: on a
node whose name does not resolve to its own cluster address, the workers of other nodes could not
connect. Both a torchrun agent (for the workers it starts) and an in-place worker (which runs
without one) set ``GLOO_SOCKET_IFNAME`` to the interface of the address the manager gave the node.
"""

from __future__ import annotations

import fcntl
import os
import socket
import struct
from typing import Optional


def interface_of(address: str) -> Optional[str]:
    """The name of the local interface holding IPv4 ``address`` (an IP or a name), if any."""
    try:
        want = socket.inet_aton(socket.gethostbyname(address))
    except OSError:
        return None
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        for _, name in socket.if_nameindex():
            try:  # SIOCGIFADDR: struct ifreq is the name (16 bytes), then a sockaddr_in
                got = fcntl.ioctl(s.fileno(), 0x8915, struct.pack("256s", name.encode()[:15]))[20:24]
            except OSError:
                continue  # no IPv4 address
            if got == want:
                return name
    return None


def gloo_on_the_node_address(address: str) -> None:
    """Sets GLOO_SOCKET_IFNAME (inherited by children) to the interface of `address`, unless the user set it."""
    name = None if "GLOO_SOCKET_IFNAME" in os.environ or not address else interface_of(address)
    if name:
        os.environ["GLOO_SOCKET_IFNAME"] = name
