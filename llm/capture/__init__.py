"""The capture: counting prompts through a model, the residual stream kept at the assistant boundary (and, on
request, at every item) — numerics in :mod:`.residuals`, the experiment in :mod:`.experiment`, the Ray
runner in :mod:`.distributed`."""
