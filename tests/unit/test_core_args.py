"""Options derived from a config's fields (countlens.core.args.add_config_options): flag, type, default, shown
choices and help come from the field, its FIELDS rule and the string written under it."""

from __future__ import annotations

import argparse
from dataclasses import dataclass
from typing import ClassVar

import pytest

from countlens.core.args import (
    HelpFormatter,
    OneLineParser,
    Option,
    add_config_options,
    cli_message,
    config_values,
)
from countlens.core.errors import ConfigError
from countlens.core.fields import AtLeast, Ints, OneOf, check_fields, field_doc


@dataclass(frozen=True)
class _Config:
    steps: int = 300
    """optimiser steps"""
    seeds: tuple[int, ...] = (0, 1, 2)
    """split seeds"""
    loss: str = "mse"
    """the loss"""
    fast: bool = False
    """go fast"""
    name: str | None = None
    """a name (default: none)"""

    FIELDS: ClassVar[dict] = {"steps": AtLeast(1), "seeds": Ints(minimum=0), "loss": OneOf(("mse", "max"))}

    def __post_init__(self) -> None:
        check_fields(self, self.FIELDS, assign=True)


def _parser(**kw) -> argparse.ArgumentParser:
    parser = OneLineParser(prog="x", formatter_class=HelpFormatter)
    add_config_options(parser, _Config(), **kw)
    return parser


def test_the_field_documents_itself():
    assert field_doc(_Config, "steps") == "optimiser steps"
    assert field_doc(_Config, "name") == "a name (default: none)"


def test_each_field_becomes_its_option():
    parser = _parser()
    actions = {a.dest: a for a in parser._actions if a.option_strings and a.dest != "help"}
    assert {d: max(a.option_strings, key=len) for d, a in actions.items()} == {
        "steps": "--steps", "seeds": "--seeds", "loss": "--loss", "fast": "--fast", "name": "--name"}
    assert actions["steps"].type is int and actions["steps"].default == 300
    assert actions["seeds"].default == "0,1,2" and actions["loss"].metavar == "{mse,max}"
    assert isinstance(actions["steps"].rule, AtLeast) and actions["fast"].nargs == 0
    text = parser.format_help()
    assert "optimiser steps (default: 300)" in text and "split seeds (default: 0,1,2)" in text


def test_values_come_back_parsed_and_the_config_checks_them():
    parser = _parser()
    args = parser.parse_args(["--seeds", "0:3", "--steps", "5", "--fast"])
    config = _Config(**config_values(args))
    assert config == _Config(steps=5, seeds=(0, 1, 2, 3), fast=True)
    args = parser.parse_args(["--loss", "l1"])
    with pytest.raises(ConfigError) as caught:
        _Config(**config_values(args))
    assert cli_message(caught.value, args._parser) == "--loss must be one of mse, max, got 'l1'"


def test_a_command_declares_only_what_differs():
    parser = _parser(options={"seeds": Option("seeds", alias="--split-seeds")}, unset=True,
                     helps={"steps": "how long"})
    args = parser.parse_args(["--split-seeds", "-1"])
    assert config_values(args) == {"seeds": (-1,)}  # unset options are left to the config's defaults
    with pytest.raises(ConfigError) as caught:
        _Config(**config_values(args))
    assert cli_message(caught.value, args._parser).startswith("--split-seeds values must be >= 0")
    assert "how long (default: 300)" in parser.format_help()


def test_a_subcommand_inherits_its_parents_values_and_a_no_switch_turns_a_setting_off():
    """``probe --seeds 0 sweep``: a value given before the subcommand stays unless given again; ``--no-<x>``
    turns a setting off; a rule given by the command reaches the action (for the every-option test)."""
    from countlens.core.fields import Ints

    parent = OneLineParser(prog="x", formatter_class=HelpFormatter)
    add_config_options(parent, _Config, ("seeds",), unset=True)
    sub = parent.add_subparsers(dest="cmd", parser_class=OneLineParser)
    child = sub.add_parser("child", formatter_class=HelpFormatter)
    actions = add_config_options(child, _Config, ("seeds", "steps", "fast"), inherit=True,
                                 options={"fast": Option("fast", alias="--no-fast", help="slow (default: fast)"),
                                          "steps": Option("steps", rule=Ints(minimum=2))})
    assert config_values(parent.parse_args(["--seeds", "4", "child"])) == {"seeds": (4,)}
    assert config_values(parent.parse_args(["--seeds", "4", "child", "--seeds", "5"])) == {"seeds": (5,)}
    assert config_values(parent.parse_args(["child", "--no-fast", "--steps", "7"])) == {"fast": False, "steps": 7}
    assert config_values(parent.parse_args(["child"])) == {}  # the config's defaults
    assert isinstance(actions[1].rule, Ints) and actions[1].rule.minimum == 2
    text = child.format_help()
    assert "optimiser steps (default: 300)" in text and "split seeds (default: 0,1,2)" in text and "slow" in text


def test_a_switch_named_for_its_negation_is_turned_on_by_its_flag():
    """``--no-cache`` sets ``no_cache`` (the setting is the negation itself), while ``--no-standardize`` turns
    ``standardize`` off: read back from the real commands' parsers."""
    from countlens.pipeline.cli import build_parser

    argv = ["llm", "capture", "--out", "b", "--no-cache"]
    assert build_parser(argv).parse_args(argv).no_cache is True
    argv = ["llm", "capture", "--out", "b"]
    assert not build_parser(argv).parse_args(argv).no_cache
    argv = ["probe", "--acts", "a", "--out", "b", "--no-standardize"]
    assert build_parser(argv).parse_args(argv).standardize is False


def test_the_probe_subcommands_options_are_their_configs_fields():
    """``probe toy-acts`` and ``probe redraw`` (hand-written options before issue 42) derive theirs from
    :class:`ToyActsConfig` and :class:`RedrawConfig`; only the output folder is the command's own. A
    ``--figure-locations`` given to ``probe`` before ``redraw`` is kept, and the config's rule names the
    subcommand's flag."""
    from countlens.pipeline.cli import build_parser
    from countlens.probes.cli import RedrawConfig, ToyActsConfig

    parser = build_parser(["probe"])
    argv = ["probe", "toy-acts", "--params", "p.json", "--out", "o", "--L", "7"]
    args = parser.parse_args(argv)
    derived = {a.dest for a in args._parser._actions if getattr(a, "option", None) is not None}
    assert derived == {"params", "L", "seed"}
    assert ToyActsConfig(**config_values(args)) == ToyActsConfig(params="p.json", L=7, seed=0)
    args = parser.parse_args([*argv[:-1], "0"])
    with pytest.raises(ConfigError) as caught:
        ToyActsConfig(**config_values(args))
    assert cli_message(caught.value, args._parser) == "--L must be >= 1, got 0"
    args = parser.parse_args(["probe", "--figure-locations", "a, b", "redraw", "--result", "r.json"])
    assert {a.dest for a in args._parser._actions if getattr(a, "option", None) is not None} == {
        "result", "figure_locations"}
    assert RedrawConfig(**config_values(args)) == RedrawConfig(result="r.json", figure_locations=("a", "b"))
    args = parser.parse_args(["probe", "--figure-locations", "a", "redraw", "--result", "r.json",
                              "--figure-locations", "c"])
    assert config_values(args)["figure_locations"] == ("c",)
