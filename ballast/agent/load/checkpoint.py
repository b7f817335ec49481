"""The load history's checkpoint: the day of per-minute CPU and memory ratios, so a restart keeps the
1-day maximum crane's ``*_max_avg_1d`` needs.

One small JSON file in the agent's state directory, written atomically (temp file, fsync, rename; the CPU
manager's ``write_atomically``). A file that cannot be read or does not hold what this module writes is not
trusted and not deleted: it is set aside as ``<name>.corrupt-<UTC timestamp>`` like the CPU manager's
checkpoint, the caller counts it, and the history starts empty. Pods' 5-minute means are not kept: after
a restart they are measured again within one window.
"""

from __future__ import annotations

import logging
import math
import time
from collections.abc import Callable
from pathlib import Path

import orjson

from ballast.agent.cpumanager.state_checkpoint import set_aside, write_atomically
from ballast.agent.load.history import LoadHistory, MinuteSeries

__all__ = ["FORMAT", "HistoryCheckpoint", "decode_history", "encode_history"]

log = logging.getLogger("ballast.agent.load")

FORMAT = "ballast.io/load-history/v1"
_MAX_BYTES = 1024 * 1024


def encode_history(history: LoadHistory) -> bytes:
    series = {}
    for name, s in sorted(history.ratios.items()):
        last, means = s.to_minutes()
        # Five decimals is what the annotations carry; it keeps the file near 10 KiB per metric.
        series[name] = {
            "size": s.size,
            "lastMinute": last,
            "means": [None if v is None else round(v, 5) for v in means],
        }
    return orjson.dumps({"format": FORMAT, "series": series})


def decode_history(data: bytes) -> LoadHistory:
    """The history in ``data``; ``ValueError`` naming what is wrong when it is not a checkpoint."""
    try:
        doc = orjson.loads(data)
    except orjson.JSONDecodeError as e:
        raise ValueError(f"not JSON: {e}") from None
    if not isinstance(doc, dict) or doc.get("format") != FORMAT:
        raise ValueError(f"not a {FORMAT} document")
    raw = doc.get("series")
    if not isinstance(raw, dict) or set(raw) != {"cpu", "mem"}:
        raise ValueError("series must hold exactly cpu and mem")
    ratios: dict[str, MinuteSeries] = {}
    for name, entry in raw.items():
        if not isinstance(entry, dict):
            raise ValueError(f"series.{name} is not an object")
        size, last, means = entry.get("size"), entry.get("lastMinute"), entry.get("means")
        if not isinstance(size, int) or isinstance(size, bool) or not 0 < size <= 100_000:
            raise ValueError(f"series.{name}.size is not a positive integer")
        if last is not None and (not isinstance(last, int) or isinstance(last, bool)):
            raise ValueError(f"series.{name}.lastMinute is not an integer")
        if not isinstance(means, list) or len(means) > size:
            raise ValueError(f"series.{name}.means is not a list of at most {size} numbers")
        for v in means:
            ok = v is None or (isinstance(v, int | float) and not isinstance(v, bool) and math.isfinite(v))
            if not ok or (v is not None and not 0 <= v <= 1):
                raise ValueError(f"series.{name}.means holds {v!r}, not a ratio")
        ratios[name] = MinuteSeries.from_minutes(size, last, means)
    return LoadHistory(ratios)


class HistoryCheckpoint:
    """Load once at start (``load``), save after each report (``save``)."""

    def __init__(self, path: Path | str, clock: Callable[[], float] = time.time) -> None:
        self.path = Path(path)
        self._clock = clock
        self.rejected: str | None = None
        """Why the file found at start was set aside, else ``None``."""

    def load(self) -> LoadHistory:
        try:
            size = self.path.stat().st_size
        except FileNotFoundError:
            log.info("no load history at %s: starting with an empty one", self.path)
            return LoadHistory()
        except OSError as e:
            log.error("cannot read the load history %s (%s): starting with an empty one", self.path, e)
            return LoadHistory()
        try:
            if size > _MAX_BYTES:
                raise ValueError(f"file is {size} bytes, more than a load history can be")
            history = decode_history(self.path.read_bytes())
        except (ValueError, OSError) as e:
            self.rejected = str(e)
            moved = set_aside(self.path, self._clock())
            log.error(
                "load history %s rejected (%s); kept as %s, starting with an empty one",
                self.path,
                e,
                moved or "(could not be moved)",
            )
            return LoadHistory()
        log.info("restored the load history from %s", self.path)
        return history

    def save(self, history: LoadHistory) -> None:
        """Raises ``OSError`` when the file cannot be written (the caller counts it and tries again)."""
        self.path.parent.mkdir(parents=True, exist_ok=True)
        write_atomically(self.path, encode_history(history))
