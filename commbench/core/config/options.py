"""Options declared once: a frozen dataclass whose fields carry their flags, type, default, bounds and
help; argparse is generated from it and the parsed values come back as an instance of it.

    @dataclass(frozen=True)
    class BandwidthOptions(Options):
        window: int = opt(64, "-W", "--window", type=integer(1, 1 << 20), help="messages per window")

A field's flag defaults to ``--`` plus its name with dashes. ``group`` names the help section
(default: the class's ``title``). Nothing reads options by name from a namespace but ``parse`` here.
"""

from __future__ import annotations

import argparse
from collections.abc import Iterator, Mapping
from dataclasses import MISSING, Field, asdict, dataclass, field, fields, replace
from typing import Any, ClassVar, Self

_ARGPARSE = ("type", "choices", "metavar", "action", "nargs", "const", "help")


def opt(default: Any = None, *flags: str, group: str | None = None, **argparse_kw: Any) -> Any:
    """A declared option: its default, its flags (default ``--field-name``; a name without dashes: a
    positional argument, named by the field) and argparse's keywords."""
    unknown = set(argparse_kw) - set(_ARGPARSE)
    if unknown:
        raise TypeError(f"opt() got unknown keywords {sorted(unknown)}")
    return field(default=default, metadata={"flags": flags, "group": group, "argparse": argparse_kw})


@dataclass(frozen=True)
class Options:
    """Base of every options class (a frozen dataclass of ``opt`` fields)."""

    title: ClassVar[str | None] = None  # the help section of fields without their own group
    groups: ClassVar[tuple[str, ...]] = ()  # help sections in this order first (else: as fields come)

    @classmethod
    def declared(cls) -> Iterator[tuple[Field, type[Options]]]:
        """Every field with the class that declares it (a subclass's help section is its own)."""
        for f in fields(cls):
            owner = next(k for k in reversed(cls.__mro__) if f.name in getattr(k, "__annotations__", {}))
            yield f, owner

    @classmethod
    def add_to(cls, parser: argparse.ArgumentParser, skip: set[str] | None = None,
               overrides: Mapping[str, Mapping[str, Any]] | None = None) -> None:
        """Add every field's flag to ``parser`` (those named in ``skip`` are there already; they are
        added to it). ``overrides`` changes a field's argparse keywords for this parser (e.g. choices)."""
        groups: dict[str, argparse._ArgumentGroup] = {}
        for title in cls.groups:
            groups[title] = next((g for g in parser._action_groups if g.title == title), None) \
                or parser.add_argument_group(title)
        for f, owner in cls.declared():
            if skip is not None:
                if f.name in skip:
                    continue
                skip.add(f.name)
            kw = {**f.metadata.get("argparse", {}), **(overrides or {}).get(f.name, {})}
            section = f.metadata.get("group") or owner.title
            target: Any = parser
            if section:
                target = groups.get(section) or next((g for g in parser._action_groups if g.title == section),
                                                     None) or parser.add_argument_group(section)
                groups[section] = target
            flags = f.metadata.get("flags") or ("--" + f.name.replace("_", "-"),)
            default = kw.pop("default", cls.default_of(f))
            if not flags[0].startswith("-"):  # a positional argument: named by its field
                target.add_argument(f.name, default=default, **kw)
            else:
                target.add_argument(*flags, dest=f.name, default=default, **kw)

    @staticmethod
    def default_of(f: Field) -> Any:
        return None if f.default is MISSING else f.default

    @classmethod
    def parse(cls, ns: argparse.Namespace) -> Self:
        """The options from a parsed namespace (the parser had ``add_to``)."""
        values = vars(ns)
        return cls(**{f.name: values[f.name] for f in fields(cls) if f.name in values})

    @classmethod
    def from_plain(cls, values: Mapping[str, Any], where: str) -> Self:
        """The options as ``plain`` gave them, from outside the command line (the launcher's plan): each
        value through its field's declared type, choices and form again, so that a value no command
        line could give is one UsageError naming ``where`` and the flag."""
        from commbench.core.errors import UsageError

        known = {f.name: f for f in fields(cls)}
        unknown = sorted(set(values) - set(known))
        if unknown:
            raise UsageError(f"{where}: {', '.join(unknown)[:80]} are no options of this command")
        for name, v in values.items():
            f = known[name]
            problem = "" if v is None or v == cls.default_of(f) else _problem(f, v)
            if problem:
                raise UsageError(f"{where}: {flag_of(cls, name)} {str(v)[:40]!r}: {problem}")
        return cls(**values)

    def plain(self) -> dict[str, Any]:
        """The values as results keep them."""
        return asdict(self)

    def but(self, **changes: Any) -> Self:
        """A copy with ``changes``."""
        return replace(self, **changes)


def _problem(f: Field, value: Any) -> str:
    """Why ``value`` is not what the command line gives field ``f`` ("" if it is)."""
    kw = f.metadata.get("argparse", {})
    if kw.get("action") == "store_true":
        return "" if isinstance(value, bool) else "not a flag's value"
    many = kw.get("nargs") not in (None, "?")
    if many != isinstance(value, (list, tuple)):
        return "a list where one value is taken, or the reverse"
    for x in value if many else [value]:
        if isinstance(x, bool) or not isinstance(x, (str, int, float)):
            return "not a value a command line gives"
        if kw.get("type") is not None:
            try:
                kw["type"](str(x))
            except (argparse.ArgumentTypeError, ValueError, TypeError) as exc:
                return str(exc)[:120]
        if kw.get("choices") is not None and x not in kw["choices"]:
            return f"not one of {', '.join(map(str, kw['choices']))[:80]}"
    return ""


@dataclass(frozen=True)
class NoOptions(Options):
    """For what has no options of its own."""


def restate(cls: type[Options], name: str, default: Any, help: str) -> Any:
    """Field ``name`` of ``cls`` declared again in a subclass with another default (and the help saying
    so); its flags, type and group stay as ``cls`` declares them."""
    f = next(f for f in fields(cls) if f.name == name)
    return field(default=default, metadata={**f.metadata, "argparse": {**f.metadata["argparse"], "help": help}})


def flag_of(cls: type[Options], name: str) -> str:
    """The long flag of field ``name``, for messages."""
    f = next(f for f in fields(cls) if f.name == name)
    flags = f.metadata.get("flags") or ("--" + name.replace("_", "-"),)
    return max(flags, key=len)

