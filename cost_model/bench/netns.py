"""Two emulated hosts on one machine: network namespaces joined by a shaped veth pair.

`bench comm` measures the inter-host tier here, not assumes it: each emulated host's ranks run in
their own network namespace (``autoshard-<pid>-h0`` and ``-h1``), the only link between them is a
veth pair (``aslink`` at both ends, ``10.213.0.1`` and ``10.213.0.2`` on a private /30), and
``tc`` shapes each end's egress to the link's rate (a token bucket, ``tbf``) and, where the kernel
has ``sch_netem``, adds its one-way delay. Traffic stays inside the two namespaces; nothing
touches the machine's own interfaces, routes or firewall.

``EmulatedHosts`` is a context manager: it removes stale namespaces of a crashed run first (any
whose name starts with ``autoshard-`` and whose making process is gone), and on exit, an error
included, removes both namespaces (which deletes the veth pair with them). It needs root
(``CAP_NET_ADMIN``); ``missing_privilege`` says why not where it is missing, and the tests skip
with that reason.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from collections.abc import Sequence
from dataclasses import dataclass
from types import TracebackType

from autoshard.core.errors import InputError, MeasurementError

PREFIX = "autoshard-"
LINK = "aslink"  # the veth end's name inside each namespace
SUBNET = "10.213.0"  # a private /30 that exists only inside the namespaces
_IP, _TC = "ip", "tc"


@dataclass(frozen=True, slots=True)
class LinkShape:
    """The inter-host link: ``rate_gbit`` Gbit/s each way, ``delay_us`` microseconds one way."""

    rate_gbit: float = 10.0
    delay_us: float = 0.0

    def __post_init__(self) -> None:
        if not self.rate_gbit > 0:
            raise InputError("--link-gbit", f"must be > 0 Gbit/s, got {self.rate_gbit}", "e.g. --link-gbit 10")
        if not self.delay_us >= 0:
            raise InputError("--link-delay-us", f"must be >= 0, got {self.delay_us}", "e.g. --link-delay-us 20")

    def describe(self) -> str:
        delay = f", {self.delay_us:g} us one way" if self.delay_us else ""
        return f"veth shaped by tc to {self.rate_gbit:g} Gbit/s{delay}"


def missing_privilege() -> str | None:
    """Why emulated hosts cannot be made here (None: they can)."""
    if os.geteuid() != 0:
        return "emulated hosts need root (network namespaces, veth and tc need CAP_NET_ADMIN)"
    for tool in (_IP, _TC):
        if shutil.which(tool) is None:
            return f"emulated hosts need the `{tool}` command (iproute2)"
    return None


def require_root() -> None:
    """Raise ``InputError`` naming what is missing to emulate hosts here."""
    problem = missing_privilege()
    if problem:
        raise InputError("--tiers", problem, "measure the intra-host tier only (--tiers intra), or run as root")


def _run(*args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
    done = subprocess.run(args, capture_output=True, text=True, check=False)
    if check and done.returncode != 0:
        raise MeasurementError(f"`{' '.join(args)}` failed: {done.stderr.strip() or done.stdout.strip()}")
    return done


def project_namespaces() -> list[str]:
    """The namespaces this project made (by their prefix), stale ones included."""
    listed = _run(_IP, "netns", "list", check=False).stdout
    return [line.split()[0] for line in listed.splitlines() if line.startswith(PREFIX)]


def _owner_alive(name: str) -> bool:
    """Whether the process that made namespace ``name`` (``autoshard-<pid>-hN``) still runs."""
    pid = name[len(PREFIX) :].split("-", 1)[0]
    if not pid.isdigit():
        return False
    try:
        os.kill(int(pid), 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def remove_stale() -> list[str]:
    """Remove the project's namespaces whose making process is gone (a crashed run's); returns
    their names. A running measurement's namespaces are left alone."""
    names = [n for n in project_namespaces() if not _owner_alive(n)]
    for name in names:
        _run(_IP, "netns", "delete", name, check=False)
    return names


class EmulatedHosts:
    """``num_hosts`` (2) namespaces joined by one shaped veth pair; ``command(host, argv)`` runs
    ``argv`` inside host ``host``'s namespace; ``address(host)`` is its address on the link."""

    def __init__(self, shape: LinkShape) -> None:
        self.shape = shape
        pid = os.getpid()
        self.names = (f"{PREFIX}{pid}-h0", f"{PREFIX}{pid}-h1")
        self.veth = (f"as{pid % 100000}a", f"as{pid % 100000}b")  # their names until moved in
        self.num_hosts = len(self.names)

    def address(self, host: int) -> str:
        return f"{SUBNET}.{host + 1}"

    def command(self, host: int, argv: Sequence[str]) -> list[str]:
        return [_IP, "netns", "exec", self.names[host], *argv]

    def __enter__(self) -> EmulatedHosts:
        require_root()
        remove_stale()
        try:
            self._build()
        except BaseException:
            self.close()
            raise
        return self

    def __exit__(self, kind: type[BaseException] | None, error: BaseException | None, tb: TracebackType | None) -> None:
        self.close()

    def close(self) -> None:
        """Remove both namespaces (their veth ends go with them) and a veth end not yet moved into
        one; safe to call twice."""
        for name in self.names:
            _run(_IP, "netns", "delete", name, check=False)
        if self.veth[0] in _run(_IP, "-o", "link", "show", check=False).stdout:
            _run(_IP, "link", "delete", self.veth[0], check=False)

    def _build(self) -> None:
        for name in self.names:
            _run(_IP, "netns", "add", name)
        _run(_IP, "link", "add", self.veth[0], "type", "veth", "peer", "name", self.veth[1])
        for host, (name, end) in enumerate(zip(self.names, self.veth)):
            _run(_IP, "link", "set", end, "netns", name)
            _run(_IP, "-n", name, "link", "set", end, "name", LINK)
            _run(_IP, "-n", name, "addr", "add", f"{self.address(host)}/30", "dev", LINK)
            _run(_IP, "-n", name, "link", "set", LINK, "up")
            _run(_IP, "-n", name, "link", "set", "lo", "up")
            self._shape(name)

    def _shape(self, name: str) -> None:
        """Shape ``name``'s end of the link: netem (rate and delay) where the kernel has it, else
        a token bucket for the rate (a delay then cannot be applied: refused, not ignored)."""
        rate = f"{self.shape.rate_gbit * 1000:g}mbit"
        # a bucket of 1 ms of traffic, at least 256 KiB: smaller ones cut TCP's 64 KiB segments
        # (1 Gbit/s fell to a quarter); a call of 1 MiB or more pays the rate on all but one bucket
        burst = max(256 * 1024, int(self.shape.rate_gbit * 1e9 / 8 * 1e-3))
        if self.shape.delay_us:
            netem = ("netem", "delay", f"{self.shape.delay_us:g}us", "rate", rate, "limit", "100000")
            done = _run(_TC, "-n", name, "qdisc", "add", "dev", LINK, "root", *netem, check=False)
            if done.returncode != 0:
                raise InputError(
                    "--link-delay-us",
                    f"this kernel cannot delay packets (tc netem: {done.stderr.strip()})",
                    "load sch_netem (modprobe sch_netem), or measure without a delay (--link-delay-us 0)",
                )
            return
        tbf = ("tbf", "rate", rate, "burst", str(burst), "latency", "50ms")
        _run(_TC, "-n", name, "qdisc", "add", "dev", LINK, "root", *tbf)
