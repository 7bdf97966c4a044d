"""What the ``cdc`` commands' parsers and handlers share, wherever they live (:mod:`cdc.cli`
registers the commands; a command's module may hold its own ``add_parser`` and handler): the
console they print to, the configuration that ``-c`` names, the ``--source`` option, and a
benchmark's console (silent with ``--json``)."""

from __future__ import annotations

import argparse
import os

from rich.console import Console

from common.config import load_config

console = Console(stderr=False)


def load(args: argparse.Namespace):
    """The configuration named by ``-c`` (for subcommands)."""
    return load_config(args.config)


def source_option(p: argparse.ArgumentParser, help_: str) -> None:
    """``--source NAME``: which ``sources`` entry a command is about (not needed with ``source`` alone)."""
    p.add_argument("--source", metavar="NAME", default=None, help=help_)


def bench_console(args: argparse.Namespace) -> Console:
    """Where a benchmark prints its progress and report: nowhere with ``--json`` (the JSON alone
    goes to stdout), else the commands' console."""
    return Console(file=open(os.devnull, "w")) if args.json else console  # noqa: SIM115
