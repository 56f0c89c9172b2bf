"""The one check of an address that something of the runtime listens on (docs/security.md,
"Addresses"): ``--bind`` (flag or configuration file), ``--metrics-address``, and the address a node
source derives when ``--bind`` is not given. Every listener binds one address of the host, never a
wildcard, whichever way the wildcard is spelled: ``0.0.0.0``, ``::``, ``0:0::0``, ``::%eth0``, the
IPv4-mapped ``::ffff:0.0.0.0``, or a name that resolves to one of them (``0``, ``0x0``, ``0.0``:
the C library reads these as 0.0.0.0)."""

from __future__ import annotations

import ipaddress
import socket
from typing import List, Union

IPAddress = Union[ipaddress.IPv4Address, ipaddress.IPv6Address]


def is_wildcard(ip: IPAddress) -> bool:
    """Whether binding `ip` listens on every address of the host (or of every IPv4 one)."""
    if ip.is_unspecified:
        return True
    mapped = getattr(ip, "ipv4_mapped", None)
    return mapped is not None and mapped.is_unspecified


def _resolved(address: str) -> List[IPAddress]:
    try:
        return [ipaddress.ip_address(address)]
    except ValueError:
        pass
    try:
        infos = socket.getaddrinfo(address, None, type=socket.SOCK_STREAM)
    except (OSError, UnicodeError) as e:
        raise ValueError(f"{address!r} is neither an IP address nor a name that resolves "
                         f"({getattr(e, 'strerror', None) or e})") from None
    return [ipaddress.ip_address(info[4][0].split("%", 1)[0]) for info in infos]


def check_listen_address(flag: str, address: str) -> str:
    """`address`, if binding it listens on one address; else ValueError, one line naming `flag`."""
    if not address:
        raise ValueError(f"{flag}: an empty address; give the one address to listen on")
    try:
        resolved = _resolved(address)
    except ValueError as e:
        raise ValueError(f"{flag}: {e}") from None
    for ip in resolved:
        if is_wildcard(ip):
            shown = getattr(ip, "ipv4_mapped", None) or ip  # ::ffff:0.0.0.0 is every IPv4 address
            also = "" if str(shown) == address else f" ({shown})"
            raise ValueError(f"{flag}: {address}{also} is a wildcard (every address of the host); "
                             "give the one address to listen on")
    return address
