"""The one resumable-run mechanism: results keyed by the digest of the config that made them.

A :class:`ResultCache` is a folder of JSON files, one per finished result, each named by the digest of
its config and holding that config beside the value; a rerun with the same config reads the value back
instead of recomputing it, so an interrupted experiment resumes where it stopped. A folder that records
*one* run's settings (a capture's ``meta.json``, a report's stage) is checked with
:func:`refuse_other_settings`: the same settings resume, other settings are refused with one message.
"""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path
from typing import Any

from countlens.core.errors import ConfigError, UsageError, literal
from countlens.core.io import config_digest, read_json, to_jsonable, write_json_atomic

CACHE_FOLDER = ".cache"  # a stage's resume folder inside its own folder, removed once it is done


def refuse_other_settings(folder: str | os.PathLike, what: str, recorded: Any, wanted: Any, field: str = "out",
                          fix: str = "choose another {field} folder or delete it") -> None:
    """Raise a :class:`ConfigError` about ``field`` (the setting that named ``folder``) when ``folder``
    (holding ``what``) was made with settings other than ``wanted``; return quietly when they match (the run
    resumes). ``fix`` ends the message (``{field}`` names the setting)."""
    if _canonical(recorded) != _canonical(wanted):
        raise ConfigError(field, f"{literal(folder)} holds {literal(what)} made with other settings; "
                                 + fix.replace("{field}", "{" + field + "}"))


def _canonical(obj: Any) -> Any:
    return json.loads(json.dumps(to_jsonable(obj), sort_keys=True))


class ResultCache:
    """Finished results as ``folder/<prefix>-<digest>.json``, keyed by everything that determines them.

    ``folder=None`` caches nothing (every :meth:`get` misses, :meth:`put` is a no-op), so callers need
    no branch for "no resume folder". Values are JSON-able dicts; a file whose stored config differs from
    the asked one (a digest collision, or a hand-edited file) is a miss, never a wrong hit.
    """

    def __init__(self, folder: str | os.PathLike | None, prefix: str = "run"):
        self.folder = Path(folder) if folder is not None else None
        self.prefix = prefix

    def path(self, config: Any) -> Path | None:
        """Where the result of ``config`` is (or would be) stored."""
        if self.folder is None:
            return None
        return self.folder / f"{self.prefix}-{config_digest(config)}.json"

    def get(self, config: Any) -> dict[str, Any] | None:
        """The stored value for ``config``, or ``None`` when it has not finished before."""
        path = self.path(config)
        if path is None or not path.is_file():
            return None
        try:
            data = read_json(path, "cached result")
        except UsageError:
            return None  # unreadable: recompute it
        if not isinstance(data, dict) or data.get("config") != _canonical(config):
            return None
        return data.get("value")

    def put(self, config: Any, value: dict[str, Any]) -> dict[str, Any]:
        """Store ``value`` for ``config`` atomically; return ``value``."""
        path = self.path(config)
        if path is not None:
            write_json_atomic(path, {"config": config, "value": value})
        return value

    def get_or_run(self, config: Any, compute) -> dict[str, Any]:
        """The cached value for ``config``, else ``compute()`` stored and returned."""
        hit = self.get(config)
        return hit if hit is not None else self.put(config, compute())

    def clear(self) -> None:
        """Remove the cache folder (a finished experiment keeps its result, not its resume state)."""
        if self.folder is not None and self.folder.exists():
            shutil.rmtree(self.folder, ignore_errors=True)


__all__ = ["CACHE_FOLDER", "ResultCache", "refuse_other_settings"]
