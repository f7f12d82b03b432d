r"""Separate hosts on one machine: Linux network namespaces joined by a bridge (multi-host tests).

A multi-host C-VFL run (:func:`~cvfl_sim.vfl.distributed.run_from_env`) differs from the loopback
one that :func:`~cvfl_sim.vfl.distributed.train_distributed` starts in what the network does:
every role has its own interface and address, ``MASTER_ADDR`` is not ``127.0.0.1``, and the
server's store and every gloo pair go through a real (virtual) link. :class:`NamespaceHosts`
builds that on one machine: ``n`` network namespaces, each with one end of a veth pair named
:data:`INTERFACE` and the address ``10.231.0.(k + 1)/24``, the other ends enslaved to a bridge
in a namespace of its own, so the machine's own network is never touched. Processes started with
:meth:`NamespaceHosts.popen` run inside a namespace; they are killed if the process that started
them dies, and when the context ends, which then deletes every namespace (and with them the
links).

Making namespaces needs root (``CAP_SYS_ADMIN`` and ``CAP_NET_ADMIN``) and the ``ip`` tool;
:func:`namespaces_unavailable` says why they cannot be made, or ``None``.
"""

from __future__ import annotations

import ctypes
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Mapping, Sequence
from types import TracebackType

__all__ = [
    "INTERFACE",
    "NamespaceError",
    "NamespaceHosts",
    "namespaces_unavailable",
    "run_roles_on_hosts",
]

INTERFACE = "cvfl0"
"""The name of each namespace's interface (for ``GLOO_SOCKET_IFNAME``)."""

_SUBNET = "10.231.0"
_PR_SET_PDEATHSIG = 1


class NamespaceError(RuntimeError):
    """A namespace or link could not be made; the message has the command and its error."""


def _ip(*args: str) -> None:
    done = subprocess.run(["ip", *args], capture_output=True, text=True, check=False)
    if done.returncode != 0:
        raise NamespaceError(
            f"`ip {' '.join(args)}` failed: {done.stderr.strip() or done.returncode}"
        )


def namespaces_unavailable() -> str | None:
    """Why network namespaces cannot be made here (one line), or ``None`` if they can."""
    if not os.path.isdir("/proc/self/ns") or not hasattr(os, "geteuid"):
        return "network namespaces are Linux only"
    if os.geteuid() != 0:
        return "making network namespaces needs root (CAP_SYS_ADMIN, CAP_NET_ADMIN)"
    if shutil.which("ip") is None:
        return "the `ip` tool (iproute2) is not installed"
    probe = f"cvfl-probe-{uuid.uuid4().hex[:8]}"
    try:
        _ip("netns", "add", probe)
    except NamespaceError as e:
        return str(e)
    try:
        _ip("-n", probe, "link", "add", "cvflprobe", "type", "veth", "peer", "name", "cvflpeer")
    except NamespaceError as e:
        return str(e)
    finally:
        subprocess.run(["ip", "netns", "del", probe], capture_output=True, check=False)
    return None


def _die_with_parent() -> None:  # pragma: no cover - runs in the child before exec
    """``PR_SET_PDEATHSIG``: the kernel kills this process when its parent dies."""
    libc = ctypes.CDLL(None, use_errno=True)
    libc.prctl(_PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)


class NamespaceHosts:
    """``n`` network namespaces, host ``k`` at :meth:`address` ``(k)``, joined by a bridge.

    Use it as a context manager; leaving it kills the processes it started that still run and
    deletes every namespace, without hiding an error raised inside the block.

    Parameters
    ----------
    n : int
        Number of hosts (1..200).

    Examples
    --------
    A C-VFL run with the server and each party on its own host (root only)::

        with NamespaceHosts(M + 1) as hosts:
            env = {"MASTER_ADDR": hosts.address(0), "MASTER_PORT": "29500",
                   "WORLD_SIZE": str(M + 1), "GLOO_SOCKET_IFNAME": INTERFACE}
            procs = [hosts.popen(k, [sys.executable, "run.py"], {**env, "RANK": str(k)})
                     for k in range(M + 1)]
    """

    def __init__(self, n: int) -> None:
        if isinstance(n, bool) or not isinstance(n, int) or not 1 <= n <= 200:
            raise ValueError(f"n (hosts) must be an integer in [1, 200], got {n!r}")
        tag = uuid.uuid4().hex[:8]
        self.n = n
        self.bridge = f"cvfl-{tag}-br"
        self.names = [f"cvfl-{tag}-h{k}" for k in range(n)]
        self._made: list[str] = []
        self._procs: list[subprocess.Popen[bytes]] = []

    def address(self, k: int) -> str:
        """Host ``k``'s IPv4 address."""
        if not 0 <= k < self.n:
            raise ValueError(f"host must be in [0, {self.n - 1}], got {k}")
        return f"{_SUBNET}.{k + 1}"

    def __enter__(self) -> NamespaceHosts:
        try:
            for ns in [self.bridge, *self.names]:
                _ip("netns", "add", ns)
                self._made.append(ns)
            _ip("-n", self.bridge, "link", "add", "br0", "type", "bridge")
            _ip("-n", self.bridge, "link", "set", "br0", "up")
            for k, ns in enumerate(self.names):
                port = f"p{k}"
                _ip("-n", self.bridge, "link", "add", port, "type", "veth", "peer", "name",
                    INTERFACE, "netns", ns)  # fmt: skip
                _ip("-n", self.bridge, "link", "set", port, "master", "br0", "up")
                _ip("-n", ns, "addr", "add", f"{self.address(k)}/24", "dev", INTERFACE)
                _ip("-n", ns, "link", "set", INTERFACE, "up")
                _ip("-n", ns, "link", "set", "lo", "up")
        except BaseException:
            self._remove()
            raise
        return self

    def popen(
        self, k: int, argv: Sequence[str], env: Mapping[str, str] | None = None, **kw: object
    ) -> subprocess.Popen[bytes]:
        """Start ``argv`` inside host ``k``'s namespace (``env`` added to this process's).

        The process is killed when this one dies, or when the context ends. The kernel's
        parent-death signal follows the *thread* that starts it: call this from a thread that
        lives as long as the process should (the main one, say).
        """
        self.address(k)  # range check
        full = {**os.environ, **(env or {})}
        proc = subprocess.Popen(  # noqa: S603 - argv is the caller's
            ["ip", "netns", "exec", self.names[k], *argv],
            env=full,
            preexec_fn=_die_with_parent,  # noqa: PLW1509 - a single prctl call
            **kw,  # type: ignore[call-overload]
        )
        self._procs.append(proc)
        return proc

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self._remove()

    def _remove(self) -> None:
        """Kill what still runs and delete the namespaces; never raises (cleanup only)."""
        for proc in self._procs:
            if proc.poll() is None:
                proc.kill()
            try:
                proc.wait(timeout=10)
            except subprocess.TimeoutExpired:  # pragma: no cover - a process the kernel keeps
                pass
        for ns in reversed(self._made):
            subprocess.run(["ip", "netns", "del", ns], capture_output=True, check=False)
        self._made.clear()


def run_roles_on_hosts(
    hosts: NamespaceHosts,
    script: str,
    args: Sequence[str] = (),
    *,
    port: int = 29500,
    timeout: float = 120.0,
) -> None:
    """Run the Python file ``script`` (with ``args``) on every host as one role each, as torchrun would.

    Host ``k`` gets ``RANK=k``, ``WORLD_SIZE`` the number of hosts, ``MASTER_ADDR`` host 0's
    address (the server's), ``MASTER_PORT=port`` and ``GLOO_SOCKET_IFNAME`` (:data:`INTERFACE`);
    the script calls :func:`~cvfl_sim.vfl.distributed.run_from_env` (or
    :func:`~cvfl_sim.vfl.distributed.role_from_env`, which also gives the bytes each role sent).
    Returns when every role
    has ended well.

    Raises
    ------
    RuntimeError
        A role ended with an error (its rank, exit status and the end of its stderr), or the
        roles did not end within ``timeout`` seconds; the other roles are killed first.
    """
    env = {
        "MASTER_ADDR": hosts.address(0),
        "MASTER_PORT": str(port),
        "WORLD_SIZE": str(hosts.n),
        "GLOO_SOCKET_IFNAME": INTERFACE,
    }
    logs = [tempfile.TemporaryFile() for _ in range(hosts.n)]  # a file: a pipe could fill up
    try:
        procs = [
            hosts.popen(
                k,
                [sys.executable, script, *args],
                {**env, "RANK": str(k)},
                stdout=subprocess.DEVNULL,
                stderr=logs[k],
            )
            for k in range(hosts.n)
        ]
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            codes = [p.poll() for p in procs]  # every one polled, each time
            if all(c is not None for c in codes) or any(codes):  # done, or one failed
                break
            time.sleep(0.05)
        running = [k for k, p in enumerate(procs) if p.poll() is None]
        for p in procs:
            if p.poll() is None:
                p.kill()
            p.wait()
        failed = next(
            ((k, p.returncode) for k, p in enumerate(procs) if p.returncode and k not in running),
            None,
        )
        errors = []
        for log in logs:
            log.seek(0)
            errors.append(log.read().decode(errors="replace"))
    finally:
        for log in logs:
            log.close()
    if failed is not None:
        k, rc = failed
        tail = errors[k].strip().splitlines()[-5:]
        raise RuntimeError(
            f"role {k} on host {hosts.address(k)} exited with {rc}: " + " | ".join(tail)
        )
    if running:
        raise RuntimeError(f"roles {running} did not end within {timeout:g} s")
