r"""How the messages of Algorithm 1 (C1) travel: length-prefixed byte frames between ranks.

Rank ``0`` is the server (:math:`m = 0`) and rank ``m`` is party ``m`` (:math:`m = 1..M`), as in
C0. A message is a byte string — for the algorithm's own messages the compressor's wire
bytes (:meth:`~cvfl_theory.compressors.Compressed.to_bytes`) — sent as one *frame*: its length
(one ``int64``, :data:`FRAME_BYTES` bytes), then the bytes. Every transport counts the bytes each rank sends, split by
kind:

- ``"algorithm"``: the messages of C1 — each party's :math:`C_m(h_m)` to the server and the
  server's broadcast of :math:`\hat\Phi^{t_0}` (the other parties' messages, relayed unchanged)
  and :math:`C_0(\theta_0)`. Their payload is exactly the C6 ledger, so
  ``8 * algorithm_bytes = ledger bits + framing bits`` (compressor headers, padding, checksums
  and :data:`FRAME_BYTES` per message);
- ``"measurement"``: what the simulator sends besides Algorithm 1 to evaluate and checkpoint the
  run (the parties' parameters, their measured compression errors and random-generator states).

Two transports share this interface: :class:`InProcessTransport` (queues, one process) and
:class:`cvfl_sim.vfl.distributed.GlooTransport` (``torch.distributed`` point-to-point messages).
A receiver always states the largest frame it accepts, checked before anything is allocated.
"""

from __future__ import annotations

import math
import time
from collections import deque
from collections.abc import Sequence

__all__ = ["FRAME_BYTES", "KINDS", "PeerError", "Transport", "InProcessTransport", "rank_name"]

FRAME_BYTES = 8
"""Bytes of the length prefix of every frame."""

KINDS = ("algorithm", "measurement")
"""The kinds of message a transport counts separately."""


def rank_name(rank: int) -> str:
    """``"the server"`` for rank 0, ``"party m"`` for rank ``m >= 1`` (C0 numbering)."""
    return "the server" if rank == 0 else f"party {rank}"


class PeerError(RuntimeError):
    """A peer failed to deliver a message: it crashed, hung past the timeout or sent bad bytes.

    Attributes
    ----------
    peer : int
        The rank that failed (0 is the server, ``m`` is party ``m``).
    round : int
        The global round during which the failure was seen.
    """

    def __init__(self, peer: int, round_index: int, what: str) -> None:
        super().__init__(f"{rank_name(peer)} failed at round {round_index}: {what}")
        self.peer = peer
        self.round = round_index


class Transport:
    """Byte counting, the per-message delay and the frame-size check shared by all transports.

    Parameters
    ----------
    world_size : int
        ``M + 1`` ranks.
    delay : float
        Seconds every sending phase waits before its messages leave (one network hop: the
        messages of one phase travel in parallel, so a round of Algorithm 1 — upload, then
        broadcast — waits ``2 * delay``). ``0`` (default) adds nothing.
    """

    def __init__(self, world_size: int, delay: float = 0.0) -> None:
        if isinstance(world_size, bool) or not isinstance(world_size, int) or world_size < 2:
            raise ValueError(
                f"world_size must be an integer >= 2 (a server and a party), got {world_size!r}"
            )
        if not (isinstance(delay, (int, float)) and math.isfinite(delay) and delay >= 0):
            raise ValueError(f"delay must be a finite number of seconds >= 0, got {delay!r}")
        self.world_size = world_size
        self.delay = float(delay)
        self.round = 0
        self.bytes_sent = {r: dict.fromkeys(KINDS, 0) for r in range(world_size)}

    def send_phase(self, src: int, messages: Sequence[tuple[int, bytes]], kind: str) -> None:
        """Send ``(dst, data)`` frames from ``src``, after the hop delay, and count their bytes."""
        if kind not in KINDS:
            raise ValueError(f"kind must be one of {KINDS}, got {kind!r}")
        if self.delay and messages:
            time.sleep(self.delay)
        for dst, data in messages:
            if not 0 <= dst < self.world_size or dst == src:
                raise ValueError(f"destination rank {dst} is not another rank of {self.world_size}")
            self._send(src, dst, bytes(data))
            self.bytes_sent[src][kind] += FRAME_BYTES + len(data)

    def recv(self, src: int, dst: int, max_bytes: int) -> bytes:
        """The next frame from ``src`` to ``dst``; :class:`PeerError` if longer than ``max_bytes``."""
        return self._recv(src, dst, int(max_bytes))

    def _check_length(self, src: int, n: int, max_bytes: int) -> None:
        if not 0 <= n <= max_bytes:
            raise PeerError(
                src, self.round, f"announced a {n}-byte message, expected at most {max_bytes}"
            )

    def _send(self, src: int, dst: int, data: bytes) -> None:  # pragma: no cover - abstract
        raise NotImplementedError

    def _recv(self, src: int, dst: int, max_bytes: int) -> bytes:  # pragma: no cover - abstract
        raise NotImplementedError

    def close(self) -> None:
        """Release the transport's resources (nothing for the in-process transport)."""


class InProcessTransport(Transport):
    """All ranks in one process: a FIFO queue of frames per ``(src, dst)`` pair.

    The round loop runs the roles in the order of Algorithm 1 (uploads before the broadcast), so
    a receiver always finds its frame queued; an empty queue is a bug, reported as such.

    Examples
    --------
    >>> t = InProcessTransport(3)
    >>> t.send_phase(1, [(0, b"abc")], "algorithm")
    >>> t.recv(1, 0, max_bytes=16), t.bytes_sent[1]["algorithm"]
    (b'abc', 11)
    """

    def __init__(self, world_size: int, delay: float = 0.0) -> None:
        super().__init__(world_size, delay)
        self._queues: dict[tuple[int, int], deque[bytes]] = {}

    def _send(self, src: int, dst: int, data: bytes) -> None:
        # the length prefix is implicit in a queue entry; it is counted as on a real wire
        self._queues.setdefault((src, dst), deque()).append(data)

    def _recv(self, src: int, dst: int, max_bytes: int) -> bytes:
        q = self._queues.get((src, dst))
        if not q:
            raise RuntimeError(
                f"{rank_name(dst)} waits for a message from {rank_name(src)} that was never sent "
                f"(round {self.round}): the roles ran out of order"
            )
        data = q.popleft()
        self._check_length(src, len(data), max_bytes)
        return data
