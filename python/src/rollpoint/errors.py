"""Typed errors.

Every rollpoint service answers a failed request with one shape,
``{"error": {"code", "message", "field"?}}``, and the code fixes the HTTP
status. A trainer branches on the kind of failure (a busy coordinator is
retried, an unknown rollout is not), so each code gets its own class and
every instance keeps the server's code, message and field as sent.
"""

from __future__ import annotations

import json


class RollpointError(Exception):
    """Base of every error this package raises."""


class TransportError(RollpointError):
    """The service could not be reached, or the connection broke mid-reply."""

    def __init__(self, message: str, *, url: str | None = None) -> None:
        super().__init__(f"{message} ({url})" if url else message)
        self.url = url


class ProtocolError(RollpointError):
    """A reply or a document that is not what the wire format says."""


class UnsupportedVersion(ProtocolError):
    """A document whose version ``v`` this package does not know."""

    def __init__(self, document: str, version: object, supported: tuple[int, ...] = (1,)) -> None:
        known = ", ".join(str(v) for v in supported)
        super().__init__(f"{document}: unknown version v={version!r} (this client reads v={known})")
        self.document = document
        self.version = version
        self.supported = supported


class TrajectoryNotTrainable(RollpointError):
    """``to_numpy`` on a trajectory the exporter marked not trainable."""

    def __init__(self, rollout: str, reason: str, call_id: str | None, message: str) -> None:
        at = f" at call {call_id}" if call_id else ""
        super().__init__(f"trajectory of {rollout} is not trainable ({reason}{at}): {message}")
        self.rollout = rollout
        self.reason = reason
        self.call_id = call_id


class ApiError(RollpointError):
    """An error reply: the HTTP status and the server's ``code``, ``message``, ``field``."""

    def __init__(
        self,
        status: int,
        code: str,
        message: str,
        field: str | None = None,
        *,
        method: str = "",
        path: str = "",
    ) -> None:
        where = f"{method} {path}: " if method else ""
        at = f" (field {field})" if field else ""
        super().__init__(f"{where}{status} {code}: {message}{at}")
        self.status = status
        self.code = code
        self.message = message
        self.field = field
        self.method = method
        self.path = path


class BadRequest(ApiError):
    """``bad_request`` (400): a malformed body, field or query parameter; ``field`` names it."""


class Unauthorized(ApiError):
    """``unauthorized`` (401): a missing or wrong bearer token."""


class NotFound(ApiError):
    """``not_found`` (404): no such rollout or checkpoint."""


class Conflict(ApiError):
    """``conflict`` (409): the id is taken, or the thing asked for is already done."""


class Busy(ApiError):
    """``busy`` (409): another checkpoint or restore is in progress; ask again later."""


class MethodNotAllowed(ApiError):
    """``method_not_allowed`` (405): the route does not take this method."""


class NotPrepared(ApiError):
    """``not_prepared`` (409): a stage did not reach the cut; nothing was published."""


class TooLarge(ApiError):
    """``too_large`` (413): the request body is over the service's limit."""


class Unprocessable(ApiError):
    """``unprocessable`` (422): well formed, but names what is not there; ``field`` names it."""


class Lost(ApiError):
    """``lost`` (500): the rollout's run ended without a result."""


class Failed(ApiError):
    """``failed`` (502): a participant or the drivers failed."""


_BY_CODE: dict[str, type[ApiError]] = {
    "bad_request": BadRequest,
    "unauthorized": Unauthorized,
    "not_found": NotFound,
    "method_not_allowed": MethodNotAllowed,
    "conflict": Conflict,
    "busy": Busy,
    "not_prepared": NotPrepared,
    "too_large": TooLarge,
    "unprocessable": Unprocessable,
    "lost": Lost,
    "failed": Failed,
}

# Used when a reply carries no error object (a proxy's page, say).
_CODE_OF_STATUS: dict[int, str] = {
    400: "bad_request",
    401: "unauthorized",
    404: "not_found",
    405: "method_not_allowed",
    409: "conflict",
    413: "too_large",
    422: "unprocessable",
    500: "lost",
    502: "failed",
}


def api_error(status: int, body: bytes, *, method: str = "", path: str = "") -> ApiError:
    """The typed error for an error reply, from its body when it has the error shape."""
    code: str | None = None
    message: str | None = None
    field: str | None = None
    try:
        doc = json.loads(body)
    except ValueError:
        doc = None
    err = doc.get("error") if isinstance(doc, dict) else None
    if isinstance(err, dict):
        if isinstance(err.get("code"), str):
            code = err["code"]
        if isinstance(err.get("message"), str):
            message = err["message"]
        if isinstance(err.get("field"), str):
            field = err["field"]
    if code is None:
        code = _CODE_OF_STATUS.get(status, f"http_{status}")
    if message is None:
        message = body[:500].decode("utf-8", "replace").strip() or "(no body)"
    cls = _BY_CODE.get(code, ApiError)
    return cls(status, code, message, field, method=method, path=path)
