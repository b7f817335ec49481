"""``ballast``: one command, a subcommand per program (extender, annotator, rebalancer, agent)."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence

from ballast import __version__
from ballast.agent.cli import COMMAND as AGENT
from ballast.annotator.cli import COMMAND as ANNOTATOR
from ballast.extender.cli import COMMAND as EXTENDER
from ballast.program.logs import setup_logging
from ballast.rebalancer.cli import COMMAND as REBALANCER

COMMANDS = (EXTENDER, ANNOTATOR, REBALANCER, AGENT)
"""The programs, each declared by its own ``cli`` module on one skeleton (``ballast.program.skeleton``)."""


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="ballast",
        description="Ballast: load-aware and topology-aware scheduling for Kubernetes.",
    )
    parser.add_argument("--version", action="version", version=f"ballast {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    sub.required = True
    for command in COMMANDS:
        command.register(sub)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    setup_logging(getattr(args, "log_level", "info"), getattr(args, "log_format", "text"))
    return int(args.func(args) or 0)


if __name__ == "__main__":
    sys.exit(main())
