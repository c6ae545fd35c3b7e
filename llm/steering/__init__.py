"""Figure 9b, steering at the boundary: the experiment (:mod:`.experiment`) and its figure (:mod:`.figures`)."""
