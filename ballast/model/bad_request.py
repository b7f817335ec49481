"""The one error pure code raises for input it cannot use; a leaf module, so parsing a pod or a node never
imports the HTTP layer. ``ballast.extender.api`` turns it into a 400 with ``{"error", "field", "reason"}``."""

from __future__ import annotations


class BadRequest(ValueError):
    """A request Ballast cannot use; answered with HTTP 400 naming ``field`` and ``reason``."""

    def __init__(self, field: str, reason: str) -> None:
        self.field = field
        self.reason = reason
        super().__init__(f"{field}: {reason}")

    def to_json(self) -> dict[str, str]:
        return {"error": f"{self.field}: {self.reason}", "field": self.field, "reason": self.reason}
