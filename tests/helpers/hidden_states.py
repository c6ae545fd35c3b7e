"""The independent reference for captured vectors: Hugging Face's own ``output_hidden_states`` forward.

Each prompt runs alone (no padding); location ``l`` < last must equal ``hidden_states[l]`` at the last
position. Hugging Face's last hidden state has the final norm applied, so the captured raw output of the
last block is checked through that norm instead (and must differ from the normed one).
"""

from __future__ import annotations

import torch

ATOL = 1e-5


def final_norm(model):
    base = model.base_model
    for name in ("norm", "ln_f", "final_layer_norm"):
        if hasattr(base, name):
            return getattr(base, name)
    raise AssertionError(f"no final norm on {type(base).__name__}")


def reference(model, ids: list[int]) -> torch.Tensor:
    """(n_blocks + 1, d) boundary vectors of one unpadded prompt from output_hidden_states."""
    with torch.no_grad():
        hs = model(input_ids=torch.tensor([ids]), output_hidden_states=True).hidden_states
    return torch.stack([h[0, -1] for h in hs])  # last one has the final norm applied


def assert_matches_reference(model, acts: torch.Tensor, ids: list[int], rtol: float = 0.0) -> None:
    """``acts`` (n_blocks + 1, d) equals the reference to ``ATOL`` (plus ``rtol`` times each vector's largest
    entry: padded batches change the matmul blocking, so rounding grows with the residual's scale)."""
    ref = reference(model, ids)
    assert acts.shape == ref.shape
    tol = ATOL + rtol * ref.abs().amax(dim=1, keepdim=True)
    assert torch.all((acts[:-1] - ref[:-1]).abs() <= tol[:-1]), float((acts[:-1] - ref[:-1]).abs().max())
    with torch.no_grad():
        normed = final_norm(model)(acts[-1])
    assert torch.all((normed - ref[-1]).abs() <= tol[-1]), float((normed - ref[-1]).abs().max())
    # the raw last block output is not the normed hidden state (the hook really took the raw one)
    assert (acts[-1] - ref[-1]).abs().max() > 1e-3
