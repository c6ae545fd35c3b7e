"""Figure 14, which component writes the answer: direct logit attribution at the boundary (:mod:`.attribution`),
the experiment (:mod:`.experiment`) and its figure (:mod:`.figures`)."""
