"""Every command and every option that takes a value: a bad value is one line on stderr, exit status 2, that
names the option — a flag of *that* command, worded by the dispatcher from the config field the error is
about — before any slow work and with nothing written; or the option is free (every value is valid: a path to
write, a seed).

The cases are derived: each option made from a config field (``countlens.core.args.add_config_options``) or
shared (``--threads``) carries its field's rule, and :func:`bad_value` writes a value the rule refuses; only an
option checked by a room's own code (a file to read, a variant's dimension) has a value written in ``BAD``. The
completeness test walks the whole ``countlens`` parser, so an option with neither fails. The rooms' own tests
check the wording of each message; this one checks that none names a flag the command lacks (``toy table3
--attained-working-set -1`` once said ``--working-set``, ``llm patch --sources 200`` said ``--counts``,
``reproduce --dtype float8`` said ``dtype``).
"""

from __future__ import annotations

import argparse
import json
import re

import pytest

from countlens.core import fields
from countlens.pipeline.cli import build_parser, main

# The arguments each command needs besides the option under test: {TINY} a tiny chat model, {ACTS} a capture
# with answers of it, {PROBES} probes fitted on that capture, {LENS} lenses on it, {COMPONENTS} Figure 14 of the
# tiny model, {PARAMS} a toy parameter file, {OUT} a fresh folder, {JSON} a fresh file.
BASE = {
    "reproduce": "--preset test --model {TINY} --out {OUT}",
    "study": "--models {TINY} --preset test --out {OUT}",
    "toy construct": "--variant softmax --d 4 --L 10",
    "toy check": "--params {PARAMS} --L 5",
    "toy rates": "--L 10",
    "toy lcap": "--d 3",
    "toy table3": "--d 4 --B 10",
    "toy figure1": "--out {OUT}",
    "toy train": "--variant softmax --d 4 --L 5 --steps 1 --json {JSON}",
    "toy table2": "--d 4 --L 5 --seeds 0 --steps 1 --json {JSON}",
    "toy figure2": "--out {OUT} --d 4 --L 5 --seeds 0 --steps 1 --B 10",
    "toy figure3": "--out {OUT} --d 4 --L 5 --seeds 0 --steps 1",
    "toy figure4": "--out {OUT} --d 4 --L 5 --steps 1 --minibatch-steps 1",
    "llm capture": "--model {TINY} --pairs a/b --configs count --seeds 0 --counts 0:2 --L 8 --quiet --out {OUT}",
    "llm patch": "--model {TINY} --pairs a/b --configs count --seeds 0 --L 8 --sources 3 --targets 1 --out {OUT}",
    "llm steer": "--acts {ACTS} --probes {PROBES} --counts 1,2 --out {OUT}",
    "llm lens": "--acts {ACTS} --baseline-directions 10 --out {OUT}",
    "llm heads": "--model {TINY} --pairs a/b --configs count --seeds 0 --L 8 --counts 1:3 --ablate-prompts 1 "
                 "--layers 0 --out {OUT}",
    "llm components": "--model {TINY} --pairs a/b --configs count --seeds 0 --L 8 --counts 1:3 --ablate-prompts 2 "
                      "--out {OUT}",
    "llm diagnose": "--lens {LENS} --components {COMPONENTS} --out {OUT}",
    "llm attribution": "--model {TINY} --pairs a/b --configs count --seeds 0 --L 8 --counts 3 --positions items "
                       "--locations 0:1 --layers 0 --out {OUT}",
    "llm prompts": "--model {TINY} --pairs a/b --configs count --seeds 0 --counts 0:2 --L 8",
    "llm das": "--model {TINY} --pairs a/b --configs count --seeds 0:3 --L 6 --counts 1:4 --steps 1 --ranks 1 "
               "--no-random-model --quiet --out {OUT}",
    "llm pairs": "--model {TINY} --candidates a/b",
    "probe": "--acts {ACTS} --out {OUT}",
    "probe sweep": "--acts {ACTS} --out {OUT}",
    "geometry": "--acts {ACTS} --out {OUT} --low 0:1 --high 1:2 --pca-counts 0:2",
    "compare": "--toy {PARAMS} --acts {ACTS} --out {OUT} --low 0:1 --high 1:2 --pca-counts 0:2 --arc-counts 0:2 "
               "--toy-L 5",
    "organism train": "--out {OUT} --L 3 --layers 1 --heads 2 --width 16 --quiet",
    "organism check": "--model {MISSING} --out {OUT} --quiet",
    "organism scaling": "--out {OUT} --preset test --quiet",
}

# A bad value of each validated option that no rule gives one for (a room's own check, a file to read), per command.
BAD = {
    "reproduce": {"--task": "nope", "--tasks": "lists,lists", "--preset": "huge", "--model": "{MISSING}", "--gguf-file": "{MISSING}.gguf", "--revision": "v1",
                  "--device": "gpu",
                  "--dtype": "float8", "--template": "fancy", "--batch-size": "0", "--stages": "nope"},
    "study": {"--task": "nope", "--tasks": "repeat:separator=tab", "--models": ",", "--preset": "huge", "--ray": "local:0", "--device": "gpu", "--dtype": "float8",
              "--batch-size": "0", "--template": "fancy"},
    "toy construct": {"--variant": "nope", "--d": "0", "--L": "0", "--tau": "-1"},
    "toy check": {"--params": "{MISSING}", "--L": "0"},
    "toy rates": {"--d": "2", "--L": "0", "--variants": "nope", "--tau": "0"},
    "toy lcap": {"--d": "2", "--tau": "-1"},
    "toy table3": {"--d": "2", "--tau": "0", "--attained-loss": "l1", "--attained-parametrization": "spherical",
                   "--attained-working-set": "-1", "--attained-check-every": "0", "--attained-patience": "-1",
                   "--workers": "0"},
    "toy figure1": {"--d": "2", "--L": "1"},
    "toy train": {"--variant": "nope", "--readout": "nope", "--d": "0", "--L": "0", "--tau": "-1", "--cap": "0", "--lr": "-1", "--test-fraction": "1"},
    "toy table2": {"--optimizer": "sgd", "--lr": "-1",
                   "--workers": "0"},
    "toy figure2": {"--variant": "nope", "--d": "2", "--lr": "-1", "--B": "0", "--table3": "{MISSING}", "--ce-scale": "0"},
    "toy figure3": {"--variant": "nope", "--d": "0", "--lr": "-1"},
    "toy figure4": {"--variant": "nope", "--d": "0"},
    "llm capture": {"--task": "nope", "--model": "{MISSING}", "--gguf-file": "{MISSING}.gguf", "--revision": "v1", "--L": "0",
                    "--counts": "5:2", "--per-count": "0", "--pairs": "1/1", "--configs": "poem", "--seeds": "x",
                    "--template": "fancy", "--locations": "0:99", "--batch-size": "0", "--backend": "jax",
                    "--device": "gpu", "--dtype": "float8", "--acts-dtype": "int8", "--padding-side": "middle",
                    "--shard-rows": "0", "--answer-tokens": "0", "--ray": "local:0", "--positions": "every"},
    "llm patch": {"--task": "nope", "--model": "{MISSING}", "--gguf-file": "{MISSING}.gguf", "--revision": "v1", "--L": "0",
                  "--per-count": "0", "--pairs": "1/1", "--configs": "poem", "--seeds": "x", "--template": "fancy",
                  "--locations": "0:99", "--batch-size": "0", "--answer-tokens": "0", "--device": "gpu",
                  "--dtype": "float8", "--sources": "200", "--targets": "x", "--positions": "everywhere",
                  "--counts": "0", "--flip": "second", "--method": "fast", "--min-gap": "0",
                  "--location-step": "0"},
    "llm heads": {"--task": "nope", "--model": "{MISSING}", "--gguf-file": "{MISSING}.gguf", "--revision": "v1", "--L": "0",
                  "--counts": "0", "--per-count": "0", "--pairs": "1/1", "--configs": "poem", "--seeds": "x",
                  "--template": "fancy", "--batch-size": "0", "--device": "gpu", "--dtype": "float8",
                  "--layers": "99", "--ablate-prompts": "-1", "--flip": "second", "--probes": "{MISSING}",
                  "--location": "99"},
    "llm components": {"--task": "nope", "--model": "{MISSING}", "--gguf-file": "{MISSING}.gguf", "--revision": "v1", "--L": "0",
                       "--counts": "5:2", "--per-count": "0", "--pairs": "1/1", "--configs": "poem", "--seeds": "x",
                       "--template": "fancy", "--batch-size": "0", "--device": "gpu", "--dtype": "float8",
                       "--ablate-prompts": "-1", "--flip": "second", "--source": "zero", "--scope": "everywhere",
                       "--layers": "40"},
    "llm attribution": {"--task": "nope", "--model": "{MISSING}", "--gguf-file": "{MISSING}.gguf", "--revision": "v1", "--L": "0",
                        "--counts": "0", "--per-count": "0", "--pairs": "1/1", "--configs": "poem", "--seeds": "x",
                        "--template": "fancy", "--locations": "0:99", "--batch-size": "0", "--device": "gpu",
                        "--dtype": "float8", "--method": "atp**", "--direction": "sideways", "--flip": "second",
                        "--positions": "everywhere", "--location-step": "0", "--layers": "99", "--top-k": "0",
                        "--min-gap": "0"},
    "llm steer": {"--acts": "{MISSING}", "--probes": "{MISSING}", "--location": "99", "--deltas": "nan",
                  "--counts": "90", "--max-prompts": "0", "--batch-size": "0", "--answer-tokens": "0",
                  "--device": "gpu", "--direction": "up", "--units": "metres"},
    "llm lens": {"--acts": "{MISSING}", "--probes": "{MISSING}", "--locations": "99", "--counts": "5:2",
                 "--alphas": "-1", "--split": "0.5,0.5", "--baseline-directions": "0", "--device": "gpu"},
    "llm diagnose": {"--lens": "{MISSING}", "--components": "{PROBES}", "--top": "0"},
    "llm prompts": {"--task": "nope", "--model": "{MISSING}", "--gguf-file": "{MISSING}.gguf", "--revision": "v1", "--L": "0",
                    "--counts": "5:2", "--per-count": "0", "--pairs": "1/1", "--configs": "poem", "--seeds": "x",
                    "--template": "fancy", "--show": "0"},
    "llm das": {"--task": "nope", "--model": "{MISSING}", "--gguf-file": "{MISSING}.gguf", "--revision": "v1", "--L": "0",
                "--counts": "5:2", "--per-count": "0", "--pairs": "1/1", "--configs": "poem", "--seeds": "x",
                "--template": "fancy", "--locations": "0:99", "--batch-size": "0", "--device": "gpu", "--dtype": "float8",
                "--ranks": "0", "--held-out": "1.5", "--sources": "0", "--steps": "0", "--lr": "-1"},
    "llm pairs": {"--model": "{MISSING}", "--gguf-file": "{MISSING}.gguf", "--revision": "v1", "--configs": "poem",
                  "--template": "fancy", "--candidates": "a"},
    "probe": {"--acts": "{MISSING}", "--locations": "99", "--classifier-C": "x", "--figure-locations": "99",
              "--blas-threads": "-1"},
    "probe sweep": {"--acts": "{MISSING}", "--location": "99", "--blas-threads": "-1"},
    "probe toy-acts": {"--params": "{MISSING}"},
    "probe redraw": {"--result": "{MISSING}", "--figure-locations": "nowhere"},
    "geometry": {"--acts": "{MISSING}", "--low": "2:1", "--high": "x", "--pca-counts": "3", "--pca-locations": "99"},
    "compare": {"--toy": "{MISSING}", "--acts": "{MISSING}", "--locations": "99", "--toy-L": "0",
                "--arc-counts": "2:1", "--low": "2:1", "--high": "x", "--pca-counts": "3"},
    "organism train": {"--L": "0", "--layers": "0", "--heads": "0", "--width": "15", "--live-heads": "1.0",
                       "--seed": "-1", "--tokenizer": "{MISSING}", "--pairs": "1/1", "--lr": "-1", "--warmup": "0", "--decay": "0", "--batch-size": "0",
                       "--max-steps": "0", "--eval-every": "0", "--target-accuracy": "2", "--softmax": "none"},
    "organism check": {"--model": "{MISSING}"},
    "organism scaling": {"--preset": "huge", "--Ls": "10", "--width": "15", "--llm-acts": "{MISSING}",
                         "--llm-location": "99", "--workers": "0"},
}

# Options where every value is valid, on any command (they name what to write, or any seed or count works).
FREE = {"--out", "--json", "--checkpoint", "--checkpoint-every", "--seed", "--init-seed"}

# A value each option's config rule refuses (countlens.core.fields), so an option derived from a config field
# (countlens.core.args.add_config_options) or a shared option needs no case above.
_BAD_FOR_RULE = {
    fields.AtLeast: lambda r: str(r.minimum - 1),
    fields.Positive: lambda r: "-1" if r.zero else "0",
    fields.OneOf: lambda r: "nope",
    fields.Ints: lambda r: "x" if r.minimum is None else str(r.minimum - 1),
    fields.Numbers: lambda r: "0" if r.positive else "-1" if r.nonnegative else "nan",
    fields.Window: lambda r: "2:1",
    fields.Fractions: lambda r: "0.5,0.5",
    fields.Text: lambda r: " ",
    fields.Optional: lambda r: bad_value(r.rule),
}


def bad_value(rule) -> str | None:
    """A value ``rule`` refuses, as command-line text (``None``: the rule names none, e.g. a room's own check)."""
    make = _BAD_FOR_RULE.get(type(rule))
    return None if make is None else make(rule)


def _commands() -> dict[str, argparse.ArgumentParser]:
    """Every command of the full parser that takes options, by its words (``"toy table3"``)."""
    found = {}

    def walk(parser, words):
        subs = [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)]
        if _options(parser) or not subs:
            found[" ".join(words)] = parser
        for sub in subs:
            for name, child in sub.choices.items():
                walk(child, (*words, name))

    walk(build_parser(), ())
    return found


def _actions(parser: argparse.ArgumentParser) -> dict[str, argparse.Action]:
    """The options of ``parser`` that take a value, by their long flag."""
    return {max(a.option_strings, key=len): a for a in parser._actions
            if a.option_strings and a.nargs != 0 and not isinstance(a, (argparse._HelpAction, argparse._VersionAction))}


def _options(parser: argparse.ArgumentParser) -> set[str]:
    """The long options of ``parser`` that take a value."""
    return set(_actions(parser))


def _bad_values(command: str, parser: argparse.ArgumentParser) -> dict[str, str]:
    """A bad value of each validated option of ``command``: from its rule, or written in :data:`BAD`."""
    derived = {flag: bad_value(getattr(action, "rule", None)) for flag, action in _actions(parser).items()}
    return {**{f: v for f, v in derived.items() if v is not None}, **BAD.get(command, {})}


# What a required option of a command without a BASE entry is given, by the setting it sets.
SAMPLES = {"out": "{OUT}", "json": "{JSON}", "acts": "{ACTS}", "probes": "{PROBES}", "params": "{PARAMS}",
           "lens": "{LENS}", "components": "{COMPONENTS}", "model": "{TINY}", "result": "{PROBES}"}


def _base(command: str) -> str:
    """The arguments ``command`` needs besides the option under test: :data:`BASE`'s, or its required options
    given :data:`SAMPLES`' values (and ``--model {TINY}`` where the command reads a model, ``--out {OUT}``
    where it writes a folder: a subcommand's ``--out`` is no argparse requirement when its parent's is kept)."""
    if command in BASE:
        return BASE[command]
    given = [a for a in COMMANDS[command]._actions
             if a.option_strings and (a.required or a.dest in ("model", "out"))]
    return " ".join(f"{max(a.option_strings, key=len)} {SAMPLES[a.dest]}" for a in given)


COMMANDS = _commands()
CASES = [(command, option, value) for command, parser in COMMANDS.items()
         for option, value in _bad_values(command, parser).items()]


def test_every_option_of_every_command_has_a_case():
    assert set(BASE) <= set(COMMANDS) and set(BAD) <= set(COMMANDS), (set(BASE) | set(BAD)) - set(COMMANDS)
    missing = {c: sorted(_options(p) - set(_bad_values(c, p)) - FREE) for c, p in COMMANDS.items()}
    assert {c: m for c, m in missing.items() if m} == {}
    stale = {c: sorted(set(BAD.get(c, {})) - _options(p)) for c, p in COMMANDS.items()}
    assert {c: s for c, s in stale.items() if s} == {}
    needs = {c: sorted(a.dest for a in p._actions if a.option_strings and a.required and a.dest not in SAMPLES)
             for c, p in COMMANDS.items() if c not in BASE}
    assert {c: n for c, n in needs.items() if n} == {}


@pytest.fixture(scope="module")
def inputs(tmp_path_factory, tiny_chat_model):
    """The files the base arguments name: a capture with answers of a tiny model, probes on it, a toy file."""
    root = tmp_path_factory.mktemp("inputs")
    acts, probes = root / "acts", root / "probe"
    assert main(["llm", "capture", *BASE["llm capture"].format(TINY=tiny_chat_model, OUT=acts).split(),
                 "--counts", "0:8", "--per-count", "2", "--answers", "--answer-tokens", "2"]) == 0
    assert main(["probe", "--acts", str(acts), "--out", str(probes), "--seeds", "0"]) == 0
    lens, components = root / "lens", root / "components"
    assert main(["llm", "lens", "--acts", str(acts), "--baseline-directions", "10", "--out", str(lens), "--quiet"]) == 0
    assert main(["llm", "components", *BASE["llm components"].format(TINY=tiny_chat_model, OUT=components).split(),
                 "--quiet"]) == 0
    params = root / "params.json"
    assert main(["toy", "construct", "--variant", "softmax", "--d", "4", "--L", "5", "--json", str(params)]) == 0
    return {"TINY": str(tiny_chat_model), "ACTS": str(acts), "PROBES": str(probes / "probes.json"),
            "PARAMS": str(params), "MISSING": str(root / "missing"), "LENS": str(lens),
            "COMPONENTS": str(components)}


@pytest.mark.parametrize("command, option, value", CASES, ids=[f"{c} {o}" for c, o, _ in CASES])
def test_a_bad_value_is_one_line_naming_this_commands_flag(command, option, value, inputs, tmp_path, capsys):
    names = {**inputs, "OUT": str(tmp_path / "out"), "JSON": str(tmp_path / "result.json")}
    argv = [*command.split(), *_base(command).format(**names).split(), option, value.format(**names)]
    try:
        code = main(argv)
    except SystemExit as exc:  # argparse's own check (a type or a choice), also one line naming the option
        code = exc.code
    err = [line for line in capsys.readouterr().err.splitlines() if line.strip()]
    assert code == 2 and len(err) == 1, err
    assert re.search(rf"{re.escape(option)}(?![\w-])", err[0]), err[0]
    named = set(re.findall(r"(?<![\w-])--[a-zA-Z][\w-]*", err[0]))
    assert named <= _options(COMMANDS[command]) | {"--help"}, (named, err[0])
    assert not (tmp_path / "out").exists() and not (tmp_path / "result.json").exists()


def test_the_flag_check_can_fail(capsys):
    # A message naming another command's flag would fail the test above: `toy construct` has no --steps.
    assert "--steps" not in _options(COMMANDS["toy construct"]) and "--steps" in _options(COMMANDS["toy train"])
    assert json.dumps(sorted(_options(COMMANDS["toy construct"]))) == ('["--L", "--d", "--json", "--tau", '
                                                                     '"--threads", "--variant"]')


def test_shared_options_are_declared_once_the_same_on_every_command():
    """Regression: ``probe --quiet`` was refused while capture, lens and the others took it, and each command
    worded --quiet and --threads its own way."""
    from countlens.core.args import COMMON_OPTIONS, NOTHING_TO_HIDE

    seen: dict[str, dict[str, tuple]] = {}
    for command, parser in COMMANDS.items():
        for action in parser._actions:
            if action.dest in (*COMMON_OPTIONS, "device") and action.help != NOTHING_TO_HIDE:
                default = None if action.default in (None, argparse.SUPPRESS) else action.default
                seen.setdefault(action.dest, {})[command] = (tuple(action.option_strings), action.help.split(
                    " (default")[0], action.type, default)
            elif action.dest == "quiet":  # taken where it has nothing to hide, and said to do nothing
                seen.setdefault("quiet: nothing to hide", {})[command] = (tuple(action.option_strings),
                                                                          action.help, action.type, False)
    for name, by_command in seen.items():
        flags = {v[0] for v in by_command.values()}
        helps = {v[1] for v in by_command.values()}
        types = {v[2] for v in by_command.values()}
        assert len(flags) == 1 and len(helps) == 1 and len(types) == 1, (name, by_command)
        if name != "threads":  # a command may choose its own thread count (by measurement), shown in its help
            assert len({v[3] for v in by_command.values()} - {None}) <= 1, (name, by_command)
    progress = {"llm capture", "llm patch", "llm steer", "llm heads", "llm lens", "probe", "probe toy-acts",
                "toy rates", "toy lcap", "toy table3", "toy train", "toy table2", "toy figure2", "toy figure3",
                "toy figure4"}
    progress |= {"reproduce", "study"}  # `reproduce --quiet` was refused
    assert progress <= set(seen["quiet"]), progress - set(seen["quiet"])
    # `geometry --quiet` was refused: taken beside the commands that show progress, its help saying it does nothing
    assert set(seen["quiet: nothing to hide"]) == {"geometry", "compare", "llm diagnose"}
    assert {"llm lens", "toy train", "toy table2", "toy table3", "toy figure2", "llm capture", "llm components",
            "llm patch", "llm heads"} <= set(seen["threads"])  # `llm capture --threads 1` was refused
    # and every other command that computes on the CPU (probe and probe sweep set their BLAS threads with
    # --blas-threads, their config's field)
    assert {"llm das", "geometry", "compare", "reproduce", "study", "probe toy-acts", "organism train",
            "organism check", "organism scaling", "toy construct", "toy check", "toy rates", "toy lcap",
            "toy figure1"} <= set(seen["threads"])
    args = build_parser(["probe"]).parse_args(["probe", "--acts", "a", "--out", "o", "--quiet"])
    assert args.quiet is True
    args = build_parser(["probe"]).parse_args(["probe", "--quiet", "toy-acts", "--params", "p", "--out", "o"])
    assert args.quiet is True  # given before the subcommand, kept


def test_reproduce_quiet_turns_off_every_stages_progress_and_nothing_else():
    from countlens.pipeline.reproduce import build_stages

    loud, quiet = build_stages("test"), build_stages("test", progress=False)
    assert sum(bool(s.options.get("progress")) for s in loud) >= 10
    assert [s.name for s in quiet] == [s.name for s in loud]
    for a, b in zip(loud, quiet, strict=True):
        assert b.options == ({**a.options, "progress": False} if "progress" in a.options else a.options)
        assert b.identity() == a.identity()  # how a stage runs, never what it computes (resumes reuse it)
    args = build_parser(["reproduce"]).parse_args(["reproduce", "--preset", "test", "--out", "o", "--quiet"])
    assert args.quiet is True


def test_an_integer_list_option_takes_the_one_grammar(tmp_path, capsys):
    """Every integer-list option reads ``0:10,12,20:30:5``; a bad one is one line naming the command's flag."""
    for argv, flag in ((["toy", "table2", "--d", "4", "--L", "5", "--seeds", "0:4:2,9:8", "--json", "x"], "--seeds"),
                       (["toy", "rates", "--L", "10:20:0"], "--L"),
                       (["toy", "table3", "--attained", "--attained-grid", "5,x"], "--attained-grid"),
                       (["llm", "prompts", "--counts", "1:"], "--counts"),
                       (["probe", "--acts", "a", "--out", str(tmp_path / "o"), "--seeds", "1:2:3:4"], "--seeds")):
        assert main(argv) == 2
        err = capsys.readouterr().err.strip()
        assert len(err.splitlines()) == 1 and err.startswith(f"countlens: error: {flag} takes integers and "
                                                              "inclusive ranges with an optional step"), err


def test_study_names_its_own_flag_for_a_models_error(tmp_path, capsys):
    """Regression: ``study --models default,/nonexistent`` said "set model to ..." (study's flag is --models)."""
    assert main(["study", "--models", f"default,{tmp_path / 'nonexistent'}", "--preset", "test",
                 "--out", str(tmp_path / "out")]) == 2
    err = capsys.readouterr().err.strip()
    assert "set --models to" in err and "set model" not in err and len(err.splitlines()) == 1, err
    assert not (tmp_path / "out").exists()


def test_every_option_has_help_and_shows_its_default():
    from countlens.core.args import HelpFormatter

    missing = []
    for command, parser in COMMANDS.items():
        formatter = HelpFormatter(parser.prog)
        for action in parser._actions:
            if not action.option_strings or isinstance(action, (argparse._HelpAction, argparse._VersionAction)):
                continue
            text = formatter._get_help_string(action) or ""
            if not action.help or (action.nargs != 0 and not action.required and "default" not in text
                                   and "required" not in text):
                missing.append((command, max(action.option_strings, key=len)))
    assert missing == []


# The task option's values that name a file or an option (issue 30): each bad one is one line naming --task, exit 2,
# nothing written, before any model is read (the model named here does not exist, so an error about it would
# come first if the task were checked after it).
BAD_TASKS = [("file:{MISSING}.jsonl", "does not exist"), ("file:{EMPTY}", "holds no records"),
             ("file:{BROKEN}", "line 2: is not JSON"), ("objects:category=planets", "category must be one of"),
             ("objects:colour=red", "objects takes the options category")]


@pytest.mark.parametrize("command", ["llm prompts", "llm capture", "llm patch", "llm heads"])
@pytest.mark.parametrize(("task", "words"), BAD_TASKS, ids=[t for t, _ in BAD_TASKS])
def test_a_bad_task_is_one_line_before_the_model(command, task, words, tmp_path, capsys):
    (tmp_path / "empty.jsonl").write_text("")
    (tmp_path / "broken.jsonl").write_text('{"text": "a", "count": 0}\n{"text": \n')
    names = {"MISSING": str(tmp_path / "missing"), "EMPTY": str(tmp_path / "empty.jsonl"),
             "BROKEN": str(tmp_path / "broken.jsonl"), "OUT": str(tmp_path / "out")}
    argv = [*command.split(), "--model", names["MISSING"], "--task", task.format(**names)]
    code = main(argv + ([] if command == "llm prompts" else ["--out", names["OUT"]]))
    err = [line for line in capsys.readouterr().err.splitlines() if line.strip()]
    assert code == 2 and len(err) == 1 and err[0].startswith("countlens: error: --task: ") and words in err[0], err
    assert not (tmp_path / "out").exists()


def test_objects_and_file_tasks_build_and_refuse_what_they_lack(tiny_chat_model, tmp_path, capsys):
    from pathlib import Path

    example = Path(__file__).parents[2] / "docs" / "tasks" / "example.jsonl"
    assert main(["llm", "prompts", "--model", str(tiny_chat_model), "--task", "objects:category=animal", "--L", "6",
                 "--counts", "0:3", "--seeds", "0", "--show", "2"]) == 0
    out = capsys.readouterr().out
    assert "How many animals" in out or "number of animals" in out or "how many animals" in out
    assert main(["llm", "prompts", "--model", str(tiny_chat_model), "--task", f"file:{example}", "--show", "5"]) == 0
    out = capsys.readouterr().out
    assert f"5 prompts in all of the task file:{example}" in out and "You count carefully." in out
    # a file task has no corrupted twin: patching over positions refuses it in one line, before the model
    assert main(["llm", "patch", "--model", str(tiny_chat_model), "--task", f"file:{example}", "--positions", "all",
                 "--out", str(tmp_path / "out")]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "corrupted twin" in err and "a record names no text" in err, err
    assert not (tmp_path / "out").exists()


def test_a_read_out_the_answers_cannot_give_is_one_line_before_the_weights(tiny_chat_model, tmp_path, capsys):
    """Issue 31 point 6: a metric that needs answers the task or tokenizer cannot give is refused from the config
    and the tokenizer alone (the model below has no weights file): boundary patching when a file task has fewer
    prompts of the source count than of the target count (a KeyError traceback before)."""
    import shutil
    from pathlib import Path

    bare = tmp_path / "no-weights"
    bare.mkdir()
    for f in Path(tiny_chat_model).iterdir():
        if not f.name.endswith((".safetensors", ".bin")):
            shutil.copy(f, bare / f.name)
    records = tmp_path / "records.jsonl"
    records.write_text('{"text": "How many cats: cat dog cat?", "count": 2}\n{"text": "How many dogs: cat dog dog?", '
                       '"count": 2}\n{"text": "How many cats: cat cat cat dog?", "count": 3}\n')
    out = tmp_path / "out"
    # (the direct logit attribution no longer refuses answers that share a first token: it reads where they differ,
    # issue 46 point 7, tests/unit/test_shared_first_token.py)
    for argv, flag, words in (
            (["llm", "patch", "--task", f"file:{records}", "--sources", "3", "--targets", "2"], "--sources",
             "2 prompts of count 2 and 1 of count 3"),):
        assert main([*argv, "--model", str(bare), "--out", str(out)]) == 2
        err = [line for line in capsys.readouterr().err.splitlines() if line.strip()]
        assert len(err) == 1 and flag in err[0] and words in err[0], err
        assert not out.exists()


def test_diagnose_refuses_a_lens_and_components_of_two_tasks(inputs, tmp_path, capsys):
    # The lens read a capture of the default task (lists); components counted on repeat: one line, exit 2.
    components = tmp_path / "components-repeat"
    assert main(["llm", "components", "--model", inputs["TINY"], "--task", "repeat:separator=comma", "--counts", "1:3",
                 "--seeds", "0", "--ablate-prompts", "0", "--out", str(components), "--quiet"]) == 0
    capsys.readouterr()
    out = tmp_path / "out"
    assert main(["llm", "diagnose", "--lens", inputs["LENS"], "--components", str(components), "--out", str(out)]) == 2
    err = [line for line in capsys.readouterr().err.splitlines() if line.strip()]
    assert len(err) == 1 and "--components" in err[0] and "repeat:separator=comma" in err[0], err
    assert not out.exists()
    assert main(["llm", "diagnose", "--lens", inputs["LENS"], "--components", inputs["COMPONENTS"], "--out", str(out)]) == 0
