"""The load history's checkpoint: the day of per-minute CPU and memory ratios (and the pressure shares the
policy had the agent measure), each minute's mean and its sample count, and the recent samples, so a
restart keeps the 1-day maximum crane's ``*_max_avg_1d`` needs and the 5-minute mean as it was.

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
from ballast.agent.load.history import (
    PRESSURE_SERIES,
    RECENT_MINUTES,
    LoadHistory,
    MinuteSeries,
    RecentSamples,
)

__all__ = ["FORMAT", "HistoryCheckpoint", "decode_history", "encode_history"]

log = logging.getLogger("ballast.agent.load")

FORMAT = "ballast.io/load-history/v2"
FIRST_FORMAT = "ballast.io/load-history/v1"
"""Minute means only (each restored as one sample), no recent samples: still read."""
_MAX_BYTES = 1024 * 1024


def encode_history(history: LoadHistory) -> bytes:
    series = {}
    for name, s in sorted(history.ratios.items()):
        last, means, counts = s.to_minutes()
        # Five decimals is what the annotations carry; it keeps the file near 15 KiB per metric.
        series[name] = {
            "size": s.size,
            "lastMinute": last,
            "means": [None if v is None else round(v, 5) for v in means],
            "counts": counts,
        }
    recent = {
        name: [[round(when, 3), round(value, 5)] for when, value in r.samples()]
        for name, r in sorted(history.recent.items())
    }
    return orjson.dumps({"format": FORMAT, "series": series, "recent": recent})


def decode_history(data: bytes) -> LoadHistory:
    """The history in ``data``; ``ValueError`` naming what is wrong when it is not a checkpoint."""
    try:
        doc = orjson.loads(data)
    except orjson.JSONDecodeError as e:
        raise ValueError(f"not JSON: {e}") from None
    if not isinstance(doc, dict) or doc.get("format") not in (FORMAT, FIRST_FORMAT):
        raise ValueError(f"not a {FORMAT} document")
    first = doc["format"] == FIRST_FORMAT
    raw = doc.get("series")
    if not isinstance(raw, dict) or not {"cpu", "mem"} <= set(raw) <= {"cpu", "mem", *PRESSURE_SERIES}:
        raise ValueError(f"series must hold cpu and mem, and nothing but {', '.join(PRESSURE_SERIES)} beside")
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
            if v is not None and not _is_ratio(v):
                raise ValueError(f"series.{name}.means holds {v!r}, not a ratio")
        counts = None
        if not first:
            counts = entry.get("counts")
            if not isinstance(counts, list) or len(counts) != len(means):
                raise ValueError(f"series.{name}.counts is not a list as long as its means")
            if not all(isinstance(c, int) and not isinstance(c, bool) and 0 <= c <= 100_000 for c in counts):
                raise ValueError(f"series.{name}.counts holds something other than sample counts")
        ratios[name] = MinuteSeries.from_minutes(size, last, means, counts)
    recent = {name: RecentSamples(RECENT_MINUTES * 60.0) for name in ratios}
    raw_recent = {} if first else doc.get("recent")
    if not isinstance(raw_recent, dict):
        raise ValueError("recent is not an object")
    for name, samples in raw_recent.items():
        if name not in recent or not isinstance(samples, list):
            raise ValueError(f"recent.{name} is not a list of samples of a known series")
        for sample in samples:
            if not (isinstance(sample, list) and len(sample) == 2):
                raise ValueError(f"recent.{name} holds {sample!r}, not [time, ratio]")
            when, value = sample
            if not (_is_number(when) and _is_ratio(value)):
                raise ValueError(f"recent.{name} holds {sample!r}, not [time, ratio]")
            recent[name].add(float(when), float(value))
    return LoadHistory(ratios, recent)


def _is_number(v: object) -> bool:
    return isinstance(v, int | float) and not isinstance(v, bool) and math.isfinite(v)


def _is_ratio(v: object) -> bool:
    return _is_number(v) and 0 <= v <= 1  # type: ignore[operator]


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
