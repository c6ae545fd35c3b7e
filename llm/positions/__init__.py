"""Figure 11, patching over positions and layers: the experiment (:mod:`.experiment`) and its figure
(:mod:`.figures`)."""
