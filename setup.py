"""Build hook only: all metadata is in pyproject.toml.

``build_py`` also generates the CRI gRPC stubs (``ballast/agent/cri/api_pb2.py``, ``api_pb2_grpc.py``) from
``ballast/agent/cri/api.proto``, and the NRI plugin's messages (``ballast/agent/nri/nri_pb2.py``) from
``ballast/agent/nri/nri.proto``, with ``grpc_tools.protoc`` into the build directory, so wheels ship them and
an
installed agent needs neither grpcio-tools nor write access anywhere. Editable installs skip this: there
the stubs are generated into a cache directory at first import (see ``ballast/agent/cri/_stubs.py``).
"""

from __future__ import annotations

import importlib.util
from pathlib import Path

from setuptools import setup
from setuptools.command.build_py import build_py

ROOT = Path(__file__).resolve().parent


def _stubs_module():
    # Loaded by path: importing the ``ballast`` package here would need its runtime dependencies.
    spec = importlib.util.spec_from_file_location(
        "_ballast_cri_stubs", ROOT / "ballast" / "agent" / "cri" / "_stubs.py"
    )
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


class BuildPyWithCRIStubs(build_py):
    def run(self) -> None:
        super().run()
        if getattr(self, "editable_mode", False):
            return
        stubs = _stubs_module()
        for proto, grpc in stubs.PROTOS:
            for path in stubs.generate(proto, ROOT, Path(self.build_lib), grpc=grpc):
                self.announce(f"generated {path}", level=2)


setup(cmdclass={"build_py": BuildPyWithCRIStubs})
