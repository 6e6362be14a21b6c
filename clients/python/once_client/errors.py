"""errors.py — every answer of once that is not "go ahead" or "done", as a type.

Callers branch on the class (or on .code, the problem's stable code), never on
a message. Each error keeps the problem+json body once sent (.problem), its
HTTP status and, for the answers about one action, that action's record.
"""

__all__ = [
    "OnceError", "TransportError", "BadRequest", "Unauthorized", "Forbidden", "NotAllowed",
    "ScopeReserved", "Denied", "NotFound", "Conflict", "InFlight", "OutcomeUnknown", "Held",
    "StaleToken", "InvalidTransition", "LimitExceeded", "ServiceUnavailable", "StoreUnavailable",
    "AwaitingApproval", "NotDone",
]


class NotDone(Exception):
    """Raise it from an effect that certainly did nothing (the provider refused
    before acting, a validation failed): the key is released, so a later attempt
    runs the effect. Any other exception marks the action unknown instead.

    The client raises it again to the caller after the release."""


class OnceError(Exception):
    """An answer of once that is not a success. status: the HTTP status (None
    when nothing was answered); code: the problem's "code"; problem: the whole
    problem+json body (a dict, {} when there was none); detail: its "detail"."""

    def __init__(self, message, status=None, problem=None, headers=None):
        super().__init__(message)
        self.status = status
        self.problem = problem if isinstance(problem, dict) else {}
        self.code = self.problem.get("code")
        self.detail = self.problem.get("detail")
        self.headers = dict(headers or {})

    def __str__(self):
        base = super().__str__()
        if self.status is None:
            return base
        return f"{base} ({self.status} {self.code or ''})".replace(" )", ")")


class TransportError(OnceError):
    """once could not be reached, or its answer was cut or unreadable: whether
    the request took effect is not known."""


class BadRequest(OnceError):
    """400: the request was malformed (invalid_key, invalid_scope, invalid_request, ...)."""


class Unauthorized(OnceError):
    """401 unauthorized: no bearer token, or one once does not know."""


class Forbidden(OnceError):
    """403 that is not one of the subclasses below (forbidden: an operator-only route)."""


class NotAllowed(Forbidden):
    """403 not_allowed: the agent's grants do not cover this scope (docs/agents.md)."""


class ScopeReserved(Forbidden):
    """403 scope_reserved: the scope names an upstream of the gateway."""


class NotFound(OnceError):
    """404: no such action (or route)."""


class Conflict(OnceError):
    """409 that is not one of the subclasses below."""


class _ActionAnswer:
    """Mixin: the answer concerns one action; record is its full record (GET
    /v1/actions/{scope}/{key}) when it could be read, else None."""

    scope = None
    key = None
    record = None


class InFlight(Conflict, _ActionAnswer):
    """409 key_in_flight: another attempt holds the key, and it did not settle
    within the wait. lease_expires_at: when that attempt's lease runs out."""

    @property
    def lease_expires_at(self):
        return self.problem.get("lease_expires_at")


class OutcomeUnknown(Conflict, _ActionAnswer):
    """409 outcome_unknown: an earlier attempt may have performed the action; it
    is not run again until a person (or a provider lookup) settles it.
    state: "unknown" or "held"; reason: why."""

    @property
    def state(self):
        return self.problem.get("state")

    @property
    def reason(self):
        return self.problem.get("reason")


class Held(OutcomeUnknown):
    """409 outcome_unknown with state "held": waiting for a person (`once resolve`)."""


class StaleToken(Conflict):
    """409 stale_token: the token is not the current attempt's; nothing changed."""


class InvalidTransition(Conflict):
    """409 invalid_transition: the action is not in a state that allows this
    (e.g. a renew after the lease ran out and the action became unknown)."""


class Denied(Forbidden, _ActionAnswer):
    """403 denied: the action waited for approval and was denied (note says why)."""

    @property
    def note(self):
        return self.problem.get("note")


class AwaitingApproval(OnceError, _ActionAnswer):
    """202: the action waits for a person's decision (waits_for in the record:
    "approval" or "limit"). Nothing ran; try again once it is decided."""


class LimitExceeded(OnceError):
    """429 limit_exceeded: past one of the agent's limits. retry_after: seconds
    until room comes back (an int), or None when the request alone exceeds the limit."""

    @property
    def retry_after(self):
        value = self.headers.get("retry-after")
        try:
            return int(value) if value is not None else None
        except ValueError:
            return None


class ServiceUnavailable(OnceError):
    """503 that is not store_unavailable."""


class StoreUnavailable(ServiceUnavailable):
    """503 store_unavailable: the store could not record; nothing changed."""


_BY_CODE = {
    "unauthorized": Unauthorized,
    "not_allowed": NotAllowed,
    "scope_reserved": ScopeReserved,
    "denied": Denied,
    "key_in_flight": InFlight,
    "stale_token": StaleToken,
    "invalid_transition": InvalidTransition,
    "limit_exceeded": LimitExceeded,
    "store_unavailable": StoreUnavailable,
}

_BY_STATUS = {
    400: BadRequest,
    401: Unauthorized,
    403: Forbidden,
    404: NotFound,
    409: Conflict,
    429: LimitExceeded,
    503: ServiceUnavailable,
}


def error_for(status, problem, headers, what):
    """The typed error of an answer (status, parsed body, lower-cased headers)."""
    problem = problem if isinstance(problem, dict) else {}
    code = problem.get("code")
    if code == "outcome_unknown":
        cls = Held if problem.get("state") == "held" else OutcomeUnknown
    else:
        cls = _BY_CODE.get(code) or _BY_STATUS.get(status) or OnceError
    detail = problem.get("detail") or problem.get("title") or "no detail"
    return cls(f"{what}: {detail}", status=status, problem=problem, headers=headers)
