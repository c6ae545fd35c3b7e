"""The llm room: a chat model's residual stream on counting prompts, and the causal experiments on it
(docs/definitions.md §2-3).

Grouped by concern: :mod:`.models` (resolve, convert, load), :mod:`.prompts`, :mod:`.answers` (the model's
own answer and its distribution), :mod:`.hooks` (the one hook-site registry), and one folder per experiment
with its figure beside it — :mod:`.capture`, :mod:`.patching` (Figure 9a), :mod:`.steering` (9b),
:mod:`.positions` (11), :mod:`.heads` (12), :mod:`.lens` (13), :mod:`.components` (14), :mod:`.attribution`
(15), :mod:`.diagnosis` (where the answer goes wrong, from the lenses and components), and :mod:`.organisms`
(chat models trained to count with a planted circuit, their checks, and their scaling against L). Nothing
here imports torch or transformers until it is used.
"""

from countlens.core.capture import Capture, CaptureMeta, open_capture  # noqa: F401
from countlens.core.options import option_value, with_options  # noqa: F401
from countlens.core.store import ActivationWriter, acts_array, load_capture, read_meta  # noqa: F401
from countlens.llm.answers import parse_answer  # noqa: F401
from countlens.llm.capture.experiment import (  # noqa: F401
    ACTS_DTYPES,
    PADDING_SIDES,
    SHARD_ROWS,
    CaptureConfig,
    CapturePlan,
    CaptureResult,
    capture_is_whole,
    capture_runner,
    find_pairs,
    plan_capture,
    preflight_capture,
    random_init_model,
    run_capture,
)
from countlens.llm.capture.residuals import BoundaryCapture, find_blocks  # noqa: F401
from countlens.llm.heads.experiment import HeadsConfig, HeadsResult, plan_heads, run_heads  # noqa: F401
from countlens.llm.lens.experiment import LensConfig, LensResult, run_lens  # noqa: F401
from countlens.llm.models import ModelSpec, load_model, resolve_model  # noqa: F401
from countlens.llm.patching.edits import (  # noqa: F401
    BoundaryEdit,
    Patch,
    Setter,
    expected_count,
    logit_difference,
)
from countlens.llm.patching.experiment import (  # noqa: F401
    PatchingConfig,
    PatchingResult,
    boundary_vectors,
    run_patching,
)
from countlens.llm.patching.replay import PositionPatcher  # noqa: F401
from countlens.llm.positions.experiment import (  # noqa: F401
    PositionPatchingConfig,
    PositionPatchingResult,
    run_position_patching,
)
from countlens.llm.prompts import Prompt, PromptSettings, build_prompts  # noqa: F401
from countlens.llm.steering.experiment import (  # noqa: F401
    SteeringConfig,
    SteeringResult,
    capture_model,
    probe_direction,
    run_steering,
)

__all__ = [
    "Capture", "CaptureMeta", "open_capture", "option_value", "with_options", "ActivationWriter", "acts_array",
    "load_capture", "read_meta", "parse_answer", "ACTS_DTYPES", "PADDING_SIDES", "SHARD_ROWS", "CaptureConfig",
    "CapturePlan", "CaptureResult", "capture_is_whole", "capture_runner", "find_pairs", "plan_capture",
    "preflight_capture", "random_init_model", "run_capture", "BoundaryCapture", "find_blocks", "HeadsConfig",
    "HeadsResult", "plan_heads", "run_heads", "LensConfig", "LensResult", "run_lens", "ModelSpec", "load_model",
    "resolve_model", "BoundaryEdit", "Patch", "PositionPatcher", "Setter", "expected_count", "logit_difference",
    "PatchingConfig", "PatchingResult", "boundary_vectors", "run_patching", "PositionPatchingConfig",
    "PositionPatchingResult", "run_position_patching", "Prompt", "PromptSettings", "build_prompts",
    "SteeringConfig", "SteeringResult", "capture_model", "probe_direction", "run_steering",
]
