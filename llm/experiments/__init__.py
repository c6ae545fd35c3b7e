"""The llm room's experiments, one per module: the capture (:mod:`.capture`), Figure 9a's boundary patching
(:mod:`.patching`), Figure 9b's steering at the boundary (:mod:`.steering`) and Figure 13's lenses
(:mod:`.lens`). Each is a validated config,
``run_x(config, ...) -> XResult`` and a result that saves into a folder (:class:`countlens.core.results.Result`);
:mod:`.options` sets a config's settings by name, nested ones included."""

from countlens.llm.experiments.capture import (
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
from countlens.llm.experiments.heads import HeadsConfig, HeadsResult, plan_heads, run_heads
from countlens.llm.experiments.lens import LensConfig, LensResult, run_lens
from countlens.llm.experiments.options import option_value, with_options
from countlens.llm.experiments.patching import PatchingConfig, PatchingResult, boundary_vectors, run_patching
from countlens.llm.experiments.positions import (
    PositionPatchingConfig,
    PositionPatchingResult,
    run_position_patching,
)
from countlens.llm.experiments.steering import (
    SteeringConfig,
    SteeringResult,
    capture_model,
    probe_direction,
    run_steering,
)
from countlens.llm.models import ModelSpec

__all__ = ["HeadsConfig", "HeadsResult", "plan_heads", "run_heads", "ACTS_DTYPES", "PADDING_SIDES", "SHARD_ROWS", "CaptureConfig", "CapturePlan", "plan_capture",
           "preflight_capture", "CaptureResult", "capture_runner", "run_capture", "find_pairs", "random_init_model",
           "capture_is_whole", "option_value", "with_options", "ModelSpec", "PatchingConfig", "PatchingResult",
           "run_patching", "boundary_vectors", "PositionPatchingConfig", "PositionPatchingResult",
           "run_position_patching", "SteeringConfig", "SteeringResult", "probe_direction",
           "capture_model", "run_steering", "LensConfig", "LensResult", "run_lens"]
