"""Where the answer goes wrong: the lenses (Figure 13) and the components (Figure 14) of one prompt set read
together (:mod:`.experiment`), its figure and report view (:mod:`.figures`)."""
