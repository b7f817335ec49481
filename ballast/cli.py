"""``ballast``: one command, a subcommand per program (extender, annotator, rebalancer, agent)."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence

from ballast import __version__
from ballast.agent import cli as agent_cli
from ballast.annotator import cli as annotator_cli
from ballast.extender import cli as extender_cli
from ballast.program.logs import setup_logging
from ballast.rebalancer import cli as rebalancer_cli


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="ballast",
        description="Ballast: load-aware and topology-aware scheduling for Kubernetes.",
    )
    parser.add_argument("--version", action="version", version=f"ballast {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    sub.required = True
    extender_cli.register(sub)
    annotator_cli.register(sub)
    rebalancer_cli.register(sub)
    agent_cli.register(sub)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    setup_logging(getattr(args, "log_level", "info"), getattr(args, "log_format", "text"))
    return int(args.func(args) or 0)


if __name__ == "__main__":
    sys.exit(main())
