"""once_client — exactly-once effects from Python agents, through once's actions API.

    from once_client import Once, intent_key, NotDone

    once = Once("http://127.0.0.1:7600", token)

    @once.effect(scope="mail", key=lambda ticket, text: intent_key(run_id, "reply", ticket, text))
    def reply(ticket, text):
        return mailer.send(ticket, text)      # runs once per intent, whatever the retries

Standard library only. See README.md beside this package.
"""
from ._async import AsyncAttempt, AsyncEffect, AsyncOnce
from ._client import Attempt, Effect, Once, Reservation, proxy_headers
from ._jcs import MAX_SAFE_INTEGER, canonical_json, intent_key
from .errors import (AwaitingApproval, BadRequest, Conflict, Denied, Forbidden, Held, InFlight,
                     InvalidTransition, LimitExceeded, NotAllowed, NotDone, NotFound, OnceError,
                     OutcomeUnknown, ScopeReserved, ServiceUnavailable, StaleToken, StoreUnavailable,
                     TransportError, Unauthorized)

__version__ = "0.1.0"

__all__ = [
    "Once", "AsyncOnce", "Effect", "AsyncEffect", "Attempt", "AsyncAttempt", "Reservation",
    "intent_key", "canonical_json", "proxy_headers", "outcome", "MAX_SAFE_INTEGER",
    "OnceError", "TransportError", "BadRequest", "Unauthorized", "Forbidden", "NotAllowed",
    "ScopeReserved", "Denied", "NotFound", "Conflict", "InFlight", "OutcomeUnknown", "Held",
    "StaleToken", "InvalidTransition", "LimitExceeded", "ServiceUnavailable", "StoreUnavailable",
    "AwaitingApproval", "NotDone",
]


def outcome(headers):
    """The Once-Outcome of a proxied answer (completed, replayed, released, unknown,
    in_flight, held, ...), from any mapping of headers; None when absent."""
    for name, value in dict(headers).items():
        if name.lower() == "once-outcome":
            return value
    return None
