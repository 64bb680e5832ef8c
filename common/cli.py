"""The ``autobyte`` command. Each subcommand lives in ``common/commands/<name>.py`` and
exposes ``register(subparsers)``, which adds its parser and sets ``func(args) -> int``."""

from __future__ import annotations

import argparse
import importlib
import os
import re
import sys

from common.errors import AutoByteError
from common.output import VERBOSE_ENV, setup_logging

__all__ = ["main"]

# Subcommand modules under common/commands, in the order `autobyte --help` lists them.
COMMANDS: tuple[str, ...] = ("demo", "simulate", "testbed", "launch", "coordinator", "report",
                             "meta", "bench")
# A minus then a digit is a value, never an option: no page has options like -1.
_NEGATIVE = re.compile(r"-\.?[0-9]")


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="autobyte",
        description="Self-tuning communication scheduling for data-parallel training.",
    )
    parser.add_argument("-v", "--verbose", action="store_true",
                        help="debug logging, and the frameworks' own logs (also in the "
                             "workers a command starts)")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)
    for name in COMMANDS:
        importlib.import_module(f"common.commands.{name}").register(sub)
    _name_pages(parser)
    return parser


def _name_pages(parser: argparse.ArgumentParser) -> None:
    """Every page knows its own name (``autobyte meta train``), for its error messages, and
    takes a negative-looking value (``--credit -1MB``) as a value, so that the command's own
    check says what is wrong with it rather than argparse's "expected one argument"."""
    parser._negative_number_matcher = _NEGATIVE
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for page in action.choices.values():
                page.set_defaults(page_name=page.prog)
                _name_pages(page)


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if args.verbose:
        os.environ[VERBOSE_ENV] = "1"  # workers started from here inherit it
    setup_logging()
    try:
        return int(args.func(args) or 0)
    except AutoByteError as exc:
        print(f"{args.page_name}: error: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print(f"{args.page_name}: interrupted", file=sys.stderr)
        return 130


if __name__ == "__main__":
    sys.exit(main())
