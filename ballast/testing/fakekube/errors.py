"""`metav1.Status` error bodies, built the way k8s.io/apimachinery/pkg/api/errors builds them.

Ballast code branches on `ApiException.status` and sometimes on `reason`/`message` (e.g. "already
assigned" on bind), so the fake must produce the same code, reason, message format and details as the
real API server. Each constructor here mirrors one Go constructor (NewNotFound, NewConflict, ...).
"""

from __future__ import annotations

from typing import Any

OPTIMISTIC_LOCK_MSG = (
    "the object has been modified; please apply your changes to the latest version and try again"
)

# Reason and message the API server uses when it has nothing better (NewGenericServerResponse).
_GENERIC: dict[int, tuple[str, str]] = {
    400: ("BadRequest", "the server rejected our request for an unknown reason"),
    401: ("Unauthorized", "the server has asked for the client to provide credentials"),
    403: ("Forbidden", "forbidden"),
    404: ("NotFound", "the server could not find the requested resource"),
    405: ("MethodNotAllowed", "the server does not allow this method on the requested resource"),
    406: ("NotAcceptable", "the server was unable to respond with a content type that the client supports"),
    409: ("Conflict", "the server reported a conflict"),
    410: ("Expired", "the requested resource is no longer available"),
    415: ("UnsupportedMediaType", "the body of the request was in an unknown format"),
    422: ("Invalid", "the server rejected our request due to an error in our request"),
    429: ("TooManyRequests", "the server has received too many requests and has asked us to try again later"),
    500: ("InternalError", "an error on the server has prevented the request from succeeding"),
    503: ("ServiceUnavailable", "the server is currently unable to handle the request"),
    504: (
        "Timeout",
        "the server was unable to return a response in the time allotted, "
        "but may still be processing the request",
    ),
}


def qualified(group: str, resource: str) -> str:
    """GroupResource.String(): `pods`, `leases.coordination.k8s.io`."""
    return f"{resource}.{group}" if group else resource


class StatusError(Exception):
    """A failed API call; `status()` is the JSON body the real server would send."""

    def __init__(
        self,
        code: int,
        reason: str,
        message: str,
        details: dict[str, Any] | None = None,
        metadata: dict[str, Any] | None = None,
    ) -> None:
        super().__init__(f"{code} {reason}: {message}")
        self.code = code
        self.reason = reason
        self.message = message
        self.details = details
        self.metadata = metadata or {}

    def status(self) -> dict[str, Any]:
        body: dict[str, Any] = {
            "kind": "Status",
            "apiVersion": "v1",
            "metadata": dict(self.metadata),
            "status": "Failure",
            "message": self.message,
        }
        if self.reason:
            body["reason"] = self.reason
        if self.details is not None:
            body["details"] = {k: v for k, v in self.details.items() if v not in ("", None)}
        body["code"] = self.code
        return body


def _details(group: str, resource: str, name: str, **extra: Any) -> dict[str, Any]:
    return {"name": name, "group": group, "kind": resource, **extra}


def not_found(group: str, resource: str, name: str) -> StatusError:
    return StatusError(
        404, "NotFound", f'{qualified(group, resource)} "{name}" not found', _details(group, resource, name)
    )


def already_exists(group: str, resource: str, name: str) -> StatusError:
    return StatusError(
        409,
        "AlreadyExists",
        f'{qualified(group, resource)} "{name}" already exists',
        _details(group, resource, name),
    )


def conflict(group: str, resource: str, name: str, cause: str = OPTIMISTIC_LOCK_MSG) -> StatusError:
    return StatusError(
        409,
        "Conflict",
        f'Operation cannot be fulfilled on {qualified(group, resource)} "{name}": {cause}',
        _details(group, resource, name),
    )


def storage_invalid_obj(key: str, msg: str) -> str:
    """storage.StorageError text for ErrCodeInvalidObj, as it appears inside precondition conflicts."""
    return f"StorageError: invalid object, Code: 4, Key: {key}, ResourceVersion: 0, AdditionalErrorMsg: {msg}"


def invalid(group: str, kind: str, name: str, causes: list[tuple[str, str, str]]) -> StatusError:
    """NewInvalid. `causes` are (reason, field, body) like ("FieldValueRequired", "metadata.name", "Required
    value")."""
    gk = f"{kind}.{group}" if group else kind
    texts = [f"{f}: {body}" for _, f, body in causes]
    joined = texts[0] if len(texts) == 1 else "[" + ", ".join(texts) + "]"
    message = f'{gk} "{name}" is invalid: {joined}' if texts else f'{gk} "{name}" is invalid'
    details = {
        "name": name,
        "group": group,
        "kind": kind,
        "causes": [{"reason": r, "message": body, "field": f} for r, f, body in causes],
    }
    return StatusError(422, "Invalid", message, details)


def bad_request(message: str) -> StatusError:
    return StatusError(400, "BadRequest", message)


def expired(message: str, metadata: dict[str, Any] | None = None) -> StatusError:
    return StatusError(410, "Expired", message, metadata=metadata)


def method_not_allowed() -> StatusError:
    return StatusError(405, "MethodNotAllowed", _GENERIC[405][1], {})


def path_not_found() -> StatusError:
    return StatusError(404, "NotFound", _GENERIC[404][1], {})


def unsupported_media_type(accepted: list[str]) -> StatusError:
    return StatusError(
        415,
        "UnsupportedMediaType",
        "the body of the request was in an unknown format - accepted media types include: "
        + ", ".join(accepted),
    )


def internal(message: str) -> StatusError:
    return StatusError(
        500, "InternalError", f"Internal error occurred: {message}", {"causes": [{"message": message}]}
    )


def too_large_rv(requested: int, current: int) -> StatusError:
    return StatusError(
        504,
        "Timeout",
        f"Timeout: Too large resource version: {requested}, current: {current}",
        {
            "causes": [{"reason": "ResourceVersionTooLarge", "message": "Too large resource version"}],
            "retryAfterSeconds": 1,
        },
    )


def generic(code: int, reason: str | None = None, message: str | None = None) -> StatusError:
    """An error for failure injection: unspecified reason/message default to the server's generic ones."""
    default_reason, default_message = _GENERIC.get(
        code, ("InternalError" if code >= 500 else "", f"code {code}")
    )
    return StatusError(code, default_reason if reason is None else reason, message or default_message, {})
