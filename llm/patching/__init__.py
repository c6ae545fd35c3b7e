"""Figure 9a, boundary activation patching: the edits every causal experiment writes into a forward
(:mod:`.edits`), the experiment (:mod:`.experiment`) and its figure (:mod:`.figures`)."""
