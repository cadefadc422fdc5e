"""What the service answers when it cannot answer: each error with the HTTP status and the code of
the API's error envelope. The app maps every one of them in one handler (an envelope under
``/api/``, the error page elsewhere), the CLI in one place (its message, exit status 2); the
service and its queries raise them, and nothing else turns them into answers."""
from __future__ import annotations

from contextlib import contextmanager


class ServiceError(Exception):
    """An answer the service cannot give; ``str(e)`` is its message, shown as it is."""
    status = 500
    code = "internal_error"


class NotFound(ServiceError, LookupError):
    """No such incident, share link or thing in an incident."""
    status = 404
    code = "not_found"


class BadRequest(ServiceError, ValueError):
    """A request the service cannot read (a time that is no time, an unknown format, ...)."""
    status = 400
    code = "bad_request"


class NotReady(ServiceError):
    """The incident exists but has nothing to show yet, or any more: it is queued, being analysed
    or its analysis failed (then its status and reason are all it serves)."""
    status = 409
    code = "not_analysed"

    @classmethod
    def of(cls, iid: str, status: str, error: str | None) -> "NotReady":
        """Why incident ``iid`` has nothing to show: its status, and the reason its analysis failed."""
        if status == "failed":
            return cls(f"the analysis of incident {iid} failed: {error or 'no reason was recorded'}")
        if status == "running":
            return cls(f"incident {iid} is being analysed: nothing to show yet")
        return cls(f"incident {iid} is {status}: nothing to show yet")


@contextmanager
def read_as(what: str):
    """Within this block a ``ValueError`` or ``OverflowError`` (a parser of the request's text refusing it) is the
    request's fault: a :class:`BadRequest` naming ``what`` was being read."""
    try:
        yield
    except ServiceError:
        raise
    except (ValueError, OverflowError) as e:
        raise BadRequest(f"{what}: {e}") from None
