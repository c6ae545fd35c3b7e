"""Where the organism's checks keep what they compute (:class:`Kept`): each experiment's result and each capture
in a folder of its own, reused by a rerun for the same organism and config."""

from __future__ import annotations

import functools
import json
import shutil
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from countlens.core.errors import UsageError
from countlens.core.io import read_json, write_json_atomic
from countlens.core.registry import Experiment, discover
from countlens.core.results import Result, config_record

KEPT_FILE = "kept.json"  # beside each kept result: the config and organism it was computed for


@functools.cache  # the declarations are fixed once the rooms are imported
def declared(name: str) -> Experiment:
    """The declared experiment ``name`` of the rooms the checks run (:mod:`countlens.core.registry`)."""
    return {e.name: e for e in discover("countlens.llm", "countlens.probes")}[name]


@dataclass
class Kept:
    """Where the checks keep what they compute: each experiment's result in ``folder/<experiment>/`` (the
    result file and tables its own stage writes; its figures drawn from them by
    :func:`countlens.llm.organisms.views.draw_checks`), each capture in ``folder/<capture>/acts``. A rerun reuses
    a kept result whose :data:`KEPT_FILE` records the same config and ``organism`` (which organism: its
    settings, steps and creation time), so an interrupted check resumes. ``folder=None``: nothing kept, the
    captures go to ``work``."""

    folder: Path | None = None
    organism: dict[str, Any] = field(default_factory=dict)
    work: Path | None = None
    names: list[str] = field(default_factory=list)  # the kept experiments, in the order run

    def _stamp(self, config: Any) -> dict[str, Any]:
        return json.loads(json.dumps({"config": config_record(config), "organism": self.organism}))

    def _holds(self, place: Path, stamp: dict[str, Any]) -> bool:
        try:
            return (place / KEPT_FILE).is_file() and read_json(place / KEPT_FILE, "kept record") == stamp
        except UsageError:
            return False

    def result(self, name: str, config: Any, run: Callable[[], Result]) -> Result:
        """Experiment ``name``'s result of ``config``: kept from an earlier run, or ``run()`` now (and kept)."""
        if self.folder is None:
            return run()
        place, stamp = self.folder / name, self._stamp(config)
        result_type = declared(name).result
        self.names.append(name)
        if self._holds(place, stamp):
            try:
                return result_type.read(place)
            except UsageError:
                pass
        (place / KEPT_FILE).unlink(missing_ok=True)
        result = run()
        result.save(place)
        write_json_atomic(place / KEPT_FILE, stamp)
        return result

    def capture(self, name: str, config: Any, loaded) -> Path:
        """The capture folder of ``config`` (a :class:`~countlens.llm.capture.experiment.CaptureConfig`),
        captured now unless kept (an interrupted capture resumes from its shards)."""
        from countlens.llm.capture.experiment import run_capture

        place = (self.folder if self.folder is not None else self.work) / name
        stamp = self._stamp(config)
        if self.folder is not None and (place / KEPT_FILE).is_file() and not self._holds(place, stamp):
            shutil.rmtree(place)  # a capture of another organism or config, kept by an earlier run
        run_capture(config, place / "acts", loaded=loaded, progress=False)
        if self.folder is not None:
            write_json_atomic(place / KEPT_FILE, stamp)
        return place / "acts"

    def record(self) -> list[dict[str, str]]:
        """:attr:`OrganismChecks.kept` of what was kept."""
        names = sorted(dict.fromkeys(self.names), key=lambda n: declared(n).order)
        return [{"name": n, "title": declared(n).title, "file": declared(n).result.FILE} for n in names]


def organism_stamp(organism) -> dict[str, Any]:
    """Which organism a kept result is of (:class:`Kept`): its settings, steps and creation time."""
    return {"config": organism.config, "steps": organism.steps, "created": organism.provenance.get("created_utc")}


__all__ = ["KEPT_FILE", "declared", "Kept", "organism_stamp"]
