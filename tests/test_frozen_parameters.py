"""Frozen parameters (``requires_grad=False``) and the bounds wing.

The simulator trains only the parameters that require a gradient; the C3 constants, Lemma 1,
the tight term and the certificates are derivatives in every parameter. Each of them refuses
a frozen parameter with one message naming it, before measuring anything (a closed form would
count it as trained, autograd would refuse it deep inside a probe).
"""

import pytest
import torch
from _helpers import tiny_dataset
from torch import nn

from cvfl_sim.bounds.certificate import TrajectoryProbe
from cvfl_sim.bounds.lemma1 import Lemma1Probe
from cvfl_sim.bounds.theorems import estimate_constants
from cvfl_sim.bounds.tight_term import tight_lemma1_bound
from cvfl_sim.vfl.config import CVFLConfig, build_models
from cvfl_sim.vfl.train import train

DIMS = (3, 4)


def _frozen_server() -> nn.Module:
    server = nn.Linear(2 * 2, 3)  # two parties of embedding size 2, three classes
    server.bias.requires_grad_(False)
    return server


def _cfg(**kw):
    base = dict(Q=2, lr=0.05, epochs=1, batch_size=8, embedding_size=2, parties_model="linear")
    return CVFLConfig(**{**base, **kw})


def test_the_simulator_trains_around_a_frozen_parameter():
    # the premise: training leaves the frozen bias as it was
    server = _frozen_server()
    before = server.bias.detach().clone()
    run = train(tiny_dataset(40, DIMS), _cfg(server_model=server))
    assert torch.equal(run.models["server"].bias.detach(), before)
    assert not torch.equal(run.models["server"].weight.detach(), server.weight.detach())


@pytest.mark.parametrize(
    "probe, what",
    [
        (lambda ds, cfg: Lemma1Probe(every=1, steps="first"), "Lemma1Probe"),
        (lambda ds, cfg: TrajectoryProbe(ds, cfg, progress=False), "the trajectory certificate"),
    ],
    ids=["lemma1", "certificate"],
)
def test_the_probes_refuse_a_frozen_parameter_at_the_first_step(probe, what):
    ds, cfg = tiny_dataset(40, DIMS), _cfg(server_model=_frozen_server())
    seen = []

    def recorder(**kw):
        seen.append((kw["round_index"], kw["step"]))
        return p(**kw)

    p = probe(ds, cfg)
    with pytest.raises(ValueError, match=rf"^{what} needs .* the server model has the frozen "):
        train(ds, cfg, probe=recorder)
    assert seen == [(0, 0)]  # refused at the first step, before any update


def test_estimate_constants_refuses_a_frozen_party_parameter():
    ds, cfg = tiny_dataset(40, DIMS), _cfg()
    parties, server = build_models(ds, cfg)
    name, q = next(iter(parties[1].named_parameters()))
    q.requires_grad_(False)
    with pytest.raises(ValueError, match=rf"party 2's model has the frozen parameter '{name}'"):
        estimate_constants(ds, cfg, {"parties": parties, "server": server}, include_initial=False)


def test_the_tight_term_refuses_a_frozen_parameter():
    parties = [nn.Linear(d, 2).double() for d in DIMS]
    server = _frozen_server().double()
    xs = [torch.zeros(5, d, dtype=torch.float64) for d in DIMS]
    y = torch.zeros(5, dtype=torch.long)
    with pytest.raises(ValueError, match="the tight Lemma-1 term needs .* frozen parameter 'bias'"):
        tight_lemma1_bound(parties, server, xs, y, [0.1, 0.1])
