"""Figure 12, the heads that read the items: attention masses and head ablation (:mod:`.attention`), the
experiment (:mod:`.experiment`) and its figure (:mod:`.figures`)."""
