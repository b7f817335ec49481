"""CPU state: the kubelet checkpoint format (checked against real files), atomic saves, recovery."""

from __future__ import annotations

import os
import stat
from pathlib import Path

import pytest

from ballast.agent.cpumanager import state_checkpoint as state_mod
from ballast.agent.cpumanager.state import MemoryState
from ballast.agent.cpumanager.state_checkpoint import (
    CheckpointError,
    CheckpointState,
    StateWriteError,
    checkpoint_checksum,
    decode_checkpoint,
    encode_checkpoint,
)
from ballast.agent.cpuset import CPUSet

# cpu_manager_state files written by real kubelets, copied from public docs, issues and tests
# (protocol.md section 4.4). Each must hash to its own checksum and be reproduced byte for byte.
REAL_KUBELET_FILES = [
    '{"policyName":"static","defaultCpuSet":"0,10-15,25-31","entries":{"777870b5-c64f-42f5-9296-688b9dc212ba":'
    '{"container-1":"16-24"},"fb15e10a-b6a5-4aaa-8fcd-76c1aa64e6fd":{"container-1":"1-9"}},"checksum":318470969}',
    '{"policyName":"static","defaultCpuSet":"0-1","checksum":1636926438}',
    '{"policyName":"none","defaultCpuSet":"","checksum":1353318690}',
    '{"policyName":"static","defaultCpuSet":"0-1,6-13,18-23","entries":{"28c11c89-3493-4972-bb67-7090b9d75e0d":'
    '{"mytestclient":"2-3,14-15","mytestclient2":"4-5,16-17"}},"checksum":1684933537}',
    '{"policyName":"static","defaultCpuSet":"0,2-95,97-191","entries":{"823ca0b5-ed9e-421a-bfca-76fa078f3195":'
    '{"ubuntu-netutils":"96"},"b8292fdc-57b1-4bc4-937b-34cd3dd1bcb8":{"ubuntu-netutils":"1"}},"checksum":4076905443}',
    '{"policyName":"static","defaultCpuSet":"0-63","checksum":1058907510}',
    '{"policyName":"static","defaultCpuSet":"2-15,17-31,34-47,49-63","checksum":4141502832}',
    '{"policyName":"static","defaultCpuSet":"0,4-27","entries":{"39b37746-7f5e-4064-b8e1-eebd2bfaa003":'
    '{"app":"1-3"}},"checksum":3300516549}',
]


@pytest.mark.parametrize("text", REAL_KUBELET_FILES)
def test_checksum_and_encoding_match_real_kubelet_files(text: str) -> None:
    import json

    doc = json.loads(text)
    assert (
        checkpoint_checksum(doc["policyName"], doc["defaultCpuSet"], doc.get("entries", {}))
        == doc["checksum"]
    )
    policy, default, assignments = decode_checkpoint(text.encode())
    assert encode_checkpoint(policy, default, assignments) == text.encode()


def test_checksum_of_v1_none_differs_from_v2() -> None:
    # Sanity: the hash covers the content; a different default set gives a different checksum.
    assert checkpoint_checksum("static", "0-1", {}) == 1636926438
    assert checkpoint_checksum("static", "0-2", {}) != 1636926438


@pytest.mark.parametrize(
    ("data", "message"),
    [
        (b"", "not JSON"),
        (b'{"policyName":"static","defaultCpuSet":"0-1","chec', "not JSON"),
        (b"[]", "expected a JSON object"),
        (b'{"policyName":"static","defaultCpuSet":"0-1","checksum":1}', "checksum mismatch"),
        (b'{"policyName":"static","defaultCpuSet":"0-1"}', "checksum missing"),
        (b'{"policyName":"static","defaultCpuSet":"0-1","entries":{"abc":"0"},"checksum":1}', "v2 format"),
        (b'{"policyName":7,"defaultCpuSet":"0-1","checksum":1}', "must be strings"),
    ],
)
def test_decode_rejects(data: bytes, message: str) -> None:
    with pytest.raises(CheckpointError, match=message):
        decode_checkpoint(data)


def test_decode_rejects_bad_cpuset_with_valid_checksum() -> None:
    checksum = checkpoint_checksum("static", "0-x", {})
    data = f'{{"policyName":"static","defaultCpuSet":"0-x","checksum":{checksum}}}'.encode()
    with pytest.raises(CheckpointError, match="0-x"):
        decode_checkpoint(data)


# --- in memory ----------------------------------------------------------------------------------------


def test_memory_state_reader_and_writers() -> None:
    s = MemoryState(CPUSet.parse("0-7"))
    s.set_cpuset("pod1", "a", CPUSet.of(2, 3))
    s.set_cpuset("pod1", "b", CPUSet.of(4))
    assert s.get_cpuset("pod1", "a") == CPUSet.of(2, 3)
    assert s.get_cpuset("pod1", "zzz") is None
    assert s.pod_cpus("pod1") == CPUSet.of(2, 3, 4)
    snapshot = s.get_assignments()
    with pytest.raises(TypeError):
        snapshot["pod1"]["a"] = CPUSet()  # type: ignore[index]
    s.delete("pod1", "a")
    assert s.has_pod("pod1")
    s.delete("pod1", "b")
    assert not s.has_pod("pod1")
    assert "pod1" in snapshot, "a snapshot does not change with the state"
    s.clear()
    assert s.get_default_cpuset() == CPUSet() and not s.get_assignments()


# --- checkpoint ---------------------------------------------------------------------------------------


def test_checkpoint_round_trip(tmp_path: Path) -> None:
    path = tmp_path / "ballast" / "cpu_manager_state"
    s = CheckpointState(path)
    assert s.fresh and s.recovery is None
    with s.batch():
        s.set_default_cpuset(CPUSet.parse("0-1,4-7"))
        s.set_cpuset("uid-1", "app", CPUSet.of(2, 3))
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert [p.name for p in path.parent.iterdir()] == ["cpu_manager_state"], "no temp files left behind"
    again = CheckpointState(path)
    assert not again.fresh and again.recovery is None
    assert again.get_default_cpuset() == CPUSet.parse("0-1,4-7")
    assert dict(again.get_assignments()["uid-1"]) == {"app": CPUSet.of(2, 3)}
    assert path.read_bytes() == encode_checkpoint(
        "static", CPUSet.parse("0-1,4-7"), {"uid-1": {"app": CPUSet.of(2, 3)}}
    )


def test_batch_writes_once(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    s = CheckpointState(tmp_path / "state")
    writes: list[bytes] = []
    real = state_mod.write_atomically
    monkeypatch.setattr(state_mod, "write_atomically", lambda p, d, *a: (writes.append(d), real(p, d, *a)))
    with s.batch():
        s.set_default_cpuset(CPUSet.parse("0-3"))
        with s.batch():
            s.set_cpuset("u", "a", CPUSet.of(4))
        s.set_cpuset("u", "b", CPUSet.of(5))
        assert writes == []
    assert len(writes) == 1
    s.delete("u", "a")
    assert len(writes) == 2


def test_write_failure_keeps_memory_and_retries(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    s = CheckpointState(tmp_path / "state")
    real = state_mod.write_atomically

    def broken(path: Path, data: bytes, *args: object) -> None:
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(state_mod, "write_atomically", broken)
    with pytest.raises(StateWriteError, match="No space left"):
        s.set_default_cpuset(CPUSet.parse("0-3"))
    assert s.dirty and s.get_default_cpuset() == CPUSet.parse("0-3")
    monkeypatch.setattr(state_mod, "write_atomically", real)
    s.flush()
    assert not s.dirty
    assert CheckpointState(tmp_path / "state").get_default_cpuset() == CPUSet.parse("0-3")


@pytest.mark.parametrize(
    ("content", "kind"),
    [
        (
            b'{"policyName":"static","defaultCpuSet":"0-3","entries":{"u":{"a":"4-5"}},"checks',
            "corrupt",
        ),  # torn
        (b"\x00\x00\x00\x00", "corrupt"),
        (b'{"policyName":"static","defaultCpuSet":"0-3","checksum":12345}', "corrupt"),
        (b'{"policyName":"none","defaultCpuSet":"","checksum":1353318690}', "policy"),
    ],
)
def test_untrusted_file_is_moved_aside(tmp_path: Path, content: bytes, kind: str) -> None:
    path = tmp_path / "cpu_manager_state"
    path.write_bytes(content)
    s = CheckpointState(path, clock=lambda: 1_800_000_000.0)
    assert s.fresh
    assert s.recovery is not None and s.recovery.kind == kind
    aside = tmp_path / "cpu_manager_state.corrupt-20270115T080000Z"
    assert s.recovery.moved_to == aside
    assert aside.read_bytes() == content, "the old file is kept as it was"
    assert not path.exists()
    assert s.get_default_cpuset() == CPUSet() and not s.get_assignments()


def test_failed_validation_is_moved_aside_and_suffix_is_unique(tmp_path: Path) -> None:
    path = tmp_path / "cpu_manager_state"
    good = encode_checkpoint("static", CPUSet.parse("0-3"), {})

    def validate(reader: object) -> None:
        raise ValueError("union does not match")

    for _ in range(2):
        path.write_bytes(good)
        s = CheckpointState(path, validate=validate, clock=lambda: 0.0)
        assert s.recovery is not None and s.recovery.kind == "invalid"
        assert "union does not match" in s.recovery.reason
    names = sorted(p.name for p in tmp_path.iterdir())
    assert names == [
        "cpu_manager_state.corrupt-19700101T000000Z",
        "cpu_manager_state.corrupt-19700101T000000Z-1",
    ]


def test_validate_sees_the_loaded_state(tmp_path: Path) -> None:
    path = tmp_path / "s"
    path.write_bytes(encode_checkpoint("static", CPUSet.parse("0-3"), {"u": {"a": CPUSet.of(4)}}))
    seen = []
    s = CheckpointState(
        path, validate=lambda r: seen.append((r.get_default_cpuset(), r.get_cpuset("u", "a")))
    )
    assert seen == [(CPUSet.parse("0-3"), CPUSet.of(4))]
    assert not s.fresh


def test_atomic_write_never_exposes_partial_content(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = tmp_path / "s"
    s = CheckpointState(path)
    s.set_default_cpuset(CPUSet.parse("0-3"))
    before = path.read_bytes()
    real_replace = os.replace

    def crash(src: object, dst: object) -> None:
        raise OSError(5, "I/O error")

    monkeypatch.setattr(state_mod.os, "replace", crash)
    with pytest.raises(StateWriteError):
        s.set_default_cpuset(CPUSet.parse("0-7"))
    monkeypatch.setattr(state_mod.os, "replace", real_replace)
    assert path.read_bytes() == before
    assert [p.name for p in tmp_path.iterdir()] == ["s"], "the temp file is removed on failure"


def test_only_the_newest_rejected_checkpoints_are_kept(tmp_path: Path) -> None:
    path = tmp_path / "cpu_manager_state"
    for restart in range(6):  # a corrupt checkpoint at every one of six restarts
        path.write_bytes(b"not json")
        s = CheckpointState(path, clock=lambda restart=restart: 86400.0 * restart)
        assert s.recovery is not None and s.recovery.kind == "corrupt"
    aside = sorted(p.name for p in tmp_path.iterdir() if ".corrupt-" in p.name)
    assert aside == [
        "cpu_manager_state.corrupt-19700104T000000Z",
        "cpu_manager_state.corrupt-19700105T000000Z",
        "cpu_manager_state.corrupt-19700106T000000Z",
    ]
