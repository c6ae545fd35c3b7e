"""Figure 13, lenses at the boundary: read-outs through the output head and the tuned lens
(:mod:`.readout`), the experiment (:mod:`.experiment`) and its figure (:mod:`.figures`)."""
