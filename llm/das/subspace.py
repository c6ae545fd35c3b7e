"""Distributed alignment search's numerics (docs/definitions.md, "The causal count subspace"): pure functions of
arrays and one small ``torch`` module, no model and no I/O.

An orthonormal basis ``R`` (d, k) of a subspace of the residual stream; the *interchange* of a (base, source)
pair writes the source's coordinates in that subspace into the base's vector and keeps the base's elsewhere::

    h_base ← h_base + R Rᵀ (h_source − h_base)

Full rank (``R Rᵀ = I``) is boundary patching; rank 0 changes nothing. Learned, ``R`` lives in :func:`orthonormal_module` ``R``
under ``torch.nn.utils.parametrizations.orthogonal`` (Householder products for k < d, the matrix exponential
for k = d), so every step's ``R`` is orthonormal to float precision. The controls' bases — a random subspace of
the same rank, one direction (the probe's, the mean difference's) — are :func:`random_basis` and
:func:`direction_basis`; :func:`principal_angle_deg` is the angle between a subspace and a direction.
"""

from __future__ import annotations

import numpy as np


def interchange(h_base, h_source, basis):
    """``h_base + (h_source − h_base) R Rᵀ``: (B, d) vectors with their coordinates in span(R) taken from
    ``h_source`` (B, d); ``basis`` R (d, k) orthonormal columns. numpy arrays or torch tensors (differentiable
    in ``basis``)."""
    return h_base + interchange_step(h_base, h_source, basis)


def interchange_step(h_base, h_source, basis):
    """``(h_source − h_base) R Rᵀ`` (B, d): what the interchange adds to the base vectors (the value of the
    ``add`` boundary setter that performs it during a forward)."""
    return ((h_source - h_base) @ basis) @ basis.T


def random_basis(d: int, k: int, seed: int) -> np.ndarray:
    """(d, k) orthonormal basis of a subspace drawn uniformly (Haar) from the rank-k subspaces of R^d, seeded:
    the QR of a Gaussian matrix, signs fixed by R's diagonal."""
    g = np.random.default_rng([int(seed), int(d), int(k)]).standard_normal((int(d), int(k)))
    q, r = np.linalg.qr(g)
    return q * np.sign(np.where(np.diag(r) == 0, 1.0, np.diag(r)))


def direction_basis(u: np.ndarray) -> np.ndarray:
    """(d, 1) the unit vector of ``u`` (d,) as a rank-1 basis; ``ValueError`` for a zero vector."""
    u = np.asarray(u, dtype=np.float64)
    norm = float(np.linalg.norm(u))
    if not norm > 0:
        raise ValueError("the direction is zero")
    return (u / norm)[:, None]


def principal_angle_deg(basis: np.ndarray, u: np.ndarray) -> float:
    """The principal angle, in degrees, between span(``basis``) (d, k orthonormal) and the direction ``u``
    (d,): ``arccos ‖Rᵀ û‖`` (0: u lies in the subspace; 90: orthogonal to it)."""
    cos = float(np.linalg.norm(np.asarray(basis, dtype=np.float64).T @ direction_basis(u)[:, 0]))
    return float(np.degrees(np.arccos(min(1.0, cos))))


def is_orthonormal(basis: np.ndarray, tol: float = 1e-5) -> bool:
    """Whether ``basis`` (d, k) has orthonormal columns: ``max |RᵀR − I| <= tol``."""
    basis = np.asarray(basis, dtype=np.float64)
    return bool(np.abs(basis.T @ basis - np.eye(basis.shape[1])).max() <= tol)


def orthonormal_module(d: int, k: int, seed: int):
    """A learnable orthonormal basis R (d, k): a ``torch.nn.Linear(d, k)`` whose weight (k, d) is under
    ``torch.nn.utils.parametrizations.orthogonal`` (its rows orthonormal at every step), initialised to
    :func:`random_basis` (``seed``); :func:`basis_of` reads R from it."""
    import torch
    from torch.nn.utils import parametrizations

    if not 1 <= int(k) <= int(d):
        raise ValueError(f"a rank-k basis of R^{d} needs 1 <= k <= {d}, got k = {k}")
    layer = torch.nn.Linear(int(d), int(k), bias=False)
    with torch.no_grad():
        layer.weight.copy_(torch.as_tensor(random_basis(d, k, seed).T, dtype=torch.float32))
    parametrizations.orthogonal(layer, "weight")
    return layer


def basis_of(module):
    """R (d, k) of an :func:`orthonormal_module` (a differentiable tensor)."""
    return module.weight.T


__all__ = ["interchange", "interchange_step", "random_basis", "direction_basis", "principal_angle_deg",
           "is_orthonormal", "orthonormal_module", "basis_of"]
