"""Capture a chat model's residual stream at the assistant boundary (SPEC §2).

Only the data-set format is imported eagerly; model loading and capture import torch/transformers on use.
"""

from countlens.store import ActivationWriter, acts_array, capture_meta, load_capture, read_meta  # noqa: F401
