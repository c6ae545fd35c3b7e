"""Results show themselves in a notebook (the tutorials' pages rely on it): ``_repr_markdown_`` and
``_repr_html_`` give a short table of the result's own fields, so a cell ending with a result shows it."""

from __future__ import annotations

import dataclasses
import html
import re
from typing import ClassVar

from countlens.core.results import Result


@dataclasses.dataclass
class _Inner:
    name: str
    value: float


@dataclasses.dataclass
class _Made(Result):
    FILE: ClassVar[str] = "made.json"
    COMMAND: ClassVar[str] = "countlens made"

    d: int
    tau: float
    label: str
    flags: list[int]
    rows: list[dict]
    inner: _Inner
    provenance: dict = dataclasses.field(default_factory=dict)

    def summary(self) -> str:
        return f"d={self.d}, {len(self.rows)} rows"


def _markdown_rows(text: str) -> dict[str, str]:
    return dict(re.findall(r"^\| (.+?) \| (.+?) \|$", text, flags=re.M)[1:])  # past the header


def test_a_result_shows_a_short_table_of_its_fields():
    made = _Made(d=16, tau=0.25, label="a|b", flags=[1, 2, 3], rows=[{"x": i} for i in range(40)],
                 inner=_Inner("in", 1.5), provenance={"config": {"huge": list(range(1000))}})
    rows = _markdown_rows(made._repr_markdown_())
    assert list(rows)[0] == "summary" and rows["summary"] == "d=16, 40 rows"
    assert rows["d"] == "16" and rows["tau"] == "0.25" and rows["label"] == "a\\|b"  # escaped for the table
    assert rows["flags"] == "1, 2, 3" and rows["rows"] == "40 items"
    assert rows["inner.name"] == "in" and rows["inner.value"] == "1.5"
    assert "provenance" not in rows
    assert made._repr_markdown_().startswith("**_Made** (`made.json`, written by `countlens made`)")
    cells = re.findall(r"<th[^>]*>(.*?)</th><td[^>]*>(.*?)</td>", made._repr_html_())
    assert {html.unescape(k): html.unescape(v) for k, v in cells} == {
        k: v.replace("\\|", "|") for k, v in rows.items()}


def test_a_real_result_shows_its_numbers():
    from countlens.pipeline.experiments import by_name

    experiment = by_name()["toy-rates"]
    result = experiment.run(experiment.preset("test"))
    rows = _markdown_rows(result._repr_markdown_())
    record = result.to_dict()
    assert rows["d"] == str(record["d"]) and float(rows["tau"]) == record["tau"]
    assert rows["variants"] == f"{len(record['variants'])} entries"
