"""Where the answer goes wrong (countlens.llm.diagnosis): the table against a plain loop over the lens and
components files it reads, and the verdict rule on numbers made to pass and to fail."""

import csv
import json
from collections import defaultdict

import numpy as np
import pytest

from countlens.llm.diagnosis.experiment import SHOWN, DiagnosisConfig, culprit, run_diagnosis


@pytest.mark.slow
def test_the_diagnosis_equals_a_loop_over_its_inputs(test_preset_report):
    out, _ = test_preset_report
    result = json.loads((out / "diagnosis" / "diagnosis.json").read_text())
    # the pushers: the most negative mean direct contributions to the correct-vs-answer difference
    sums = defaultdict(list)
    with open(out / "components" / "components.csv") as f:
        for r in csv.DictReader(f):
            if r["target"] == "answer" and r["kind"] in ("attn", "mlp", "head"):
                sums[(int(r["layer"]), r["kind"], int(r["head"]) if r["head"] else None)].append(
                    float(r["contribution"]))
    ranked = sorted(sums, key=lambda k: np.mean(sums[k]))[:len(result["pushers"])]
    assert [(p["layer"], p["kind"], p["head"]) for p in result["pushers"]] == ranked
    for p, key in zip(result["pushers"], ranked, strict=True):
        assert p["mean"] == pytest.approx(np.mean(sums[key])) and p["std"] == pytest.approx(np.std(sums[key]))
    ablation = json.loads((out / "components" / "components.json").read_text())
    by_key = {(a["layer"], a["kind"], a["head"]): a for a in ablation["ablation"]}
    for p in result["pushers"]:
        a = by_key.get((p["layer"], p["kind"], p["head"]))
        assert p["expected_shift"] == (None if a is None else pytest.approx(a["expected_shift_mean"]))
    errors = [q["n"] - q["expected_clean"] for q in ablation["prompts"] if q["ablated"]]
    assert result["mean_error"] == pytest.approx(np.mean(errors))
    # where the count is read best: the lowest mean rank of the correct count over both lenses and locations
    lens = json.loads((out / "lens" / "lens.json").read_text())
    ranks = [(loc[k]["rank"], loc["index"], k) for loc in lens["locations"] for k in ("logit", "tuned")]
    best = min(ranks, key=lambda r: r[0])
    assert (result["best"]["rank"], result["best"]["index"]) == (pytest.approx(best[0]), best[1])
    assert result["best"]["depth"] == pytest.approx(best[1] / result["n_blocks"])
    assert all(loc["logit_answer_rank"] >= 1 for loc in result["locations"])
    # and the report shows it, every number from the JSON
    page = (out / "index.html").read_text()
    assert "Where the answer goes wrong" in page and 'data-json="diagnosis/diagnosis.json"' in page


def _pusher(shift):
    return {"layer": 0, "kind": "mlp", "head": None, "mean": -1.0, "std": 0.0, "prompts": 3, "expected_shift": shift,
            "normalised_ld": None}


def test_the_verdict_names_a_component_only_where_its_ablation_undoes_the_error():
    error = 4.0  # the model answers four below the count on average
    assert culprit([_pusher(SHOWN * error * 1.01)], error)["expected_shift"] > 0
    assert culprit([_pusher(SHOWN * error * 0.99)], error) is None  # too little of the error undone
    assert culprit([_pusher(-2.0)], error) is None  # moves the count further away
    assert culprit([_pusher(None), _pusher(2.0)], error)["expected_shift"] == 2.0  # the first one ablated
    assert culprit([_pusher(2.0)], None) is None and culprit([_pusher(-2.0)], -4.0)["expected_shift"] == -2.0


def test_missing_or_wrong_inputs_are_refused_naming_the_field(tmp_path):
    from countlens.core.errors import ConfigError

    with pytest.raises(ConfigError, match="no lens.json"):
        run_diagnosis(DiagnosisConfig(lens=str(tmp_path), components=str(tmp_path)))
    (tmp_path / "lens.json").write_text("{}")
    with pytest.raises(ConfigError) as exc:
        run_diagnosis(DiagnosisConfig(lens=str(tmp_path), components=str(tmp_path)))
    assert exc.value.field == "lens" and "not a lens.json" in str(exc.value)
