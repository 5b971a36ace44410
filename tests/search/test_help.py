"""search.run's --help: the everyday flags in four groups, each help text at most two lines at
100 columns; the research knobs are parsed always and listed by --help-all alone. And
SearchConfig leaves the model's fields to ModelConfig's checks, naming the flag."""

from __future__ import annotations

import dataclasses
import re
import subprocess
import sys

import pytest

from search.config import RESEARCH, SearchConfig, build_parser, parse_args

from .conftest import env

GROUPS = ["task and data", "what to learn and the budget", "training", "output and device"]
WIDTH = 100
HELP_COLUMN = 32  # _Formatter's max_help_position: where the help texts start


def flag(name: str) -> str:
    return "--" + name.replace("_", "-")


RESEARCH_FLAGS = [flag(f.name) for f in dataclasses.fields(SearchConfig)
                  if f.metadata.get("group") == RESEARCH]


def options(text: str) -> dict[str, list[str]]:
    """Each option entry of a help text (from its first option string) -> its help text lines.
    An entry starts on a line indented by 2 with a '-'; its help is what follows the option
    strings on that line (none when they are too long to leave room) and the lines indented to
    the help column below it."""
    entries: dict[str, list[str]] = {}
    current = None
    for line in text.splitlines():
        if re.match(r"^  -", line):
            names, _, rest = line[2:].partition("  ")
            current = names.split(",")[0].split()[0]
            entries[current] = [rest.strip()] if rest.strip() else []
        elif current and line.startswith(" " * HELP_COLUMN) and line.strip():
            entries[current].append(line.strip())
        else:
            current = None
    return entries


def sections(text: str) -> list[str]:
    """The argument group headings, in order."""
    return [line[:-1] for line in text.splitlines() if re.match(r"^\S.*:$", line)]


def option_strings(text: str) -> set[str]:
    """Every option string a help text names in its usage and option lines."""
    return set(re.findall(r"(?<![\w-])(--?[a-z][\w-]*)", text))


@pytest.fixture(scope="module")
def everyday() -> str:
    return build_parser().format_help()


@pytest.fixture(scope="module")
def everything() -> str:
    return build_parser(show_all=True).format_help()


def test_help_lists_at_most_30_options_in_four_groups(everyday):
    listed = options(everyday)
    assert "-h" in listed and "--help-all" in listed
    assert len(listed) <= 30, sorted(listed)
    assert sections(everyday) == ["options", *GROUPS]


def test_the_groups_hold_the_flags_their_fields_name(everyday):
    """Each group's heading is followed by the flags whose field names that group."""
    for group in GROUPS:
        body = everyday.split(f"\n{group}:\n", 1)[1].split("\n\n", 1)[0]
        expected = [flag(f.name) for f in dataclasses.fields(SearchConfig)
                    if f.metadata.get("group") == group]
        assert list(options(body)) == expected, group


def test_no_research_knob_is_in_help_and_help_all_lists_every_one(everyday, everything):
    assert len(RESEARCH_FLAGS) == 15
    assert not set(RESEARCH_FLAGS) & option_strings(everyday)
    assert RESEARCH not in everyday
    listed = options(everything)
    assert set(RESEARCH_FLAGS) <= set(listed)
    assert sections(everything)[-1] == RESEARCH
    research = everything.split(f"\n{RESEARCH}:\n", 1)[1].split("\n\n", 1)[0]
    assert list(options(research)) == RESEARCH_FLAGS
    # every field of SearchConfig is a flag --help-all lists; --help lists all but the knobs
    every = {flag(f.name) for f in dataclasses.fields(SearchConfig)}
    assert every <= set(listed)
    assert every - set(RESEARCH_FLAGS) <= set(options(everyday))


def test_research_knobs_are_parsed_although_not_listed():
    cfg, given = parse_args(["--tau-width", "30", "--warmup", "0.1", "--pool", "avg"])
    assert (cfg.tau_width, cfg.warmup, cfg.pool) == (30.0, 0.1, "avg")
    assert {"tau_width", "warmup", "pool"} <= given


@pytest.mark.parametrize("show_all", [False, True], ids=["help", "help-all"])
def test_every_help_text_is_at_most_two_lines_at_width_100(show_all):
    text = build_parser(show_all=show_all).format_help()
    assert max(len(line) for line in text.splitlines()) <= WIDTH
    for name, lines in options(text).items():
        assert lines, name  # every option says what it does
        assert len(lines) <= 2, (name, lines)


def test_metavars_name_the_type(everything):
    listed = {line.split()[0]: line.split()[1] for line in everything.splitlines()
              if re.match(r"^  --\w", line) and not line.split()[0].endswith(",")
              and len(line.split()) > 1 and line.split()[1].isupper()}
    assert listed["--width"] == "INT" and listed["--budget"] == "FLOAT"
    assert listed["--task"] == "STR" and listed["--tau-width"] == "FLOAT"


@pytest.mark.slow
def test_the_commands_print_what_the_parser_formats(everyday, everything):
    """python -m search.run --help and --help-all: exit 0, the formatted help on stdout."""
    for arg, expected in (("--help", everyday), ("--help-all", everything)):
        proc = subprocess.run([sys.executable, "-m", "search.run", arg], capture_output=True,
                              text=True, env=env(), timeout=300)
        assert proc.returncode == 0, proc.stderr
        assert proc.stdout == expected


# --- SearchConfig.validate leaves the model's fields to ModelConfig ----------------------------


@pytest.mark.parametrize("kwargs, message", [
    (dict(width=5000), "--width must be <= 1024, got 5000"),
    (dict(depth=0), "--depth must be >= 1, got 0"),
    (dict(dropout=1.0), "--dropout must be in [0, 1), got 1.0"),
    (dict(tau_depth=0.0), "--tau-depth must be > 0, got 0.0"),
    (dict(pool="max"), "--pool must be one of avg, avgmax, got 'max'"),
    (dict(crop="never"), "--crop must be one of bin, pays, got 'never'"),
])
def test_model_fields_are_checked_by_model_config_naming_the_flag(kwargs, message):
    with pytest.raises(ValueError) as error:
        SearchConfig(**kwargs).validate()
    assert str(error.value).startswith(message.split(" ")[0] + " "), str(error.value)
    assert str(error.value) == message


def test_a_width_over_the_limit_names_the_flag():
    with pytest.raises(ValueError, match=r"^--width"):
        SearchConfig(width=5000).validate()
    assert SearchConfig(width=1024).model_fields()["width"] == 1024
