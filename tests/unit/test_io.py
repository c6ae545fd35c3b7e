"""The shared result plumbing: atomic writes, strict JSON, one-line CLI errors."""

import json
import math

import numpy as np
import pytest

from countlens.core.args import parse_int_list
from countlens.core.errors import UsageError
from countlens.core.io import read_json, write_json_atomic
from countlens.pipeline.cli import main


def test_json_is_strict_and_atomic(tmp_path):
    path = write_json_atomic(tmp_path / "a" / "r.json", {"x": np.float64(1.5), "y": [math.inf, np.arange(2)]})
    assert json.loads(path.read_text()) == {"x": 1.5, "y": ["inf", [0, 1]]}
    assert [p.name for p in path.parent.iterdir()] == ["r.json"]  # no temporary file left behind


def test_read_json_errors_name_the_file(tmp_path):
    (tmp_path / "bad.json").write_text("{nope")
    with pytest.raises(UsageError, match="bad.json is not valid JSON"):
        read_json(tmp_path / "bad.json")
    with pytest.raises(UsageError, match="does not exist"):
        read_json(tmp_path / "missing.json")


def test_int_ranges_are_inclusive():
    assert parse_int_list("0:3", "--counts") == [0, 1, 2, 3]
    with pytest.raises(UsageError, match="--counts"):
        parse_int_list("a,b", "--counts")


def test_unknown_subcommand_exits_2(capsys):
    with pytest.raises(SystemExit) as exc:
        main(["no-such-command"])
    assert exc.value.code == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "error" in err


def test_written_files_get_normal_permissions(tmp_path):
    import os
    import stat

    path = write_json_atomic(tmp_path / "r.json", {"a": 1})
    mask = os.umask(0)
    os.umask(mask)
    assert stat.S_IMODE(path.stat().st_mode) == 0o666 & ~mask  # not mkstemp's 0600
