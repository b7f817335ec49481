"""Ballast's node agent: topology discovery, NRT publishing, exclusive CPU pinning, load measurement."""
