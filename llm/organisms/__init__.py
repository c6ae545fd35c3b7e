"""Model organisms: small stock-architecture chat models trained by countlens to count, with a planted circuit
(only the live heads write to the residual) — the numerics (:mod:`.train`), the experiment (:mod:`.experiment`)
and the ground-truth checks (:mod:`.checks`)."""
