"""Where the loopback control plane's binaries come from (``python3 -m ballast.testing.controlplane check``):
no servers are started here, only the lookup is exercised."""

from __future__ import annotations

from pathlib import Path

import pytest

from ballast.testing import binaries, controlplane
from ballast.testing.binaries import BINARIES, MissingPiece, kube_bin_dir


def _fake_binaries(folder: Path) -> None:
    folder.mkdir(parents=True, exist_ok=True)
    for name in BINARIES:
        (folder / name).write_text("#!/bin/sh\n")
        (folder / name).chmod(0o755)


@pytest.fixture
def no_source(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """Neither BALLAST_KUBE_BIN nor ../shared/k8s; the cache is an empty folder of the test's own."""
    monkeypatch.delenv("BALLAST_KUBE_BIN", raising=False)
    monkeypatch.setattr(binaries, "SHARED_K8S", tmp_path / "no-shared")
    monkeypatch.setenv("BALLAST_KUBE_CACHE", str(tmp_path / "cache"))
    return tmp_path / "cache"


def test_binaries_unpacked_by_an_earlier_run_serve_without_a_source(no_source: Path) -> None:
    _fake_binaries(no_source)
    assert kube_bin_dir() == no_source
    assert controlplane.main(["unpack"]) == 0


def test_without_a_source_or_a_filled_cache_the_message_says_where_it_looked(
    no_source: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    no_source.mkdir()
    (no_source / "kubectl").write_text("")  # one of three is not enough
    with pytest.raises(MissingPiece, match=r"BALLAST_KUBE_BIN.*shared/k8s.*cache"):
        kube_bin_dir()
    assert controlplane.main(["check"]) == 1
    assert "error: no Kubernetes binaries" in capsys.readouterr().err


def test_an_explicit_folder_that_is_wrong_is_not_covered_up_by_the_cache(
    no_source: Path, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    _fake_binaries(no_source)
    monkeypatch.setenv("BALLAST_KUBE_BIN", str(tmp_path / "missing"))
    with pytest.raises(MissingPiece, match="is not a folder"):
        kube_bin_dir()


# --------------------------------------------------------------------------------------------------- helm


@pytest.fixture
def no_helm_source(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """Neither BALLAST_HELM_BIN nor ../shared/helm; the cache is an empty folder of the test's own."""
    from ballast.testing import helm

    monkeypatch.delenv("BALLAST_HELM_BIN", raising=False)
    monkeypatch.setattr(helm, "SHARED_HELM", tmp_path / "no-shared")
    monkeypatch.setenv("BALLAST_HELM_CACHE", str(tmp_path / "helm-cache"))
    return tmp_path / "helm-cache"


def test_without_helm_the_message_says_how_to_get_it(no_helm_source: Path) -> None:
    from ballast.testing import helm

    with pytest.raises(MissingPiece, match=r"no helm: Helm v4\.1\.4.*BALLAST_HELM_BIN.*shared/helm"):
        helm.helm_path()
    assert controlplane.main(["check"]) == 1  # what .ci/run calls: CI stops here, loudly


def test_helm_is_unpacked_into_the_cache_and_verified(
    no_helm_source: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """An .xz with a SHA256SUMS line: unpacked into the cache, not beside its source; a wrong sum refuses."""
    import hashlib
    import lzma

    from ballast.testing import helm

    src = tmp_path / "src"
    src.mkdir()
    binary = b"#!/bin/sh\necho helm\n"
    (src / "helm.xz").write_bytes(lzma.compress(binary))
    (src / "SHA256SUMS").write_text(f"{hashlib.sha256(binary).hexdigest()}  helm\n")
    monkeypatch.setenv("BALLAST_HELM_BIN", str(src))
    path = helm.helm_path()
    assert path == no_helm_source / "helm" and path.read_bytes() == binary
    assert not (src / "helm").exists()
    (no_helm_source / "helm").unlink()
    (src / "SHA256SUMS").write_text(f"{'0' * 64}  helm\n")
    with pytest.raises(MissingPiece, match="checksum mismatch"):
        helm.helm_path()


def test_helm_unpacked_by_an_earlier_run_serves_without_a_source(no_helm_source: Path) -> None:
    from ballast.testing import helm

    no_helm_source.mkdir()
    (no_helm_source / "helm").write_text("#!/bin/sh\n")
    (no_helm_source / "helm").chmod(0o755)
    assert helm.helm_path() == no_helm_source / "helm"
