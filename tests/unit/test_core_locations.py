"""Location specs: names, indices, inclusive ranges with negative ends and steps, against the list they
name written out by hand."""

import pytest

from countlens.core.errors import UsageError
from countlens.core.locations import resolve_location, resolve_locations

NAMES = ["hook_embed"] + [f"blocks.{i}.hook_resid_post" for i in range(10)]  # 11 locations


@pytest.mark.parametrize("spec, expected", [
    (None, list(range(11))), ("all", list(range(11))), ("3", [3]), ("-1", [10]),
    ("0:5", [0, 1, 2, 3, 4, 5]), ("2:-1", list(range(2, 11))), ("0:-1:4", [0, 4, 8]),
    ("0:-1:4,-1", [0, 4, 8, 10]), ("1:9:3", [1, 4, 7]), ("blocks.2.hook_resid_post,4,3", [3, 4]),
])
def test_specs_name_the_locations_written_out(spec, expected):
    assert resolve_locations(NAMES, spec) == expected


@pytest.mark.parametrize("spec", ["11", "-12", "5:2", "0:11", "0:-1:0", "0:-1:-2", "x", "0:1:2:3"])
def test_a_spec_naming_no_location_is_refused_with_the_choices(spec):
    with pytest.raises(UsageError, match=r"does not exist; choose names or indices 0\.\.10"):
        resolve_locations(NAMES, spec)


def test_exactly_one_location():
    assert resolve_location(NAMES, "-1") == 10
    with pytest.raises(UsageError, match="names 3 locations"):
        resolve_location(NAMES, "0:2")
