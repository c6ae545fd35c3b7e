"""The causal count subspace: distributed alignment search at the boundary (docs/definitions.md, "The causal
count subspace"). Numerics: :mod:`.subspace` (the interchange, orthonormal bases, angles) and :mod:`.search` (the
interchange run through the model, learning and scoring a basis); the experiment: :mod:`.experiment`
(:class:`DasConfig` -> :func:`run_das` -> :class:`DasResult`)."""
