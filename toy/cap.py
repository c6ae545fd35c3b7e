"""The norm cap of training: the projection onto the ball of radius ``B`` (each vector, each row of ``U``;
scalars clipped), and :class:`PolarCoordinates`, the parametrization in which the cap is part of the map
(docs/definitions.md §1.7)."""

from __future__ import annotations

import math

import torch

from countlens.toy.model import ToyParams


def _project(name: str, t: torch.Tensor, cap: float | None) -> float:
    """Scale one parameter back to the cap in place (rows of ``U`` one by one; ``b0``, ``c`` clipped; ``None``:
    no cap); returns its largest norm before."""
    if t.dim() == 0 or name == "c":
        peak = float(t.abs().max())
        if cap is not None:
            t.clamp_(-cap, cap)
    elif name == "U":
        norms = torch.linalg.vector_norm(t, dim=1, keepdim=True)  # (L+1, 1)
        peak = float(norms.max())
        if cap is not None:
            t.mul_(torch.clamp(cap / norms.clamp_min(1e-300), max=1.0))
    else:
        peak = float(torch.linalg.vector_norm(t))
        if cap is not None and peak > cap:
            t.mul_(cap / peak)
    return peak


def project_to_cap(p: ToyParams, cap: float) -> float:
    """Scale every vector back to norm ``<= cap`` in place (rows of ``U`` one by one; ``b0``, ``c`` clipped).

    Returns the largest norm (``|value|`` for scalars and ``c``'s entries) before the projection: when it is
    ``<= cap`` the projection changed nothing, bit for bit.
    """
    with torch.no_grad():
        return max(_project(name, t, cap) for name, t in p.tensors().items())


class PolarCoordinates:
    """What the optimiser moves under ``parametrization="polar"``: each vector ``v`` (each row of ``U``) as
    ``exp(min(ρ, log B)) u / |u|``, its log norm ``ρ`` and its direction ``u``, under the cap ``B``
    (``cap=None``: no bound). Scalars (``b0``, ``c``'s entries) and vectors that are exactly zero at the start
    (LN's bias at initialisation) keep their entries and :func:`project_to_cap`.

    Why: counting to a larger L asks the read-out to grow with a score scale that is exponential in squared
    norms (softmax: the boundary's weight ``a = exp(τ z_b·(z_b − z_s))``, the count read as ``w·z_s n / a``).
    In the vectors' entries that valley bends exponentially and L-BFGS stalls in it; in log norms it is a
    gentle curve (measured: BENCHMARKS.md). The cap is part of the map, so every point the line search
    tries is inside the ball (no overflowing trial points) and the log norm's gradient is zero beyond it;
    after each step ``ρ`` is set back to ``log B`` where it went past, which changes no vector.
    """

    def __init__(self, params: ToyParams, cap: float | None = None):
        self.cap = cap
        self.peak = 0.0  # the largest exp(ρ) any evaluation met since the last project()
        self.rho: dict[str, torch.Tensor] = {}  # (1,) or, for U, (L+1, 1)
        self.u: dict[str, torch.Tensor] = {}
        with torch.no_grad():
            for name, t in params.tensors().items():
                if t.dim() == 0 or name == "c":
                    continue
                norms = torch.linalg.vector_norm(t, dim=-1, keepdim=True)
                if bool((norms > 0).all()):
                    self.rho[name] = norms.log().clone().requires_grad_(True)
                    self.u[name] = (t / norms).clone().requires_grad_(True)
        self.cartesian = [name for name in params.tensors() if name not in self.rho]

    def leaves(self, params: ToyParams) -> list[torch.Tensor]:
        """The tensors the optimiser steps."""
        tensors = params.tensors()
        return [*self.rho.values(), *self.u.values(), *(tensors[k] for k in self.cartesian)]

    def _inside(self, rho: torch.Tensor) -> torch.Tensor:
        """Where ``exp(ρ)`` is within the cap (bool, shaped like ``ρ``)."""
        return torch.ones_like(rho, dtype=torch.bool) if self.cap is None else torch.exp(rho) <= self.cap

    def _capped(self, rho: torch.Tensor) -> torch.Tensor:
        """``ρ``, set to ``log B`` where ``exp(ρ)`` is past the cap."""
        if self.cap is None:
            return rho
        return torch.where(self._inside(rho), rho, torch.full_like(rho, math.log(self.cap)))

    def write(self, params: ToyParams) -> None:
        """Set the polar vectors of ``params`` from ``(ρ, u)``, in place; records the largest ``exp(ρ)``."""
        tensors = params.tensors()
        with torch.no_grad():
            for name, rho in self.rho.items():
                self.peak = max(self.peak, float(torch.exp(rho).max()))
                u = self.u[name]
                tensors[name].copy_(torch.exp(self._capped(rho)) * u / torch.linalg.vector_norm(u, dim=-1, keepdim=True))

    def set_grads(self, params: ToyParams, grads: dict[str, torch.Tensor]) -> None:
        """Chain rule from the vectors' gradients (after :meth:`write`): ``dρ = g·v`` (0 beyond the cap),
        ``du = |v|/|u| (g − (g·û) û)``. Empty ``grads`` (an infinite loss): zeros."""
        tensors = params.tensors()
        for name in self.cartesian:
            tensors[name].grad = grads[name] if grads else torch.zeros_like(tensors[name])
        for name, rho in self.rho.items():
            u, v = self.u[name].detach(), tensors[name].detach()
            g = grads[name] if grads else torch.zeros_like(u)
            norm = torch.linalg.vector_norm(u, dim=-1, keepdim=True)
            uh = u / norm
            rho.grad = (g * v).sum(dim=-1, keepdim=True) * self._inside(rho.detach())
            self.u[name].grad = (torch.linalg.vector_norm(v, dim=-1, keepdim=True) / norm
                                 * (g - (g * uh).sum(dim=-1, keepdim=True) * uh))

    def project(self, params: ToyParams) -> float:
        """After a step: ``ρ`` back to ``log B`` where it went past, each ``u`` to unit norm (neither changes a
        vector), the Cartesian parameters by :func:`project_to_cap`; writes ``params``. Returns the largest
        norm any evaluation since the last call met (at most the cap: the cap changed nothing, bit for bit)."""
        tensors = params.tensors()
        with torch.no_grad():
            for name, rho in self.rho.items():
                self.peak = max(self.peak, float(torch.exp(rho).max()))  # where the step ended
                rho.copy_(self._capped(rho))
                u = self.u[name]
                u.div_(torch.linalg.vector_norm(u, dim=-1, keepdim=True))
            peak = max([self.peak, *(_project(name, tensors[name], self.cap) for name in self.cartesian)])
        self.write(params)
        self.peak = 0.0
        return peak

    def state(self) -> dict[str, dict[str, torch.Tensor]]:
        return {"rho": {k: v.detach().clone() for k, v in self.rho.items()},
                "u": {k: v.detach().clone() for k, v in self.u.items()}}

    def load(self, state: dict[str, dict[str, torch.Tensor]], params: ToyParams) -> None:
        with torch.no_grad():
            for part, own in (("rho", self.rho), ("u", self.u)):
                for k, v in own.items():
                    v.copy_(state[part][k])
        self.write(params)
        self.peak = 0.0


__all__ = ["project_to_cap", "PolarCoordinates"]
