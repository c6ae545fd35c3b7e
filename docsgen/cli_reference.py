"""The CLI reference, walked from the ``countlens`` parser itself (never hand-written), and the check that a
command line written in the docs parses with that parser."""

from __future__ import annotations

import argparse
import contextlib
import functools
import io
import shlex
from collections.abc import Iterator


@functools.lru_cache(maxsize=1)
def parser() -> argparse.ArgumentParser:
    """The full ``countlens`` parser (every command registered; built once)."""
    from countlens.pipeline.cli import build_parser

    return build_parser(None)


def _subparsers(p: argparse.ArgumentParser) -> dict[str, argparse.ArgumentParser]:
    for action in p._actions:  # noqa: SLF001 - argparse keeps its sub-commands here
        if isinstance(action, argparse._SubParsersAction):  # noqa: SLF001
            return dict(action.choices)
    return {}


def commands(p: argparse.ArgumentParser | None = None, path: tuple[str, ...] = ("countlens",)
             ) -> Iterator[tuple[tuple[str, ...], argparse.ArgumentParser]]:
    """Every command as ``(("countlens", "toy", "construct"), its parser)``, depth first, in registration order."""
    p = p or parser()
    yield path, p
    for name, sub in _subparsers(p).items():
        yield from commands(sub, (*path, name))


def _option_row(action: argparse.Action) -> tuple[str, str, str]:
    flags = ", ".join(f"`{f}`" for f in action.option_strings) or f"`{action.metavar or action.dest}`"
    if action.nargs == 0:
        value = ""
    elif action.choices and not isinstance(action, argparse._SubParsersAction):  # noqa: SLF001
        value = " \\| ".join(f"`{c}`" for c in action.choices)
    else:
        metavar = action.metavar or (action.dest.upper() if action.option_strings else action.dest)
        value = f"`{metavar}`"
    if action.required:
        default = "required"
    elif action.default in (None, False, argparse.SUPPRESS) or action.nargs == 0:
        default = ""
    else:
        default = f"`{action.default}`"
    return f"{flags} {value}".strip(), default, _cell(action.help or "")


def _cell(text: str) -> str:
    return " ".join(text.replace("|", "\\|").replace("<", "&lt;").replace(">", "&gt;").split())


def anchor(path: tuple[str, ...]) -> str:
    """The heading anchor of a command's section (``countlens-toy-construct``)."""
    return "-".join(path)


def reference() -> str:
    """The CLI reference page (Markdown): one section per command, its usage, description and every option."""
    out = ["# Command-line reference", "",
           "Generated from the `countlens` parser itself (`docsgen/cli_reference.py`) at every docs build, so "
           "it lists every command and option the installed code has. `countlens COMMAND --help` prints the "
           "same.", ""]
    all_commands = list(commands())
    out += ["| command | what it does |", "|---|---|"]
    helps = {}
    for path, p in all_commands:
        for name in _subparsers(p):
            helps[(*path, name)] = next((c.help for a in p._actions  # noqa: SLF001
                                         if isinstance(a, argparse._SubParsersAction)  # noqa: SLF001
                                         for c in a._choices_actions if c.dest == name), "")  # noqa: SLF001
    for path, _ in all_commands[1:]:
        out.append(f"| [`{' '.join(path)}`](#{anchor(path)}) | {_cell(helps.get(path) or '')} |")
    out.append("")
    for path, p in all_commands:
        out += [f"## `{' '.join(path)}` {{#{anchor(path)}}}", ""]
        usage = p.format_usage().removeprefix("usage: ").strip()
        out += ["```text", usage, "```", ""]
        if p.description:
            out += ["```text", p.description.strip(), "```", ""]
        subs = _subparsers(p)
        if subs:
            out += ["Subcommands: " + ", ".join(f"[`{n}`](#{anchor((*path, n))})" for n in subs), ""]
        rows = [_option_row(a) for a in p._actions  # noqa: SLF001
                if not isinstance(a, argparse._SubParsersAction) and a.dest != "help"]  # noqa: SLF001
        if rows:
            out += ["| option | default | help |", "|---|---|---|"]
            out += [f"| {o} | {d} | {h} |" for o, d, h in rows]
            out.append("")
        if p.epilog:
            out += ["```text", p.epilog.strip(), "```", ""]
    return "\n".join(out)


def check_command(line: str, full: bool = True) -> str | None:
    """``None`` when the command line ``line`` (``countlens ...``, shell-quoted) is one the CLI accepts, else
    why not. ``full``: parse it with the parser (required options included, nothing run); otherwise only
    check that its command exists and that each ``--option`` it names is one of that command's."""
    try:
        argv = shlex.split(line, comments=True)
    except ValueError as exc:
        return f"not a shell line ({exc})"
    if not argv or argv[0] != "countlens":
        return "does not start with `countlens`"
    argv = argv[1:]
    if full:
        err = io.StringIO()
        with contextlib.redirect_stderr(err), contextlib.redirect_stdout(io.StringIO()):
            try:
                parser().parse_args(argv)
            except SystemExit as exc:
                if exc.code not in (0, None):
                    return err.getvalue().strip() or f"exit {exc.code}"
        return None
    p, depth = parser(), 0
    while depth < len(argv) and argv[depth] in _subparsers(p):
        p = _subparsers(p)[argv[depth]]
        depth += 1
    known = {s for a in p._actions for s in a.option_strings}  # noqa: SLF001
    for token in argv[depth:]:
        flag = token.split("=", 1)[0]
        if flag.startswith("--") and flag not in known:
            return f"`{flag}` is no option of `countlens {' '.join(argv[:depth])}`"
        if not flag.startswith("-") and depth < len(argv) and not known and _subparsers(p):
            return f"`{token}` is no subcommand of `countlens {' '.join(argv[:depth])}`"
    if _subparsers(p) and depth == len(argv):
        return None  # a command area named alone (`countlens toy`)
    return None
