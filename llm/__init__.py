"""Capture a chat model's residual stream at the assistant boundary (docs/definitions.md §2).

``CaptureConfig`` -> ``run_capture(config, out)`` -> ``CaptureResult`` (an activation folder);
``preflight_capture(config)`` refuses a capture that cannot work before any weights load. Nothing here
imports torch or transformers until it is used.
"""

from countlens.core.store import ActivationWriter, acts_array, capture_meta, load_capture, read_meta  # noqa: F401
from countlens.llm.answers import parse_answer  # noqa: F401
from countlens.llm.capture import BoundaryCapture, find_blocks  # noqa: F401
from countlens.llm.experiments import (  # noqa: F401
    CaptureConfig,
    CapturePlan,
    CaptureResult,
    PatchingConfig,
    PatchingResult,
    SteeringConfig,
    SteeringResult,
    find_pairs,
    plan_capture,
    preflight_capture,
    run_capture,
    run_patching,
    run_steering,
)
from countlens.llm.models import ModelSpec, load_model, resolve_model  # noqa: F401
from countlens.llm.patching import BoundaryEdit  # noqa: F401
from countlens.llm.prompts import Prompt, PromptSettings, build_prompts  # noqa: F401
