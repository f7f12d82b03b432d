"""The C4.8 table of ``docs/theory/sampled_lemma1.rst``: bound ÷ Monte-Carlo truth after training.

For breast cancer (10 epochs) and digits quadrants (5 epochs), four MLP parties, a linear head,
B = 64, trained with the scalar or hexagonal quantizer at 2 and 4 bits: the C4.8 bound (4000
draws, delta = 0.05) and the C4.5 tight term on one batch, each divided by a float64 Monte Carlo
of the truth (2000 draws, seeds independent of the bound's), with the server model sent
uncompressed and compressed like the embeddings; then the party blocks' bound from 80 000 draws
(another seed). Prints the table's rows (about 10 minutes on 2 cores). Not part of ``make bench`` (it measures tightness, not speed); run it as
``python benchmarks/measure_sampled_lemma1.py``.
"""

from __future__ import annotations

import time

import numpy as np
import torch
from _timing import cpu_line

from cvfl_sim.bounds.sampled_lemma1 import sampled_lemma1_bound
from cvfl_sim.bounds.tight_term import tight_lemma1_bound_for
from cvfl_sim.vfl.compressors import make_compressor
from cvfl_sim.vfl.config import CVFLConfig
from cvfl_sim.vfl.data import load_dataset
from cvfl_sim.vfl.train import train
from cvfl_theory.compressors import Identity
from proofs_checks.c4_5_tight_term import measured_lemma1

B = 64
MC_DRAWS = 2000
BOUND_DRAWS = 4000
MANY_DRAWS = 80_000
"""The party blocks again with 20 times the draws (the terms above the draws' mean ~ 1/k)."""


def trained(name: str, kind: str, bits: int, epochs: int, seed: int = 1) -> tuple:
    """A run's trained float64 models and one batch of ``B`` training samples."""
    ds = load_dataset(name)
    cfg = CVFLConfig(
        Q=1,
        lr=0.1,
        epochs=epochs,
        batch_size=B,
        parties_model="mlp",
        server_model="linear",
        compressor=make_compressor(kind, bits),
        seed=seed,
    )
    res = train(ds, cfg)
    assert res.models is not None
    parties = [p.double() for p in res.models["parties"]]
    server = res.models["server"].double()
    idx = np.random.default_rng(seed).choice(ds.train_parts[0].shape[0], B, replace=False)
    xs = [torch.tensor(x[idx], dtype=torch.float64) for x in ds.train_parts]
    y = torch.tensor(ds.y_train[idx], dtype=torch.long)
    return parties, server, xs, y, make_compressor(kind, bits)


def _g(x: float) -> str:
    """Three significant digits without an exponent (2920, not 2.92e+03)."""
    return f"{float(f'{x:.3g}'):g}"


def main() -> None:
    print(cpu_line())
    names = {"scalar": "scalar", "lattice": "hex"}
    for name, epochs in (("breast-cancer", 10), ("digits-quadrants", 5)):
        for kind in ("scalar", "lattice"):
            for bits in (2, 4):
                parties, server, xs, y, c = trained(name, kind, bits, epochs)
                for compressed in (False, True):
                    c0 = c if compressed else Identity(64)
                    tick = time.perf_counter()
                    r = sampled_lemma1_bound(
                        parties, server, xs, y, c, c0, draws=BOUND_DRAWS, seed=3
                    )
                    seconds = time.perf_counter() - tick
                    truth = measured_lemma1(parties, server, xs, y, c, c0, MC_DRAWS, seed=99)
                    truth = truth.mean(axis=0)
                    tight = tight_lemma1_bound_for(parties, server, xs, y, c, c0).bound / truth
                    ratio = r.bound / truth
                    tick = time.perf_counter()
                    many = sampled_lemma1_bound(
                        parties, server, xs, y, c, c0, draws=MANY_DRAWS, seed=4
                    )
                    many_seconds = time.perf_counter() - tick
                    many_ratio = many.bound[1:] / truth[1:]
                    print(
                        f"{name.replace('-', ' '):<20}  {names[kind] + f' {bits}':<11}  "
                        f"{'yes' if compressed else 'no':<10}  {_g(ratio[0]):<6}  "
                        f"{_g(ratio[1:].min()) + '–' + _g(ratio[1:].max()):<12}  "
                        f"{_g(tight.min()) + '–' + _g(tight.max()):<12}  {seconds:<8.1f}  "
                        f"{_g(many_ratio.min()) + '–' + _g(many_ratio.max()):<12}  "
                        f"{many_seconds:.1f}",
                        flush=True,
                    )


if __name__ == "__main__":
    main()
