"""Two network namespaces joined by a veth pair: two "hosts" on one machine that share no
network address, for a real multi-node test. Made with iproute2 (needs root), torn down after.

Both ends of the link carry the same interface name inside their namespaces (`LINK`), so one
cluster-wide setting (e.g. UCX_NET_DEVICES) names the link on either node.
"""

from __future__ import annotations

import contextlib
import json
import shutil
import subprocess
from collections.abc import Iterator, Sequence
from dataclasses import dataclass

LINK = "pdlink0"


class NamespaceUnavailable(RuntimeError):
    """This machine cannot create network namespaces (not root, no iproute2, no kernel support)."""


@dataclass(frozen=True)
class Host:
    """One namespace: its name and its address on the link."""

    netns: str
    address: str

    def cmd(self, argv: Sequence[str]) -> list[str]:
        """`argv` to run inside this namespace."""
        return ["ip", "netns", "exec", self.netns, *argv]


@dataclass(frozen=True)
class Link:
    a: Host
    b: Host

    def bytes_sent(self, host: Host) -> int:
        """Bytes `host` has sent over the link (the kernel's interface counter)."""
        return _link_bytes(host, "tx")

    def bytes_received(self, host: Host) -> int:
        """Bytes `host` has received over the link."""
        return _link_bytes(host, "rx")


def _link_bytes(host: Host, direction: str) -> int:
    stats = json.loads(_ip(["-n", host.netns, "-s", "-j", "link", "show", LINK]))[0]["stats64"]
    return int(stats[direction]["bytes"])


def _ip(args: list[str], check: bool = True) -> str:
    proc = subprocess.run(["ip", *args], capture_output=True, text=True, check=False)
    if check and proc.returncode != 0:
        raise NamespaceUnavailable(f"`ip {' '.join(args)}` failed: {proc.stderr.strip()}")
    return proc.stdout


@contextlib.contextmanager
def two_hosts(prefix: str = "pdns", subnet: str = "10.77.0") -> Iterator[Link]:
    """Namespaces `{prefix}-a` (SUBNET.1) and `{prefix}-b` (SUBNET.2), each with loopback up and
    one end of a veth pair named LINK; deleted (with the link) on exit."""
    if shutil.which("ip") is None:
        raise NamespaceUnavailable("iproute2's `ip` is not installed")
    a = Host(f"{prefix}-a", f"{subnet}.1")
    b = Host(f"{prefix}-b", f"{subnet}.2")
    for host in (a, b):  # leftovers of an earlier, killed run
        _ip(["netns", "del", host.netns], check=False)
    try:
        for host in (a, b):
            _ip(["netns", "add", host.netns])
            _ip(["-n", host.netns, "link", "set", "lo", "up"])
        _ip(["link", "add", f"{prefix}-va", "netns", a.netns, "type", "veth",
             "peer", "name", f"{prefix}-vb", "netns", b.netns])  # fmt: skip
        for host, end in ((a, f"{prefix}-va"), (b, f"{prefix}-vb")):
            _ip(["-n", host.netns, "link", "set", end, "name", LINK])
            _ip(["-n", host.netns, "addr", "add", f"{host.address}/24", "dev", LINK])
            _ip(["-n", host.netns, "link", "set", LINK, "up"])
        yield Link(a, b)
    finally:
        for host in (a, b):  # deleting a namespace deletes its end of the pair, and the pair
            _ip(["netns", "del", host.netns], check=False)
