"""Running ``countlens ...`` in-process and checking its one-line errors."""

from __future__ import annotations

from countlens.pipeline.cli import main


def run_countlens(capsys, *argv) -> tuple[int, str, str]:
    """``countlens *argv`` in-process (``argv`` names the command, e.g. ``"llm", "capture", ...``):
    (exit code, stdout, stderr)."""
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def assert_one_line_error(code, err, *words):
    """Exit status 2 and exactly one ``countlens: error:`` line on stderr, holding every one of ``words``."""
    lines = [line for line in err.splitlines() if line.strip()]
    assert code == 2 and len(lines) == 1 and lines[0].startswith("countlens: error:"), err
    for word in words:
        assert word in lines[0], lines[0]
