"""C4.9 (ours): Lemma 1's tight bound at every local step of a round, through the drift.

:mod:`cvfl_sim.bounds.drift` bounds the left side at local step ``k`` by ``A_k^2``, with
``A_k = t_k + Lambda D_k``, ``D_{k+1} = rho D_k + eta A_k``, ``t_k^2`` C4.5 at the uncompressed
local path. Each step of the proof is compared with an independent truth where it is (nearly)
an equality, so that a wrong constant fails:

- **The recursion** (:func:`~cvfl_sim.bounds.drift.drift_bounds`): sympy solves it for a
  constant ``t`` (``A_k = t + Lambda eta t ((rho + eta Lambda)^k - 1)/(rho + eta Lambda - 1)``),
  and the package's values at ``k = 1..24`` must equal the closed form (1e-12 relative).
  Catches an ``eta`` or a ``Lambda`` dropped or doubled in the recursion.
- **The smoothness constants** (:func:`~cvfl_sim.bounds.drift.drift_constants`) against the
  largest eigenvalue of the exact float64 Hessian of the block's batch loss (the check's own
  autograd Hessian), at the points where the bound is attained: two classes at ``p = 1/2``
  (a zero head for the server block; zero parties and a head with rows ``w, -w`` for a party
  block), inputs with a nonzero mean (the bias column matters). Ratio 1 within 1e-10. Catches
  the 1/2 of ``diag p - p p^T <= I/2`` halved again, and the bias column left out.
- **The drift, path by path**, on a trained analytic model at 2 bits with a compressed server
  model, ``B = 1, Q = 25`` and ``B = 16, Q = 10``, each dither draw's compressed local path
  simulated with the check's own closed-form gradients (numpy, not the package's): for every
  block, step and draw, ``||delta^{k+1}|| <= rho ||delta^k|| + eta ||g(theta^k)||`` (the
  uncompressed step's contraction; nearly an equality, since ``g`` keeps its direction along a
  round) and ``||g(theta^k)|| <= ||g(bar theta^k)|| + Lambda ||delta^k||``, from step 1 on (at
  step 0 both are equalities whatever the constants). Pointwise statements: tolerance 1e-9
  relative. The first is tight to 2e-9: a contraction ``rho`` below 1 by more than that (a strong
  convexity the loss does not have) fails it, and :func:`~cvfl_sim.bounds.drift.drift_bounds`
  refuses ``rho < 1`` outright. The second reaches 0.99 at ``B = 1`` (the sample of largest loss),
  but ``Lambda`` is otherwise loose: the true Lipschitz constant of ``g`` is of the order of the
  error, and a ``Lambda`` of ``L_m`` instead of ``max(L_m, hat L_m)`` passes.
- **The bound**: the package's ``A_k^2`` against the Monte Carlo mean of the left side at each
  step (the same simulated paths), where C4.5 is nearly tight (6 bits, ``B = 4``, ``Q = 10``):
  ``bound >= MC - 5 SE`` at every step and block (bound / truth 1.03--2.5); and at 2 bits after
  training, ``B = 1, Q = 25`` (1.6--11) and ``B = 16, Q = 10`` (C4.5's own looseness at 2 bits,
  1e2--3e4), as validity checks.
- **C4.8 on the path** (:func:`~cvfl_sim.bounds.drift.round_sampled_bounds`, the probe's
  ``sampled_later``): the confidence bound at the points of the uncompressed path (2000 draws
  each, all of the round's at once with probability at least 0.95) plus the drift, against the
  same Monte Carlo at 2 bits after training with the server model sent uncompressed
  (``B = 16, Q = 5``): ``bound >= MC - 5 SE`` at every step and block (bound / truth 4--15 on
  the party blocks, 39--62 on the server's, where C4.8 itself is 39 and the drift adds the rest),
  a validity check of a statement that holds with probability at least 0.95 over the bound's
  own draws (fixed seed).
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import sympy as sp
import torch
from torch import nn

from ._common import Z_SE
from .result import CheckResult, Comparison

ROUNDOFF = 1e-12
"""Relative tolerance of two closed forms evaluated in float64."""

PATHWISE = 1e-9
"""Relative tolerance of a pointwise inequality evaluated in float64 along simulated paths."""

DRAWS = 300
"""Dither draws of each Monte Carlo comparison."""

SAMPLED_DRAWS = 2000
"""Dither draws of each C4.8 bound on the path (its own draws, not the Monte Carlo's)."""

SAMPLED_DELTA = 0.05
"""The round's C4.8 bounds hold all at once with probability at least ``1 - SAMPLED_DELTA``."""


# ------------------------------------------------------------------------------- the recursion
def _recursion() -> tuple[bool, float]:
    """``(sympy verdict, largest |package / closed form - 1|)`` for a constant ``t``."""
    from cvfl_sim.bounds.drift import drift_bounds

    t, lam, eta, rho, k = sp.symbols("t Lambda eta rho k", positive=True)
    q = rho + eta * lam
    A = t + lam * eta * t * (q**k - 1) / (q - 1)
    D = eta * t * (q**k - 1) / (q - 1)
    # D_{k+1} = rho D_k + eta A_k, A_k = t + Lambda D_k, D_0 = 0
    step = sp.simplify(D.subs(k, k + 1) - (rho * D + eta * A))
    start = sp.simplify(D.subs(k, 0))
    ok = step == 0 and start == 0 and sp.simplify(A - (t + lam * D)) == 0
    worst = 0.0
    for t_v, lam_v, eta_v, rho_v in ((0.7, 3.0, 0.05, 1.0), (2.0, 11.0, 0.2, 1.6)):
        got = drift_bounds(np.full((25, 1), t_v**2), eta_v, [lam_v], [rho_v])[:, 0]
        closed = A.subs({t: t_v, lam: lam_v, eta: eta_v, rho: rho_v})
        for kk in range(1, 25):
            want = float(closed.subs(k, kk)) ** 2
            worst = max(worst, abs(got[kk] / want - 1.0))
    return bool(ok), worst


# ------------------------------------------------------------------------------- the constants
def _exact_hessian_max(params: list[torch.Tensor], loss: Any) -> float:
    """Largest eigenvalue of the float64 Hessian of ``loss`` in ``params`` (flattened)."""
    flat = torch.cat([q.detach().reshape(-1) for q in params]).requires_grad_(True)

    def f(v: torch.Tensor) -> torch.Tensor:
        chunks, off = [], 0
        for q in params:
            chunks.append(v[off : off + q.numel()].reshape(q.shape))
            off += q.numel()
        return loss(chunks)

    H = torch.autograd.functional.hessian(f, flat)
    return float(torch.linalg.eigvalsh(H)[-1])


def _constants_at_tight_points() -> list[tuple[str, float]]:
    """``(block, exact Hessian max eigenvalue / L_m)`` where ``diag p - p p^T`` attains 1/2."""
    from cvfl_sim.bounds.drift import drift_constants

    gen = torch.Generator().manual_seed(3)
    B, D, P = 8, 3, 2
    x = [torch.randn(B, D, generator=gen, dtype=torch.float64) + 2.0 for _ in range(2)]
    y = torch.tensor([0, 1] * (B // 2))
    out = []
    # the server block: random parties, a zero head (p = 1/2 at every sample)
    parties = [nn.Linear(D, P).double() for _ in range(2)]
    head = nn.Linear(2 * P, 2).double()
    with torch.no_grad():
        for q in head.parameters():
            q.zero_()
        Z = torch.cat([p(xm) for p, xm in zip(parties, x)], 1)
    c = drift_constants(parties, head, x, [None, None], None, 0.1)
    exact = _exact_hessian_max(
        [head.weight, head.bias],
        lambda ch: nn.functional.cross_entropy(Z @ ch[0].T + ch[1], y),
    )
    out.append(("server block", exact / float(c.smoothness[0])))
    # party 1's block: zero parties, a head with rows (w, -w) on its columns, zero bias
    with torch.no_grad():
        for p in parties:
            for q in p.parameters():
                q.zero_()
        w = torch.tensor([0.8, -1.3], dtype=torch.float64)
        head.weight[:, :P] = torch.stack([w, -w])
        head.weight[:, P:] = torch.tensor([[0.5, 0.2], [-0.1, 0.9]], dtype=torch.float64)
    c = drift_constants(parties, head, x, [None, None], None, 0.1)
    other = parties[1](x[1]).detach()

    def party_loss(ch: list[torch.Tensor]) -> torch.Tensor:
        h = x[0] @ ch[0].T + ch[1]
        return nn.functional.cross_entropy(head(torch.cat([h, other], 1)), y)

    exact = _exact_hessian_max([parties[0].weight, parties[0].bias], party_loss)
    out.append(("party 1 block", exact / float(c.smoothness[1])))
    return out


# ------------------------------------------------------------------------------- the paths
class _Model:
    """A trained analytic model in numpy: parties ``U_m = [A_m c_m]``, head ``[W b]``."""

    def __init__(self, seed: int = 0) -> None:
        from cvfl_sim.vfl.data import load_dataset

        ds = load_dataset("breast-cancer")
        torch.manual_seed(seed)
        X = [torch.tensor(p, dtype=torch.float64) for p in ds.train_parts]
        Y = torch.tensor(ds.y_train, dtype=torch.long)
        self.torch_parties = [nn.Linear(x.shape[1], 4).double() for x in X]
        self.torch_head = nn.Linear(4 * len(X), ds.n_classes).double()
        params = [q for p in self.torch_parties for q in p.parameters()]
        params += list(self.torch_head.parameters())
        opt = torch.optim.SGD(params, lr=0.5)
        for _ in range(300):  # trained: the loss falls from 0.7 to about 0.03
            opt.zero_grad()
            Z = torch.cat([p(x) for p, x in zip(self.torch_parties, X)], 1)
            nn.functional.cross_entropy(self.torch_head(Z), Y).backward()
            opt.step()
        with torch.no_grad():
            Z = torch.cat([p(x) for p, x in zip(self.torch_parties, X)], 1)
            losses = nn.functional.cross_entropy(self.torch_head(Z), Y, reduction="none")
        self.hardest = int(torch.argmax(losses))
        self.X = [x.numpy() for x in X]
        self.Y = Y.numpy()

    def batch(self, B: int, seed: int) -> tuple[list[np.ndarray], np.ndarray]:
        """A random batch; for ``B = 1`` the sample of largest loss (a well-classified one sits
        at a softmax vertex, where every gradient difference is at round-off level)."""
        if B == 1:
            idx = np.array([self.hardest])
        else:
            idx = np.random.default_rng(seed).choice(len(self.Y), B, replace=False)
        return [x[idx] for x in self.X], self.Y[idx]

    def start(self) -> tuple[list[np.ndarray], np.ndarray]:
        """``([U_m], theta_0 = [W b])`` at the trained point."""

        def aug(layer: nn.Linear) -> np.ndarray:
            return np.hstack([layer.weight.detach().numpy(), layer.bias.detach().numpy()[:, None]])

        return [aug(p) for p in self.torch_parties], aug(self.torch_head)


def _aug(x: np.ndarray) -> np.ndarray:
    return np.concatenate([x, np.ones(x.shape[:-1] + (1,))], axis=-1)


def _softmax_residual(logits: np.ndarray, y: np.ndarray) -> np.ndarray:
    """``(p - e_y) / B`` per draw and sample: the gradient of the batch-mean cross entropy."""
    z = logits - logits.max(axis=-1, keepdims=True)
    p = np.exp(z)
    p /= p.sum(axis=-1, keepdims=True)
    p[..., np.arange(len(y)), y] -= 1.0
    return np.asarray(p / len(y))


def _server_grad(theta: np.ndarray, Zt: np.ndarray, y: np.ndarray) -> np.ndarray:
    """``grad_theta0 F_B`` per draw: ``theta (d, C, P+1)``, ``Zt (d, B, P+1)`` augmented."""
    G = _softmax_residual(np.einsum("dbp,dcp->dbc", Zt, theta), y)
    return np.asarray(np.einsum("dbc,dbp->dcp", G, Zt))


def _party_grad(
    U: np.ndarray, xt: np.ndarray, theta: np.ndarray, Zt: np.ndarray, cols: slice, y: np.ndarray
) -> np.ndarray:
    """``grad_U F_B`` per draw with the party's columns of ``Zt`` replaced by ``x~ U^T``."""
    Z = Zt.copy()
    Z[..., cols] = np.einsum("bd,kpd->kbp", xt, U)
    G = _softmax_residual(np.einsum("dbp,dcp->dbc", Z, theta), y)
    return np.asarray(np.einsum("dbc,dcp,bq->dpq", G, theta[..., cols], xt))


def _paths(
    model: _Model, B: int, Q: int, bits: int, eta: float, seed: int, server: bool = True
) -> dict[str, Any]:
    """Every draw's compressed local path, the uncompressed path, and the package's bound.

    Returns the left sides ``(draws, Q, M + 1)``, the worst ratio of each pathwise inequality,
    and the package's :class:`~cvfl_sim.bounds.drift.RoundTightBound`.
    """
    from cvfl_sim.bounds.drift import round_tight_bounds
    from cvfl_theory.compressors import ScalarQuantizer

    x, y = model.batch(B, seed)
    U0, th0 = model.start()
    xt = [_aug(xm) for xm in x]
    H = [xm @ U.T for xm, U in zip(xt, U0)]
    sizes = [h.shape[1] for h in H]
    offs = np.cumsum([0] + sizes)
    cols = [slice(int(offs[m]), int(offs[m + 1])) for m in range(len(H))]
    comp = ScalarQuantizer(bits)
    comp0 = comp if server else None
    rng = np.random.default_rng(seed + 1)
    Zs, Ths = [], []
    for _ in range(DRAWS):
        Zs.append(np.hstack([comp.roundtrip(h, rng=rng) for h in H]))
        sent = th0 if comp0 is None else comp0.roundtrip(th0.reshape(1, -1), rng=rng)
        Ths.append(sent.reshape(th0.shape))
    Zh = _aug(np.stack(Zs))  # (d, B, P+1): the compressed stale embeddings
    Z = _aug(np.broadcast_to(np.hstack(H), Zh.shape[:1] + np.hstack(H).shape).copy())
    Th = np.stack(Ths)  # (d, C, P+1): C_0(theta_0)
    T0 = np.broadcast_to(th0, Th.shape).copy()
    M = len(H)
    left = np.zeros((DRAWS, Q, M + 1))
    g_now = np.zeros((DRAWS, Q, M + 1))
    g_ref = np.zeros((DRAWS, Q, M + 1))
    dev = np.zeros((DRAWS, Q + 1, M + 1))

    def norm(a: np.ndarray) -> np.ndarray:
        return np.sqrt(np.sum(a.reshape(a.shape[0], -1) ** 2, axis=1))

    # block 0: the server steps on the compressed embeddings; the reference on the exact ones
    th, tb = T0.copy(), T0.copy()
    for k in range(Q):
        g = _server_grad(th, Z, y) - _server_grad(th, Zh, y)
        gb = _server_grad(tb, Z, y) - _server_grad(tb, Zh, y)
        left[:, k, 0], g_now[:, k, 0], g_ref[:, k, 0] = norm(g) ** 2, norm(g), norm(gb)
        th = th - eta * _server_grad(th, Zh, y)
        tb = tb - eta * _server_grad(tb, Z, y)
        dev[:, k + 1, 0] = norm(th - tb)
    for m in range(M):
        Uc = np.broadcast_to(U0[m], (DRAWS,) + U0[m].shape).copy()
        Ub = Uc.copy()
        for k in range(Q):

            def diff(U: np.ndarray, m: int = m) -> np.ndarray:
                return _party_grad(U, xt[m], T0, Z, cols[m], y) - _party_grad(
                    U, xt[m], Th, Zh, cols[m], y
                )

            g, gb = diff(Uc), diff(Ub)
            left[:, k, m + 1] = norm(g) ** 2
            g_now[:, k, m + 1], g_ref[:, k, m + 1] = norm(g), norm(gb)
            Uc = Uc - eta * _party_grad(Uc, xt[m], Th, Zh, cols[m], y)
            Ub = Ub - eta * _party_grad(Ub, xt[m], T0, Z, cols[m], y)
            dev[:, k + 1, m + 1] = norm(Uc - Ub)
    torch_x = [torch.tensor(xm) for xm in x]
    bound = round_tight_bounds(
        model.torch_parties,
        model.torch_head,
        torch_x,
        torch.tensor(y),
        comp,
        comp0,
        eta,
        Q,
    )
    lam, rho = bound.constants.lipschitz, bound.constants.contraction
    # from step 1 on (at step 0 both hold with equality whatever the constants: delta^0 = 0)
    with np.errstate(divide="ignore", invalid="ignore"):
        step_ratio = dev[:, 2:] / (rho * dev[:, 1:-1] + eta * g_now[:, 1:])
        lip_ratio = g_now[:, 1:] / (g_ref[:, 1:] + lam * dev[:, 1:-1])
    return {
        "left": left,
        "bound": bound,
        "step": float(np.nanmax(step_ratio)),
        "lip": float(np.nanmax(lip_ratio)),
    }


def _against_monte_carlo(
    what: str, bound: np.ndarray, res: dict[str, Any]
) -> tuple[Comparison, np.ndarray]:
    """``bound >= MC mean - 5 SE`` at the tightest step and block, and bound / MC per entry."""
    mean = res["left"].mean(axis=0)
    se = res["left"].std(axis=0, ddof=1) / math.sqrt(DRAWS)
    slack = (bound - (mean - Z_SE * se)) / np.maximum(mean, 1e-300)
    k, m = np.unravel_index(int(np.argmin(slack)), slack.shape)
    pair = Comparison(
        f"{what} >= MC left side - 5 SE (step {k}, block {m})",
        float(bound[k, m]),
        float(mean[k, m]),
        float(Z_SE * se[k, m]),
        ">=",
    )
    return pair, bound / mean


def check() -> CheckResult:
    from cvfl_sim.bounds.drift import round_sampled_bounds
    from cvfl_theory.compressors import ScalarQuantizer

    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        comps: list[Comparison] = []
        symbolic, worst = _recursion()
        comps.append(
            Comparison(
                "recursion: package A_k^2 / sympy closed form - 1, k = 1..24", worst, 0.0, ROUNDOFF
            )
        )
        for name, ratio in _constants_at_tight_points():
            comps.append(
                Comparison(
                    f"smoothness: exact Hessian max eigenvalue / L_m, {name} at p = 1/2",
                    ratio,
                    1.0,
                    1e-10,
                )
            )
        model = _Model()
        cases = {
            "6 bits, B = 4, Q = 10": (4, 10, 6, 0.002, 11),
            "2 bits, B = 1, Q = 25": (1, 25, 2, 0.002, 12),
            "2 bits, B = 16, Q = 10": (16, 10, 2, 0.005, 13),
        }
        tightness = {}
        main = (math.nan, math.nan, math.nan)
        for name, (B, Q, bits, eta, seed) in cases.items():
            res = _paths(model, B, Q, bits, eta, seed)
            comps.append(
                Comparison(
                    f"path: ||d^(k+1)|| / (rho ||d^k|| + eta ||g(theta^k)||) max, {name}",
                    res["step"],
                    1.0,
                    PATHWISE,
                    "<=",
                )
            )
            comps.append(
                Comparison(
                    f"path: ||g(theta^k)|| / (||g(bar theta^k)|| + Lambda ||d^k||) max, {name}",
                    res["lip"],
                    1.0,
                    PATHWISE,
                    "<=",
                )
            )
            pair, over = _against_monte_carlo(f"bound A_k^2, {name}", res["bound"].bound, res)
            comps.append(pair)
            tightness[name] = (float(over.min()), float(over.max()), res["step"])
            if bits == 6:
                main = (pair.empirical, pair.theoretical, pair.tolerance)
        # C4.8 on the path (sampled_later): the confidence bound where it is tight, 2 bits after
        # training with the server model sent uncompressed
        name = "C4.8 on the path, 2 bits, server uncompressed, B = 16, Q = 5"
        res = _paths(model, 16, 5, 2, 0.002, 14, server=False)
        x, y = model.batch(16, 14)
        sampled = round_sampled_bounds(
            model.torch_parties,
            model.torch_head,
            [torch.tensor(xm) for xm in x],
            torch.tensor(y),
            ScalarQuantizer(2),
            None,
            0.002,
            5,
            draws=SAMPLED_DRAWS,
            delta=SAMPLED_DELTA,
        ).bound
        pair, over = _against_monte_carlo(f"sampled bound, {name}", sampled, res)
        comps.append(pair)
        tightness[name] = (float(over.min()), float(over.max()), res["step"])
    finally:
        torch.set_num_threads(threads)
    return CheckResult(
        label="C4.9",
        claim="(ours) Lemma 1's left side at every local step k of a round is at most A_k^2 "
        "(C4.5 on the uncompressed local path plus the drift); main pair: the tightest step and "
        "block at 6 bits, B = 4, Q = 10 (bound >= MC - 5 SE)",
        method="sympy solution of the recursion; exact float64 Hessians at p = 1/2; every dither "
        f"draw's compressed local path in closed form ({DRAWS} draws per case, the package's "
        "quantizers), the pathwise inequalities and the Monte Carlo mean of the left side",
        symbolic=symbolic,
        empirical=main[0],
        theoretical=main[1],
        tolerance=main[2],
        relation=">=",
        note="bound/truth (min-max) and the drift step's tightness: "
        + "; ".join(f"{n}: {a:.3g}-{b:.3g}, {s:.6f}" for n, (a, b, s) in tightness.items()),
        comparisons=tuple(comps),
    )
