"""Algorithm 1 over torch.distributed (gloo, loopback) beside the C7 time model: a small Table 5.

For ``Q = 1, 10, 25`` and a per-message delay of 0, 1, 10, 50, 200 ms (one hop; a round is an
upload then a broadcast, so its round trip is twice the delay), one distributed run of
breast-cancer (4 parties, 3-bit hexagonal lattice on every message, as in C7) per cell: the
measured seconds per round at the server, the C7 model ``Q t_c + t_comm`` with the compute time
``t_c`` per local iteration measured in process, the paper's model with ``t_c = 10 ms``, and the
distributed round time ÷ the in-process (vectorised) round time. The ``delay 0`` rows are the
distributed overhead per round. Measurements only: nothing is asserted.
"""

from __future__ import annotations

import torch

from cvfl_sim.experiments.latency import format_latency_table, latency_table
from cvfl_sim.vfl.config import CVFLConfig
from cvfl_sim.vfl.data import load_dataset
from cvfl_theory.compressors import HexLatticeQuantizer


def main() -> int:
    torch.set_num_threads(1)
    ds = load_dataset("breast-cancer")
    cfg = CVFLConfig(
        lr=0.05, epochs=1, batch_size=57, embedding_size=8, compressor=HexLatticeQuantizer(3)
    )
    rows = latency_table(ds, cfg)
    print(f"{ds!r}; {rows[0]['rounds']} rounds per run")
    print(format_latency_table(rows))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
