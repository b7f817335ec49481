"""Flag types and the help formatter shared by every ``ballast`` command, so flags read one way."""

from __future__ import annotations

import argparse

from common.durations import parse_duration


class HelpFormatter(argparse.ArgumentDefaultsHelpFormatter):
    """Show defaults that say something: not None, False, empty, or ones the help already states."""

    def _get_help_string(self, action: argparse.Action) -> str | None:
        text = action.help or ""
        if action.required or action.default in (None, False, "", []) or "default" in text:
            return text
        return super()._get_help_string(action)


def seconds(text: str) -> float:
    """A duration (``2s``, ``1m``, ``1h30m``); a plain number is seconds, as the flag always took."""
    try:
        value = float(text)
    except ValueError:
        try:
            value = parse_duration(text)
        except ValueError as e:
            raise argparse.ArgumentTypeError(str(e)) from None
    if value < 0 or value != value:
        raise argparse.ArgumentTypeError(f"{text!r} must not be negative")
    return value


def positive_seconds(text: str) -> float:
    value = seconds(text)
    if value <= 0:
        raise argparse.ArgumentTypeError(f"{text!r} must be longer than zero")
    return value
