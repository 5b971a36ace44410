"""One argparse builder for the command lines whose options are a dataclass's fields."""

from __future__ import annotations

import argparse
import dataclasses
import inspect
import typing
from typing import Any


def add_fields(parser: argparse.ArgumentParser, cls: type, skip: tuple[str, ...] = (),
               hidden: tuple[str, ...] = (), **special: dict[str, Any]) -> None:
    """A flag per field of dataclass ``cls`` (``tau_width`` -> ``--tau-width``), defaulting to the
    field's default and typed by its annotation: int, float or str (``X | None`` as X), a bool
    as ``--flag``/``--no-flag``, ``list[X]`` as a repeatable flag (None when not given). The help
    text is the field's ``help`` metadata, else its trailing comment in the class's source, as
    written (a ``%`` is shown as is). A field whose metadata names a ``group`` goes into that
    argument group (in the order groups first appear); a group in ``hidden`` is parsed but not
    listed in --help.
    ``skip``: fields the caller adds itself; ``special``: add_argument keywords per field."""
    hints, helps = typing.get_type_hints(cls), field_help(cls)
    groups: dict[str, Any] = {}
    for f in dataclasses.fields(cls):
        if f.name in skip:
            continue
        kind, kw = hints[f.name], {"default": f.default}
        if kind is bool:
            kw["action"] = argparse.BooleanOptionalAction
        elif typing.get_origin(kind) is list:
            kw.update(action="append", type=typing.get_args(kind)[0], default=None)
        else:
            args = [a for a in typing.get_args(kind) if a is not type(None)]
            kw["type"] = args[0] if args else kind
        kw.update(special.get(f.name, {}))
        text = helps.get(f.name)  # argparse reads % as a format: a plain "95%" must be "95%%"
        text = text.replace("%", "%%") if text else None
        group = f.metadata.get("group")
        if group in hidden:
            text = argparse.SUPPRESS
        target = parser
        if group and group not in hidden:
            if group not in groups:
                groups[group] = parser.add_argument_group(group)
            target = groups[group]
        target.add_argument("--" + f.name.replace("_", "-"), help=text, **kw)


def field_help(cls: type) -> dict[str, str]:
    """{field: help text} of a dataclass: the field's ``help`` metadata, else the comment that
    ends its ``name: type = default  # comment`` line in the class's source."""
    helps = {}
    for line in inspect.getsource(cls).splitlines():
        name, _, rest = line.strip().partition(":")
        if "#" in rest and name.isidentifier():
            helps[name] = rest.split("#", 1)[1].strip()
    helps.update({f.name: f.metadata["help"] for f in dataclasses.fields(cls)
                  if "help" in f.metadata})
    return helps


def given_flags(parser: argparse.ArgumentParser, argv: list[str] | None) -> set[str]:
    """The destinations of the flags typed in ``argv``, even those given their default value
    (a second parse with every default suppressed; ``parser`` is spent afterwards)."""
    for action in parser._actions:
        action.default = argparse.SUPPRESS
    return set(vars(parser.parse_known_args(argv)[0]))
