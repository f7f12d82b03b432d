"""The analytic model's C3 constants against numeric Jacobians/Hessians and exact enumeration."""

from __future__ import annotations

import itertools

import numpy as np
import pytest
import torch

from cvfl_sim.bounds.analytic_constants import (
    LinearPoint,
    analytic_constants,
    cross_hessian_norm,
    embedding_jacobian_norm,
    embedding_jacobian_sup,
    sigma2_exact,
    smoothness_bound,
    softmax_parts,
    train_recorded,
)

D = (3, 2)
P = (2, 2)
K = 3


def _setup(n: int = 12, seed: int = 0) -> tuple[list[np.ndarray], np.ndarray, LinearPoint]:
    rng = np.random.default_rng(seed)
    parts = [rng.normal(size=(n, d)) for d in D]
    y = rng.integers(0, K, size=n)
    W = tuple(rng.normal(size=(p, d + 1)) for p, d in zip(P, D))
    A = rng.normal(size=(K, sum(P) + 1))
    return parts, y, LinearPoint(W=W, A=A)


def _t(a: np.ndarray) -> torch.Tensor:
    return torch.as_tensor(a, dtype=torch.float64)


def _loss_from_params(parts, y, flat_params, shapes):
    """F (mean CE) as a torch function of all parameters [A~, W~_1, ..., W~_M] flattened."""
    mats, off = [], 0
    for s in shapes:
        n = int(np.prod(s))
        mats.append(flat_params[off : off + n].reshape(s))
        off += n
    A, Ws = mats[0], mats[1:]
    Z = torch.cat([_t(x) @ w[:, :-1].T + w[:, -1] for x, w in zip(parts, Ws)], dim=1)
    logits = Z @ A[:, :-1].T + A[:, -1]
    return torch.nn.functional.cross_entropy(logits, torch.as_tensor(y))


def _flat(point: LinearPoint) -> tuple[torch.Tensor, list[tuple[int, ...]]]:
    mats = [point.A, *point.W]
    return _t(np.concatenate([m.ravel() for m in mats])), [m.shape for m in mats]


def test_softmax_curvature_closed_form_two_classes():
    # K = 2: S = p(1-p) [[1,-1],[-1,1]], eigenvalues 0 and 2 p (1 - p) <= 1/2
    o = np.array([[0.3, -1.2], [2.0, 2.0], [-4.0, 1.0]])
    p, g, S, s = softmax_parts(o, [0, 1, 1])
    q = 1.0 / (1.0 + np.exp(o[:, 1] - o[:, 0]))  # p_0
    np.testing.assert_allclose(s, 2 * q * (1 - q), rtol=1e-12)
    assert np.all(np.linalg.norm(g, axis=1) <= np.sqrt(2))


def test_G_equals_numeric_jacobian_operator_norm():
    parts, _, point = _setup()
    Xb = parts[0][:5]
    Wt = _t(point.W[0])

    def emb(w: torch.Tensor) -> torch.Tensor:
        return (_t(Xb) @ w[:, :-1].T + w[:, -1]).reshape(-1)

    J = torch.autograd.functional.jacobian(emb, Wt).reshape(5 * P[0], -1).numpy()
    assert embedding_jacobian_norm(Xb) == pytest.approx(np.linalg.norm(J, 2), rel=1e-12)
    # closed form derived here: J = Xt (x) I_P up to permutations, so ||J||_2 = sigma_max(Xt)
    Xt = np.hstack([Xb, np.ones((5, 1))])
    assert np.linalg.norm(J, 2) == pytest.approx(np.sqrt(np.linalg.eigvalsh(Xt.T @ Xt)[-1]))


def test_G_sup_covers_every_batch_and_is_exact_for_one_row():
    rng = np.random.default_rng(3)
    X = rng.normal(size=(8, 2)) * [1.0, 4.0]
    for B in (1, 2, 3, 5):
        worst = max(
            embedding_jacobian_norm(X[list(c)])
            for b in range(1, B + 1)
            for c in itertools.combinations(range(8), b)
        )
        assert worst <= embedding_jacobian_sup(X, B) * (1 + 1e-12)
    exact_one = np.sqrt(np.max(np.sum(X**2, axis=1)) + 1.0)
    assert embedding_jacobian_sup(X, 1) == pytest.approx(exact_one, rel=1e-12)
    with pytest.raises(ValueError, match="B must be"):
        embedding_jacobian_sup(X, 9)


def _batch_hessian(parts, y, point, rows):
    """Numeric Hessian of F_B w.r.t. [vec(H_1), ..., vec(H_M), vec(A~)] (batch mean)."""
    Z0 = np.hstack(
        [np.hstack([x[rows], np.ones((len(rows), 1))]) @ w.T for x, w in zip(parts, point.W)]
    )
    n_h = Z0.size
    v0 = np.concatenate([Z0.T.ravel(), point.A.ravel()])  # H stored block by block, column-major

    def f(v: torch.Tensor) -> torch.Tensor:
        Z = v[:n_h].reshape(sum(P), len(rows)).T
        A = v[n_h:].reshape(point.A.shape)
        return torch.nn.functional.cross_entropy(
            Z @ A[:, :-1].T + A[:, -1], torch.as_tensor(y[rows])
        )

    Hs = torch.autograd.functional.hessian(f, _t(v0)).numpy()
    b = len(rows)
    offs = np.concatenate([[0], np.cumsum(P)]) * b
    return Hs, offs, n_h, Z0


def test_cross_hessian_embedding_block_is_exact():
    parts, y, point = _setup()
    rows = np.array([0, 3, 4, 7, 9])
    Hs, offs, n_h, Z0 = _batch_hessian(parts, y, point, rows)
    logits = Z0 @ point.A[:, :-1].T + point.A[:, -1]
    for m in (1, 2):
        own = np.arange(offs[m - 1], offs[m])
        other = np.setdiff1d(np.arange(n_h), own)
        numeric = np.linalg.norm(Hs[np.ix_(own, other)], 2)
        assert cross_hessian_norm(point.A[:, :-1], logits, P, m) == pytest.approx(
            numeric, rel=1e-10
        )


def test_server_blocks_are_bounded():
    parts, y, point = _setup()
    rows = np.array([1, 2, 5, 6, 8, 11])
    b = len(rows)
    Hs, offs, n_h, Z0 = _batch_hessian(parts, y, point, rows)
    theta0 = np.arange(n_h, Hs.shape[0])
    zmax = np.sqrt(1 + np.max(np.sum(Z0**2, axis=1)))
    A = point.A[:, :-1]
    h0 = np.linalg.norm(Hs[np.ix_(theta0, np.arange(n_h))], 2)
    assert h0 <= (np.sqrt(2) + 0.5 * np.linalg.norm(A, 2) * zmax) / np.sqrt(b)
    for m in (1, 2):
        own = np.arange(offs[m - 1], offs[m])
        Am = A[:, sum(P[: m - 1]) : sum(P[:m])]
        Ao = np.delete(A, np.arange(sum(P[: m - 1]), sum(P[:m])), axis=1)
        blk = np.linalg.norm(Hs[np.ix_(own, theta0)], 2)
        assert blk <= (np.sqrt(2) + 0.5 * np.linalg.norm(Am, 2) * zmax) / np.sqrt(b)
        emb = 0.5 * np.linalg.norm(Am, 2) * np.linalg.norm(Ao, 2) / b
        other = np.setdiff1d(np.arange(Hs.shape[0]), own)
        joint = np.linalg.norm(Hs[np.ix_(own, other)], 2)
        assert joint <= np.hypot(
            emb, (np.sqrt(2) + 0.5 * np.linalg.norm(Am, 2) * zmax) / np.sqrt(b)
        )


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_smoothness_bound_dominates_numeric_hessian(seed):
    parts, y, point = _setup(n=15, seed=seed)
    v, shapes = _flat(point)
    Hs = torch.autograd.functional.hessian(lambda w: _loss_from_params(parts, y, w, shapes), v)
    L_num = np.max(np.abs(np.linalg.eigvalsh(Hs.numpy())))
    bound = smoothness_bound(point, parts, y)
    assert L_num <= bound
    assert bound <= 20 * L_num  # not vacuous on this small problem


def test_sigma2_equals_exact_enumeration_of_batches():
    parts, y, point = _setup(n=7, seed=5)
    B = 3
    v, shapes = _flat(point)
    full = torch.autograd.grad(_loss_from_params(parts, y, v.requires_grad_(True), shapes), v)[0]
    sizes = [int(np.prod(s)) for s in shapes]
    dev = np.zeros(len(shapes))
    subsets = list(itertools.combinations(range(7), B))
    for c in subsets:
        idx = list(c)
        vb = v.detach().clone().requires_grad_(True)
        gb = torch.autograd.grad(
            _loss_from_params([x[idx] for x in parts], y[idx], vb, shapes), vb
        )[0]
        for k, (d_b, d_f) in enumerate(zip(gb.split(sizes), full.split(sizes))):
            dev[k] += float(((d_b - d_f) ** 2).sum())
    expected = B * dev / len(subsets)  # sigma_m^2 = B E||grad_m F_B - grad_m F||^2
    np.testing.assert_allclose(sigma2_exact(point, parts, y, B, [B]), expected, rtol=1e-10)


def test_lemma1_holds_with_the_run_constants():
    """C4.1 with the analytic constants on a recorded run: right side >= the exact left side."""
    from cvfl_sim import CVFLConfig, load_dataset
    from cvfl_theory.compressors import ScalarQuantizer

    ds = load_dataset("breast-cancer")
    B = 64
    cfg = CVFLConfig(
        Q=2,
        lr=0.05,
        epochs=1,
        batch_size=B,
        parties_model="linear",
        embedding_size=3,
        compressor=ScalarQuantizer(2, range="minmax-tensor"),
        server_compressor=None,
        dtype="float64",
    )
    res, traj = train_recorded(ds, cfg)
    assert len(traj.points) >= len(res.rounds["lr"]) * cfg.Q
    c = analytic_constants(ds, traj, B)
    assert c.b_min == ds.n_train - (ds.n_train // B) * B
    # the left side at the last point, on a batch, with 2-bit compressed embeddings of the others
    pt = traj.points[-1]
    rows = np.arange(B)
    xb = [np.asarray(x)[rows] for x in ds.train_parts]
    Hb = [np.hstack([x, np.ones((B, 1))]) @ w.T for x, w in zip(xb, pt.W)]
    q = ScalarQuantizer(2, range="minmax-tensor")
    gen = np.random.default_rng(0)
    Hhat = [np.asarray(q.roundtrip(h, rng=gen), dtype=np.float64) for h in Hb]
    y = np.asarray(ds.y_train)[rows]
    for m in range(1, ds.n_parties + 1):
        Wm = _t(pt.W[m - 1]).requires_grad_(True)

        def grad_m(others):
            hm = _t(xb[m - 1]) @ Wm[:, :-1].T + Wm[:, -1]
            Z = torch.cat([hm if j == m - 1 else _t(others[j]) for j in range(ds.n_parties)], 1)
            A = _t(pt.A)
            loss = torch.nn.functional.cross_entropy(Z @ A[:, :-1].T + A[:, -1], torch.as_tensor(y))
            return torch.autograd.grad(loss, Wm)[0]

        left = float(((grad_m(Hb) - grad_m(Hhat)) ** 2).sum())
        err = sum(float(((Hhat[j] - Hb[j]) ** 2).sum()) for j in range(ds.n_parties) if j != m - 1)
        right = c.H[m] ** 2 * c.G[m] ** 2 * err
        assert 0 < left <= right
