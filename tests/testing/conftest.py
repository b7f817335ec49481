"""The image built here from Debian 12 packages (``ballast.testing.agent_image``), once per test session:
from the user's cache when it is up to date, else built (90 to 120 s cold, 30 to 75 s when only Ballast's
sources changed)."""

from __future__ import annotations

import pytest

from ballast.testing import agent_image
from ballast.testing.parts import missing_part


@pytest.fixture(scope="session")
def built_image() -> agent_image.BuiltImage:
    reason = agent_image.prerequisites()
    if reason:
        missing_part(f"the agent image cannot be built here: {reason}")
    try:
        return agent_image.build()
    except agent_image.ImageUnavailable as e:
        missing_part(f"the agent image could not be built: {e}")
