"""Every command but the benchmarks' own (cli.py adds those from their declarations): each module
declares its commands' options once (an Options class per command, given to ``command``) and runs on
the libraries below it."""

from __future__ import annotations

import argparse
from collections.abc import Callable, Sequence
from typing import Any

from commbench.core.config.options import Options


def command(sub: Any, name: str, options: type[Options], run: Callable[[Any], int], **parser_kw: Any) -> Any:
    """A command whose options are ``options`` (declared once: its parser and its reference page) and
    whose ``run`` takes them typed."""
    p = sub.add_parser(name, **parser_kw)
    options.add_to(p)
    p.options = options  # the reference page finds it here (reference.py)

    def typed(args: argparse.Namespace, argv: Sequence[str]) -> int:
        return run(options.parse(args))

    p.set_defaults(func=typed)
    return p
