"""The word tables of the training data (``model/training/tables/*.json``): loading, the generators a kind's
entry names, and that a non-editable install ships the files."""

import fnmatch
import random
import tomllib
from pathlib import Path

import pytest

from model.training import kinds as K
from model.training import values as V
from model.training.tables import frozen, load, words

ROOT = Path(__file__).resolve().parents[1]
TABLES = ROOT / "model" / "training" / "tables"


def test_tables_load_once_as_the_modules_use_them():
    assert load("values") is load("values")
    assert V.CITIES[:3] == ("Paris", "London", "Berlin") and isinstance(V.CITIES, tuple)
    assert words("values", "UNITS_TEMP") == ("celsius", "fahrenheit", "kelvin")
    assert frozen({"a": [1, [2, 3]]}) == {"a": (1, (2, 3))}
    assert K.DOMAINS["physics"][3] == ("physics",)
    assert K.NUMERIC[0] == "{n} of {v}" and K.KINDS["length"].mentions[-1] == "{v} units of {n}"


def test_a_kind_entry_names_its_generator():
    a, b = random.Random(5), random.Random(5)
    assert [K.KINDS["days"].gen(a) for _ in range(20)] == [K.gen_int(1, 14)(b) for _ in range(20)]
    value, spoken = K.gen_of(["choice", "COUNTRIES"])(random.Random(1))
    assert value == spoken and value in V.COUNTRIES
    items, spoken = K.gen_of(["list_of", "FOODS", "PRODUCTS"])(random.Random(2))
    assert 2 <= len(items) <= 4 and all(x in V.FOODS + V.PRODUCTS for x in items)
    assert spoken == ", ".join(items[:-1]) + " and " + items[-1]


def test_lists_are_spoken_as_a_b_and_c():
    assert [V.and_list(x) for x in ([], ["a"], ["a", "b"], ["a", "b", "c"])] == [
        "",
        "a",
        "a and b",
        "a, b and c",
    ]


def test_bad_tables_are_named():
    with pytest.raises(ValueError, match="kind 'x': unknown generator 'nope'"):
        K.gen_of(["nope"], "kind 'x'")
    with pytest.raises(ValueError, match="unknown value function 'planet'"):
        K.gen_of(["str", "planet"])
    with pytest.raises(ValueError, match=r"kind 'y'.*no generator"):
        K.kind_of("y", {"schema": {}, "mentions": []})
    with pytest.raises(FileNotFoundError, match=r"no_such_table\.json"):
        load("no_such_table")
    with pytest.raises(KeyError, match="no table 'NOPE'"):
        words("values", "NOPE")


def test_the_package_data_ships_every_table():
    conf = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))
    globs = conf["tool"]["setuptools"]["package-data"]["model"]
    files = sorted(p.relative_to(ROOT / "model").as_posix() for p in TABLES.glob("*.json"))
    assert files == [
        "training/tables/bots.json",
        "training/tables/dialogue.json",
        "training/tables/kinds.json",
        "training/tables/values.json",
    ]
    assert all(any(fnmatch.fnmatch(f, g) for g in globs) for f in files)
