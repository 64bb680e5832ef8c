"""The ``autobyte`` command. Each subcommand lives in ``common/commands/<name>.py`` and
exposes ``register(subparsers)``, which adds its parser and sets ``func(args) -> int``."""

from __future__ import annotations

import argparse
import importlib
import logging
import sys

from common.errors import AutoByteError

__all__ = ["main"]

# Subcommand modules under common/commands, in the order `autobyte --help` lists them.
COMMANDS: tuple[str, ...] = ("demo", "simulate", "testbed", "launch", "coordinator", "report",
                             "meta", "bench")


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="autobyte",
        description="Self-tuning communication scheduling for data-parallel training.",
    )
    parser.add_argument("-v", "--verbose", action="store_true", help="debug logging")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)
    for name in COMMANDS:
        importlib.import_module(f"common.commands.{name}").register(sub)
    return parser


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.DEBUG if args.verbose else logging.INFO,
                        format="%(asctime)s %(name)s %(levelname)s %(message)s")
    try:
        return int(args.func(args) or 0)
    except AutoByteError as exc:
        print(f"autobyte {args.command}: error: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print(f"autobyte {args.command}: interrupted", file=sys.stderr)
        return 130


if __name__ == "__main__":
    sys.exit(main())
