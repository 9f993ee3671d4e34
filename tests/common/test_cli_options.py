"""Flags generated from dataclass fields: names, kinds, defaults, and argv that parses back."""

import argparse
import dataclasses
from dataclasses import dataclass, field

import pytest

from common.cli_options import add_flags, build, flags_of, option, to_argv


@dataclass(frozen=True)
class Knobs:
    size: int = field(default=4, metadata=option("how many"))
    ratio: float = field(default=0.5, metadata=option("how much", metavar="R"))
    name: str | None = field(default=None, metadata=option("what it is called"))
    mode: str = field(default="a", metadata=option("which mode", choices=("a", "b")))
    fast: bool = field(default=False, metadata=option("go faster"))
    cache: bool = field(default=True, metadata=option("no cache", flag="--no-cache"))
    tags: tuple[str, ...] = field(default=(), metadata=option("a tag", flag="--tag"))
    threads: int | None = field(default=None, metadata=option("threads", flag="--threads"))
    internal_s: float = 1.0  # no option(): no flag


def parse(cls: type, argv: list[str], exclude: frozenset[str] = frozenset()) -> argparse.Namespace:
    parser = argparse.ArgumentParser()
    add_flags(parser, cls, exclude)
    return parser.parse_args(argv)


def test_flag_names_kinds_and_defaults_follow_the_fields():
    got = [(f.name, f.flag, f.kind, f.value_type, f.default) for f in flags_of(Knobs)]
    assert got == [
        ("size", "--size", "value", int, 4),
        ("ratio", "--ratio", "value", float, 0.5),
        ("name", "--name", "value", str, None),
        ("mode", "--mode", "value", str, "a"),
        ("fast", "--fast", "switch", bool, False),
        ("cache", "--no-cache", "switch", bool, True),
        ("tags", "--tag", "repeat", str, ()),
        ("threads", "--threads", "value", int, None),
    ]


def test_no_flags_give_the_field_defaults():
    assert build(Knobs, parse(Knobs, [])) == Knobs()


def test_flags_reach_their_fields():
    argv = ["--size", "9", "--name", "x", "--mode", "b", "--fast", "--no-cache"]
    argv += ["--tag", "t1", "--tag", "t2", "--threads", "3", "--ratio", "0.25"]
    got = build(Knobs, parse(Knobs, argv))
    assert got == Knobs(9, 0.25, "x", "b", True, False, ("t1", "t2"), 3)


def test_a_repeatable_flag_takes_several_values_each_time():
    got = build(Knobs, parse(Knobs, ["--tag", "t1", "t2", "--size", "2", "--tag", "t3"]))
    assert (got.tags, got.size) == (("t1", "t2", "t3"), 2)


def test_choices_and_types_are_enforced_by_the_parser():
    with pytest.raises(SystemExit):
        parse(Knobs, ["--mode", "c"])
    with pytest.raises(SystemExit):
        parse(Knobs, ["--size", "many"])


def test_argv_parses_back_to_the_same_instance():
    changed = Knobs(7, 0.125, "-dash-first", "b", True, False, ("x", "-y"), 2, 9.0)
    for knobs in (Knobs(), changed):
        again = build(Knobs, parse(Knobs, to_argv(knobs)))
        assert again == dataclasses.replace(knobs, internal_s=1.0)  # no flag: not carried


def test_excluded_fields_get_no_flag_and_take_overrides():
    args = parse(Knobs, [], exclude=frozenset({"threads"}))
    assert not hasattr(args, "threads")
    with pytest.raises(SystemExit):
        parse(Knobs, ["--threads", "2"], exclude=frozenset({"threads"}))
    assert build(Knobs, args, {"threads"}, threads=5).threads == 5
    assert "--threads=2" not in to_argv(Knobs(threads=2), {"threads"})


def test_an_environment_variable_gives_the_default(monkeypatch):
    @dataclass(frozen=True)
    class Secret:
        key: str | None = field(default=None, metadata=option("key", env="TEST_CLI_KEY"))

    assert build(Secret, parse(Secret, [])).key is None
    monkeypatch.setenv("TEST_CLI_KEY", "from-env")
    assert build(Secret, parse(Secret, [])).key == "from-env"
    assert build(Secret, parse(Secret, ["--key", "given"])).key == "given"


def test_a_required_field_needs_a_flag_default():
    @dataclass(frozen=True)
    class Link:
        address: str = field(metadata=option("where", flag_default="tcp://127.0.0.1:1"))

    assert build(Link, parse(Link, [])).address == "tcp://127.0.0.1:1"

    @dataclass(frozen=True)
    class Broken:
        address: str = field(metadata=option("where"))

    with pytest.raises(TypeError, match="no default"):
        flags_of(Broken)


def test_a_field_type_without_a_flag_form_is_refused():
    @dataclass(frozen=True)
    class Odd:
        sizes: list[int] = field(default_factory=list, metadata=option("sizes"))

    with pytest.raises(TypeError, match="sizes"):
        flags_of(Odd)


def test_a_new_field_is_one_declaration():
    @dataclass(frozen=True)
    class MoreKnobs(Knobs):
        draft_tokens: int = field(default=0, metadata=option("tokens drafted per step"))

    args = parse(MoreKnobs, ["--draft-tokens", "4"])
    assert build(MoreKnobs, args).draft_tokens == 4
    assert "--draft-tokens=4" in to_argv(MoreKnobs(draft_tokens=4))


def test_help_names_a_value_after_its_flag_and_lists_choices():
    parser = argparse.ArgumentParser()
    add_flags(parser, Knobs)
    usage = parser.format_usage()
    assert "--threads THREADS" in usage and "--ratio R" in usage
    assert "--mode {a,b}" in usage and "--tag TAG" in usage


@dataclass(frozen=True)
class Dials:
    gateways: tuple[str, ...] = field(default=("g0",), metadata=option("dial", flag="--gateway"))


def test_a_repeated_flag_given_replaces_its_default_and_absent_keeps_it():
    assert build(Dials, parse(Dials, [])).gateways == ("g0",)
    assert build(Dials, parse(Dials, ["--gateway", "g1"])).gateways == ("g1",)
    both = parse(Dials, ["--gateway", "g1", "--gateway", "g2"])
    assert build(Dials, both).gateways == ("g1", "g2")
    assert build(Dials, parse(Dials, to_argv(Dials(("g3", "g4"))))) == Dials(("g3", "g4"))
    assert build(Dials, parse(Dials, [])).gateways == ("g0",)  # the default was not changed
