"""``python -m ballast.annotator ...``: the annotator command on its own (same flags as ``ballast
annotator``)."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence

from ballast.annotator.cli import COMMAND
from ballast.program.logs import setup_logging


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m ballast.annotator")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    sub.required = True
    COMMAND.register(sub)
    args = parser.parse_args(["annotator", *(sys.argv[1:] if argv is None else argv)])
    setup_logging(args.log_level, args.log_format)
    return int(args.func(args) or 0)


if __name__ == "__main__":
    sys.exit(main())
