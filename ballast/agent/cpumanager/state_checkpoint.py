"""The checkpointed CPU state: ``MemoryState`` plus persistence, not a second model (the kubelet's
``state_checkpoint.go``).

Every write (or every ``batch()``) is saved atomically: temp file, fsync, rename, fsync of the directory.

The file is the kubelet's ``cpu_manager_state`` v2 format, checksum included
(``{"policyName":"static","defaultCpuSet":"0-1","entries":{"<uid>":{"<container>":"2-3"}},"checksum":N}``),
so the usual tools and habits apply. It is Ballast's own file (default
``/var/lib/ballast/cpu_manager_state``): the agent never touches the kubelet's.

On load the file's checksum and policy name are checked, then a caller-supplied ``validate`` (the
policy's consistency rules). A file that fails any check is not trusted and not deleted: it is renamed to
``<name>.corrupt-<UTC timestamp>``, the event is logged and recorded in ``CheckpointState.recovery``,
and the state starts empty so the caller rebuilds it from the pods that are running.
"""

from __future__ import annotations

import contextlib
import logging
import os
import time
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

import orjson

from ballast.agent.cpumanager.state import POLICY_NAME, Assignments, MemoryState, StateReader
from ballast.agent.cpuset import CPUSet, CPUSetParseError

__all__ = [
    "DEFAULT_STATE_PATH",
    "CheckpointError",
    "CheckpointState",
    "Recovery",
    "StateWriteError",
    "checkpoint_checksum",
    "decode_checkpoint",
    "encode_checkpoint",
    "set_aside",
    "write_atomically",
]

log = logging.getLogger("ballast.agent.state")

DEFAULT_STATE_PATH = Path("/var/lib/ballast/cpu_manager_state")
_MAX_FILE_BYTES = 16 * 1024 * 1024


KEEP_SET_ASIDE = 3
"""Rejected checkpoints kept beside the live one (the newest)."""


def _mtime(path: Path) -> float:
    try:
        return path.stat().st_mtime
    except OSError:
        return 0.0


class CheckpointError(ValueError):
    """A checkpoint file that cannot be trusted; the message says why."""


class StateWriteError(OSError):
    """Saving the checkpoint failed; the in-memory state is kept and saved again on the next write."""


# --- the checkpoint format ----------------------------------------------------------------------------


def _fnv1a32(data: bytes) -> int:
    h = 0x811C9DC5
    for byte in data:
        h = ((h ^ byte) * 0x01000193) & 0xFFFFFFFF
    return h


def checkpoint_checksum(policy: str, default: str, entries: Mapping[str, Mapping[str, str]]) -> int:
    """The kubelet's checksum of a v2 checkpoint (``checksum.New``: fnv32a over go-spew's dump).

    The dumped text is ``(*state.CPUManagerCheckpoint){PolicyName:(string)<p> DefaultCPUSet:(string)<d>
    Entries:(map[string]map[string]string)map[<uid>:map[<ctr>:<set> ...] ...] Checksum:(checksum.Checksum)0}``
    with map keys sorted at both levels, strings unquoted.
    """
    inner = " ".join(
        f"{uid}:map[" + " ".join(f"{ctr}:{entries[uid][ctr]}" for ctr in sorted(entries[uid])) + "]"
        for uid in sorted(entries)
    )
    dump = (
        f"(*state.CPUManagerCheckpoint){{PolicyName:(string){policy} DefaultCPUSet:(string){default} "
        f"Entries:(map[string]map[string]string)map[{inner}] Checksum:(checksum.Checksum)0}}"
    )
    return _fnv1a32(dump.encode())


def encode_checkpoint(policy: str, default: CPUSet, assignments: Assignments) -> bytes:
    """The file content exactly as the kubelet writes it (Go ``json.Marshal``: struct field order, map
    keys sorted, ``entries`` omitted when empty, no whitespace)."""
    entries = {
        uid: {ctr: str(assignments[uid][ctr]) for ctr in sorted(assignments[uid])}
        for uid in sorted(assignments)
        if assignments[uid]
    }
    doc: dict[str, object] = {"policyName": policy, "defaultCpuSet": str(default)}
    if entries:
        doc["entries"] = entries
    doc["checksum"] = checkpoint_checksum(policy, str(default), entries)
    return orjson.dumps(doc)


def decode_checkpoint(data: bytes) -> tuple[str, CPUSet, dict[str, dict[str, CPUSet]]]:
    """``(policy name, default set, assignments)`` from a v2 file; ``CheckpointError`` when it is not one
    or its checksum does not match."""
    try:
        doc = orjson.loads(data)
    except orjson.JSONDecodeError as e:
        raise CheckpointError(f"not JSON: {e}") from None
    if not isinstance(doc, dict):
        raise CheckpointError(f"expected a JSON object, found {type(doc).__name__}")
    policy = doc.get("policyName")
    default_text = doc.get("defaultCpuSet")
    raw_entries = doc.get("entries") or {}
    checksum = doc.get("checksum")
    if not isinstance(policy, str) or not isinstance(default_text, str):
        raise CheckpointError("policyName and defaultCpuSet must be strings")
    if not isinstance(checksum, int) or isinstance(checksum, bool):
        raise CheckpointError("checksum missing or not an integer")
    if not isinstance(raw_entries, dict) or not all(
        isinstance(uid, str)
        and isinstance(ctrs, dict)
        and all(isinstance(c, str) and isinstance(s, str) for c, s in ctrs.items())
        for uid, ctrs in raw_entries.items()
    ):
        # The kubelet's v1 format had entries {containerID: cpuset}: it cannot be mapped to pods.
        raise CheckpointError("entries must map pod UID -> container name -> cpuset (v2 format)")
    expected = checkpoint_checksum(policy, default_text, raw_entries)
    if checksum != expected:
        raise CheckpointError(f"checksum mismatch: file says {checksum}, content hashes to {expected}")
    try:
        default = CPUSet.parse(default_text)
        assignments = {
            uid: {ctr: CPUSet.parse(text) for ctr, text in ctrs.items()}
            for uid, ctrs in raw_entries.items()
            if ctrs
        }
    except CPUSetParseError as e:
        raise CheckpointError(str(e)) from None
    return policy, default, assignments


# --- persistence --------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Recovery:
    """A checkpoint that was not trusted at start-up: why, and where the old file was moved."""

    kind: str
    """``unreadable``, ``corrupt`` (not JSON, bad checksum, bad cpuset), ``policy`` (another policy's
    file) or ``invalid`` (fails the policy's consistency rules): a label for metrics."""
    reason: str
    moved_to: Path | None


def _fsync_dir(directory: Path) -> None:
    fd = os.open(directory, os.O_RDONLY | getattr(os, "O_DIRECTORY", 0))
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def write_atomically(path: Path, data: bytes, mode: int = 0o600) -> None:
    """Replace ``path`` with ``data`` so a reader (or a crash) sees the old or the new file, never a mix."""
    directory = path.parent
    tmp = directory / f".{path.name}.tmp-{os.getpid()}"
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, mode)
    try:
        view = memoryview(data)
        while view:
            view = view[os.write(fd, view) :]
        os.fsync(fd)
    except BaseException:
        os.close(fd)
        with contextlib.suppress(OSError):
            tmp.unlink()
        raise
    os.close(fd)
    try:
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            tmp.unlink()
        raise
    _fsync_dir(directory)


def prune_set_aside(path: Path, keep: int = KEEP_SET_ASIDE) -> None:
    """Keep the newest ``keep`` rejected copies of ``path``: one per restart piled up otherwise (6 after
    6 restarts with a corrupt file), and the newest say what went wrong."""
    prefix = f"{path.name}.corrupt-"
    try:
        aside = [p for p in path.parent.iterdir() if p.name.startswith(prefix)]
    except OSError:
        return
    aside.sort(key=lambda p: (_mtime(p), p.name), reverse=True)
    for old in aside[keep:]:
        try:
            old.unlink()
        except OSError as e:
            log.warning("cannot remove the old rejected checkpoint %s: %s", old, e)


def set_aside(path: Path, now: float) -> Path | None:
    """Move a rejected checkpoint to ``<name>.corrupt-<UTC timestamp>`` (never deleted: it says what went
    wrong), prune the older copies; the new place, or ``None`` when it could not be moved."""
    stamp = datetime.fromtimestamp(now, tz=UTC).strftime("%Y%m%dT%H%M%SZ")
    target = path.with_name(f"{path.name}.corrupt-{stamp}")
    n = 1
    while target.exists():
        target = path.with_name(f"{path.name}.corrupt-{stamp}-{n}")
        n += 1
    moved: Path | None = target
    try:
        os.replace(path, target)
        _fsync_dir(path.parent)
    except OSError as e:
        log.error("cannot move the rejected checkpoint %s aside: %s", path, e)
        moved = None
    prune_set_aside(path)
    return moved


class CheckpointState(MemoryState):
    """``MemoryState`` saved to a kubelet-format checkpoint after every write (or every ``batch``).

    ``validate(reader)`` runs on a loaded state and raises ``ValueError`` (any subclass) to reject it;
    the policy supplies it (reserved CPUs in the default set, no overlaps, union equals all CPUs).
    After construction ``recovery`` says whether the file was rejected; ``fresh`` is true when the
    state started empty (no file, or a rejected one) and the caller must initialise and rebuild it.
    """

    def __init__(
        self,
        path: Path | str = DEFAULT_STATE_PATH,
        *,
        policy_name: str = POLICY_NAME,
        validate: Callable[[StateReader], None] | None = None,
        clock: Callable[[], float] = time.time,
    ) -> None:
        super().__init__()
        self.path = Path(path)
        self.policy_name = policy_name
        self.recovery: Recovery | None = None
        self.fresh = True
        self._clock = clock
        self._batch_depth = 0
        self._dirty = False
        self._restore(validate)

    # --- loading ------------------------------------------------------------------------------------

    def _restore(self, validate: Callable[[StateReader], None] | None) -> None:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        try:
            size = self.path.stat().st_size
        except FileNotFoundError:
            log.info("no CPU state checkpoint at %s: starting with an empty state", self.path)
            return
        kind = "unreadable"
        try:
            if size > _MAX_FILE_BYTES:
                raise CheckpointError(f"file is {size} bytes, more than a checkpoint can be")
            data = self.path.read_bytes()
            kind = "corrupt"
            policy, default, assignments = decode_checkpoint(data)
            if policy != self.policy_name:
                kind = "policy"
                raise CheckpointError(
                    f"policy {policy!r} in the checkpoint differs from the agent's {self.policy_name!r}"
                )
            candidate = MemoryState(default, assignments)
            if validate is not None:
                kind = "invalid"
                validate(candidate)
        except (ValueError, OSError) as e:
            self._set_aside(kind, str(e))
            return
        self._default = default
        self._replace(assignments)
        self.fresh = False
        log.info(
            "restored CPU state from %s: %d pod(s) with assignments, shared pool %s",
            self.path,
            len(assignments),
            default or "(empty)",
        )

    def _set_aside(self, kind: str, reason: str) -> None:
        moved = set_aside(self.path, self._clock())
        self.recovery = Recovery(kind, reason, moved)
        log.error(
            "CPU state checkpoint %s rejected (%s); kept as %s, rebuilding from the running pods",
            self.path,
            reason,
            moved or "(could not be moved)",
        )

    # --- saving -------------------------------------------------------------------------------------

    def _changed(self) -> None:
        if self._batch_depth:
            self._dirty = True
            return
        self.flush(force=True)

    @contextlib.contextmanager
    def batch(self) -> Iterator[None]:
        self._batch_depth += 1
        try:
            yield
        finally:
            self._batch_depth -= 1
            if not self._batch_depth and self._dirty:
                self.flush(force=True)

    @property
    def dirty(self) -> bool:
        """True when the last save failed (or a batch is open) and memory is ahead of the file."""
        return self._dirty

    def flush(self, force: bool = False) -> None:
        """Save now (when ``force``, or when an earlier save failed). Raises ``StateWriteError``."""
        if not (force or self._dirty):
            return
        data = encode_checkpoint(self.policy_name, self._default, self._assignments)
        try:
            write_atomically(self.path, data)
        except OSError as e:
            self._dirty = True
            raise StateWriteError(e.errno, f"cannot save CPU state checkpoint {self.path}: {e}") from e
        self._dirty = False
