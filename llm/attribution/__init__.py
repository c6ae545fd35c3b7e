"""Figure 15, attribution patching checked against activation patching: the gradient pass and the estimates
(:mod:`.atp`), the experiment (:mod:`.experiment`) and its figure (:mod:`.figures`)."""
