"""Ballast's node agent: topology discovery, NRT publishing, exclusive CPU pinning."""

from importlib.metadata import PackageNotFoundError, version

try:
    __version__ = version("ballast")
except PackageNotFoundError:  # running from a source tree without an install
    __version__ = "0.0.0+source"
