"""The one set of field checks (countlens.core.fields) and the one integer-list grammar (core.args)."""

from __future__ import annotations

import dataclasses

import pytest

from countlens.core.args import parse_float_list, parse_int_list, parse_window
from countlens.core.errors import ConfigError
from countlens.core.fields import (
    AtLeast,
    Fractions,
    Ints,
    Nested,
    Numbers,
    OneOf,
    Optional,
    Positive,
    Text,
    Window,
    check_fields,
    field_default,
)


@pytest.mark.parametrize("text, expected", [
    ("3", [3]), ("3,4,8", [3, 4, 8]), ("0:3", [0, 1, 2, 3]), ("0:10:5", [0, 5, 10]), ("0:9:5", [0, 5]),
    ("0:2,12,20:30:5", [0, 1, 2, 12, 20, 25, 30]), (" 1 , 2 ,", [1, 2]), ("-1,-3:-2", [-1, -3, -2]),
    ("5,1:2,5", [5, 1, 2, 5]),  # as written: seeds and lengths keep their order
])
def test_one_integer_list_grammar(text, expected):
    assert parse_int_list(text, "seeds") == expected
    assert parse_int_list(text, "counts", sort=True) == sorted(set(expected))


@pytest.mark.parametrize("text", ["", ",", "x", "3:1", "0:9:0", "0:9:-1", "1:2:3:4", "1.5", "0:"])
def test_a_bad_integer_list_names_the_field_never_a_flag(text):
    with pytest.raises(ConfigError) as caught:
        parse_int_list(text, "attained_grid")
    assert caught.value.field == "attained_grid" and "--" not in str(caught.value)
    assert str(caught.value).startswith("attained_grid ")
    # the command line words it with its own flag
    assert caught.value.render(lambda f: "--attained-grid").startswith("--attained-grid ")


def test_float_lists_and_windows_name_the_field():
    assert parse_float_list("1e-3, 2,", "alphas") == [1e-3, 2.0]
    for bad in ("", "a,b"):
        with pytest.raises(ConfigError, match="^alphas ") as caught:
            parse_float_list(bad, "alphas")
        assert caught.value.field == "alphas"
    assert parse_window("91:100", "high") == (91, 100)
    with pytest.raises(ConfigError, match="^low must be an inclusive count range") as caught:
        parse_window("3", "low")
    assert caught.value.field == "low"


@pytest.mark.parametrize("rule, value, normalised", [
    (AtLeast(1), 3, 3), (AtLeast(0), 0.0, 0), (Positive(), 0.5, 0.5), (Positive(zero=True), 0, 0),
    (OneOf(("a", "b")), "b", "b"), (Ints(minimum=0), [2, 0], (2, 0)), (Ints(), 4, (4,)),
    (Numbers(positive=True), [1, 2.5], (1.0, 2.5)), (Numbers(nonnegative=True), (0,), (0.0,)),
    (Window(), [1, 10], (1, 10)), (Fractions(), [0.6, 0.2, 0.2], (0.6, 0.2, 0.2)), (Text("a folder"), "x", "x"),
    (Optional(AtLeast(1)), None, None), (Optional(AtLeast(1)), 2, 2),
])
def test_a_rule_returns_what_it_accepts(rule, value, normalised):
    assert rule(value, "f") == normalised


@pytest.mark.parametrize("rule, value, message", [
    (AtLeast(1), 0, "f must be >= 1, got 0"), (AtLeast(0, " (0: never)"), -1, "f must be >= 0 (0: never), got -1"),
    (AtLeast(1), 2.5, "f must be a whole number, got 2.5"), (AtLeast(1), True, "f must be a whole number"),
    (AtLeast(1), "x", "f must be a whole number, got 'x'"),
    (Positive(), 0, "f must be a positive finite number, got 0"),
    (Positive("nats"), float("inf"), "f must be a positive finite number (nats), got inf"),
    (Positive(zero=True), -1, "f must be a finite number >= 0, got -1"),
    (OneOf(("a", "b")), "c", "f must be one of a, b, got 'c'"),
    (Ints(), [], "f must not be empty"), (Ints(minimum=1), [3, 0], "f values must be >= 1, got 0"),
    (Ints(distinct=True), [1, 1], "f holds a repeated value"), (Ints(), ["x"], "f must be whole numbers"),
    (Numbers(nonnegative=True), [-1, 2], "f must be finite and >= 0, got [-1.0, 2.0]"),
    (Numbers(positive=True), [0], "f must be finite and > 0"), (Numbers(), [float("nan")], "f must be finite"),
    (Numbers(), ["big"], "f must be numbers, got ['big']"), (Numbers(), [], "f must not be empty"),
    (Window(), (2, 1), "f must be lo:hi with 0 <= lo < hi, got 2:1"), (Window(), 3, "f must be two counts"),
    (Fractions(), (0.5, 0.5), "f must be three fractions (train, validation, test) with test > 0"),
    (Text("a capture folder"), " ", "f must name a capture folder"),
    (Nested(dict), 3, "f must be a dict, got 3"),
])
def test_a_rule_names_the_field(rule, value, message):
    with pytest.raises(ConfigError) as caught:
        rule(value, "f")
    assert caught.value.field == "f" and str(caught.value).startswith(message), str(caught.value)


@dataclasses.dataclass(frozen=True)
class _Inner:
    device: str = "cpu"


@dataclasses.dataclass(frozen=True)
class _Config:
    acts: str = ""
    seeds: tuple = (2, 1)
    inner: _Inner = dataclasses.field(default_factory=_Inner)


def test_check_fields_in_order_and_normalised():
    config = _Config(seeds=[3])
    check_fields(config, {"seeds": Ints(minimum=0)}, assign=True)
    assert config.seeds == (3,)  # a frozen config takes the normalised value too
    with pytest.raises(ConfigError, match="^acts must name") as caught:
        check_fields(_Config(seeds=[-1]), {"acts": Text("a folder"), "seeds": Ints(minimum=0)})
    assert caught.value.field == "acts"  # the first rule that fails


def test_field_default_reads_a_default_without_building():
    assert field_default(_Config, "seeds") == (2, 1)
    assert field_default(_Config, "device") == "cpu"  # a nested config's setting
    with pytest.raises(AttributeError):
        field_default(_Config, "nope")


def test_llm_configs_are_checked_when_built_naming_the_field():
    from countlens.llm import CaptureConfig, LensConfig, PatchingConfig, SteeringConfig
    from countlens.llm.models import ModelSpec
    from countlens.llm.prompts import PromptSettings

    for make, field in ((lambda: CaptureConfig(batch_size=0), "batch_size"),
                        (lambda: CaptureConfig(backend="jax"), "backend"),
                        (lambda: ModelSpec(dtype="float8"), "dtype"),
                        (lambda: PromptSettings(counts=[3, 3]), "counts"),
                        (lambda: PatchingConfig(min_gap=0), "min_gap"),
                        (lambda: LensConfig(acts=""), "acts"),
                        (lambda: LensConfig(acts="a", threads=0), "threads"),
                        (lambda: SteeringConfig(acts="a", probes="p", counts=[]), "counts"),
                        (lambda: CaptureConfig().with_options(counts=[300]), "counts")):
        with pytest.raises(ConfigError) as caught:
            make()
        assert caught.value.field == field and "--" not in str(caught.value)
    # a model named by a string is the ModelSpec of that model; no file is read when a config is built
    assert CaptureConfig(model="org/x").model == ModelSpec(model="org/x")
    assert LensConfig(acts="/nowhere/acts").acts == "/nowhere/acts"
