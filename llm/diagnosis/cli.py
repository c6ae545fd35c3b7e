"""``countlens llm diagnose`` (where the answer goes wrong): parse, build a :class:`DiagnosisConfig`, run,
save, draw."""

from __future__ import annotations

from countlens.core.args import (
    NOTHING_TO_HIDE,
    HelpFormatter,
    Option,
    add_common_options,
    add_config_options,
    config_values,
)

DIAGNOSE_DESCRIPTION = """\
Where the answer goes wrong: reads a lens result (countlens llm lens) and a components result (countlens llm
components) of the same model and task, and sets them side by side: per location the correct count's rank under
the logit and tuned lens next to the model's own answer's, the location where the count is read best (and its
fraction of depth), the components whose direct logit attribution pushes most toward the model's answer and away
from the correct count, and the expected count after ablating each; it names the component whose ablation moves the
expected count toward the correct count by at least a quarter of the error, or says that no single component does.
Runs no model. Writes diagnosis.json, diagnosis.csv and diagnosis.png/.pdf.
"""


def register(sub) -> None:
    """Add ``diagnose`` to the ``countlens llm`` subcommands ``sub``."""
    from countlens.llm.diagnosis.experiment import DiagnosisConfig

    di = sub.add_parser("diagnose", help="where the answer goes wrong: lenses and components side by side",
                        description=DIAGNOSE_DESCRIPTION, formatter_class=HelpFormatter)
    add_config_options(di, DiagnosisConfig, options={"lens": Option("lens", required=True),
                                                    "components": Option("components", required=True)})
    di.add_argument("--out", required=True, help="output folder")
    add_common_options(di, "quiet", helps={"quiet": NOTHING_TO_HIDE})
    di.set_defaults(func=cmd_diagnose)


def cmd_diagnose(args) -> int:
    from countlens.llm.diagnosis.experiment import DiagnosisConfig, run_diagnosis
    from countlens.llm.diagnosis.figures import draw_diagnosis

    result = run_diagnosis(DiagnosisConfig(**config_values(args)))
    result.save(args.out)
    draw_diagnosis(result, args.out)
    best = result.best
    where = f"read best at {best['location']} ({best['depth']:.2f} of depth, {best['lens']} lens)" if best else ""
    print(f"diagnosis: {where}; {result.verdict} -> {args.out}")
    return 0


__all__ = ["register", "cmd_diagnose"]
