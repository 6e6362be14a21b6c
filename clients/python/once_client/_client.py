"""_client.py — the synchronous client: the actions API calls, and effect().

effect() is the glue every agent would otherwise write around the actions API:
reserve the intent's key (waiting while another attempt holds it), run the
effect while a thread renews the lease, then complete with its JSON result,
release on NotDone, or mark the action unknown on any other exception.
"""
import functools
import inspect
import json
import threading
import time
import urllib.parse

from . import _http
from ._jcs import intent_key
from .errors import (AwaitingApproval, Denied, InFlight, InvalidTransition, NotDone, OnceError,
                     OutcomeUnknown, ServiceUnavailable, TransportError, error_for)

__all__ = ["Once", "Effect", "Attempt", "Reservation", "proxy_headers"]

DEFAULT_LEASE = 10.0   # seconds; the server's default lease, sent explicitly so renewals need no clock
POLL_FIRST = 0.05      # first pause while a key is in flight, doubling up to POLL_MAX
POLL_MAX = 1.0
SETTLE_TRIES = 3       # complete/release/unknown are tried this often on no answer or a 503
ERROR_MAX = 1000       # characters of an exception kept as the action's error


def proxy_headers(key, wait=None):
    """Headers for a call through once's proxy: Idempotency-Key, and Prefer: wait=N
    (N whole seconds, at most 60) to wait for another attempt holding the key."""
    h = {"Idempotency-Key": key}
    if wait:
        h["Prefer"] = f"wait={max(1, min(60, int(wait)))}"
    return h


def _recorded(result):
    """result as it is recorded and replayed (its JSON round trip). TypeError
    when it has no JSON form."""
    try:
        return json.loads(json.dumps(result, allow_nan=False))
    except (TypeError, ValueError) as e:
        raise TypeError(f"the effect's result must be JSON-serialisable: {e}") from e


def _describe(exc):
    text = f"{type(exc).__name__}: {exc}" if str(exc) else type(exc).__name__
    return text[:ERROR_MAX]


def _add_note(exc, note):
    if hasattr(exc, "add_note"):
        exc.add_note(note)


class Reservation:
    """The answer to a reserve that lets the caller go on: either "reserved"
    (token, attempt, lease_expires_at) or "completed" (result, provider_id,
    fingerprint_mismatch: an earlier attempt's recorded outcome)."""

    def __init__(self, body):
        self.status = body.get("status")
        self.token = body.get("token")
        self.attempt = body.get("attempt")
        self.lease_expires_at = body.get("lease_expires_at")
        self.result = body.get("result")
        self.provider_id = body.get("provider_id")
        self.fingerprint_mismatch = bool(body.get("fingerprint_mismatch", False))
        self.key = body.get("key")

    def __repr__(self):
        return f"Reservation(status={self.status!r}, attempt={self.attempt!r})"


class Once:
    """A client of once's actions API.

    url: the gateway (http://127.0.0.1:7600); token: the bearer token (None
    when the gateway runs without tokens); lease: seconds a reservation lives
    without news, renewed every lease/3 while an effect runs; timeout: seconds
    for one HTTP request."""

    def __init__(self, url, token=None, *, lease=DEFAULT_LEASE, timeout=30.0):
        self.url = url.rstrip("/")
        self.token = token
        self.lease = float(lease)
        self.timeout = float(timeout)
        if self.lease <= 0:
            raise ValueError("lease must be positive")

    # ---- the HTTP calls ------------------------------------------------------

    def _call(self, method, path, body=None, what=None, headers=None, timeout=None):
        status, got, parsed = _http.call(method, self.url + path, self.token, body, headers,
                                         timeout if timeout is not None else self.timeout)
        if 200 <= status < 300 and status != 202:
            return status, got, parsed
        if status == 202:
            err = AwaitingApproval(f"{what or path}: the action waits for a decision", status=status,
                                   problem=parsed, headers=got)
            raise err
        raise error_for(status, parsed, got, what or f"{method} {path}")

    @staticmethod
    def _lease_ms(lease):
        return max(1, int(round(lease * 1000)))

    def reserve(self, scope, key, *, request=None, fingerprint=None, lease=None, wait=0):
        """POST /v1/actions. Returns a Reservation ("reserved" or "completed");
        raises InFlight (after waiting up to wait seconds for the other attempt),
        OutcomeUnknown/Held, Denied, AwaitingApproval, LimitExceeded, NotAllowed, ..."""
        deadline = time.monotonic() + max(0.0, float(wait or 0))
        pause = POLL_FIRST
        while True:
            try:
                return self._reserve_once(scope, key, request, fingerprint, lease, deadline)
            except InFlight as e:
                left = deadline - time.monotonic()
                if left <= 0:
                    self._attach_record(e, scope, key)
                    raise
                time.sleep(min(pause, left))
                pause = min(pause * 2, POLL_MAX)
            except (OutcomeUnknown, Denied, AwaitingApproval) as e:
                self._attach_record(e, scope, key)
                raise

    def _reserve_once(self, scope, key, request, fingerprint, lease, deadline):
        body = {"scope": scope, "key": key, "lease_ms": self._lease_ms(lease or self.lease)}
        if request is not None:
            body["request"] = request
        if fingerprint is not None:
            body["fingerprint"] = fingerprint
        headers = None
        left = deadline - time.monotonic()
        if left >= 1:
            # Read by gateways that wait on the actions API; others answer at once.
            headers = {"Prefer": f"wait={min(60, int(left))}"}
        _, _, parsed = self._call("POST", "/v1/actions", body, f"reserve {scope}/{key}", headers,
                                  self.timeout + (left if headers else 0))
        return Reservation(parsed or {})

    def _attach_record(self, err, scope, key):
        err.scope, err.key = scope, key
        try:
            err.record = self.get(scope, key)
        except OnceError:
            err.record = None

    def _settle(self, what, body):
        """complete/release/unknown: tried again on no answer or a 503 (never on a 4xx)."""
        for i in range(SETTLE_TRIES):
            try:
                return self._call("POST", f"/v1/actions/{what}", body,
                                  f"{what} {body['scope']}/{body['key']}")[2]
            except (TransportError, ServiceUnavailable):
                if i == SETTLE_TRIES - 1:
                    raise
                time.sleep(0.2 * (i + 1))
            except InvalidTransition:
                # An answer lost on the way, then this retry: the first call may have
                # settled the action already (a retry of complete/release/unknown).
                if i == 0:
                    raise
                record = self.get(body["scope"], body["key"])
                if record.get("state") in _SETTLED[what]:
                    return record
                raise

    def complete(self, scope, key, token, result, provider_id=None):
        """POST /v1/actions/complete: the action was performed; result (JSON) is recorded."""
        body = {"scope": scope, "key": key, "token": token, "result": result}
        if provider_id is not None:
            body["provider_id"] = provider_id
        return self._settle("complete", body)

    def release(self, scope, key, token, error=None):
        """POST /v1/actions/release: certainly not performed; the key is free."""
        body = {"scope": scope, "key": key, "token": token}
        if error is not None:
            body["error"] = error
        return self._settle("release", body)

    def unknown(self, scope, key, token, error=None):
        """POST /v1/actions/unknown: it may have been performed; a person settles it."""
        body = {"scope": scope, "key": key, "token": token}
        if error is not None:
            body["error"] = error
        return self._settle("unknown", body)

    def renew(self, scope, key, token, lease=None):
        """POST /v1/actions/renew: the work behind the reservation goes on."""
        body = {"scope": scope, "key": key, "token": token, "lease_ms": self._lease_ms(lease or self.lease)}
        return self._call("POST", "/v1/actions/renew", body, f"renew {scope}/{key}")[2]

    def get(self, scope, key):
        """GET /v1/actions/{scope}/{key}: the action's record."""
        path = "/v1/actions/" + urllib.parse.quote(scope, safe="") + "/" + urllib.parse.quote(key, safe="")
        return self._call("GET", path, None, f"get {scope}/{key}")[2]

    # ---- the proxy -------------------------------------------------------------

    def proxy_url(self, upstream, path=""):
        """The URL of upstream's path through once's proxy."""
        return f"{self.url}/v1/proxy/{upstream}{path}"

    def proxy_headers(self, key, wait=None):
        """proxy_headers(key, wait) plus this client's Authorization."""
        h = proxy_headers(key, wait)
        if self.token:
            h["Authorization"] = f"Bearer {self.token}"
        return h

    # ---- effect ------------------------------------------------------------------

    def effect(self, scope, key=None, *, wait=0, lease=None, request=None, fingerprint=None,
               provider_id=None):
        """An exactly-once effect in scope, keyed by key: a decorator or a context manager.

        key: a str, or (as a decorator) a callable given the function's arguments
        that returns the key, or None (as a decorator): intent_key of the
        function's qualified name, its positional and its keyword arguments.
        wait: seconds to wait while another attempt holds the key, then InFlight.
        request: JSON stored with the action for a person to read (or a callable
        given the arguments). provider_id: a callable given the result that returns
        the provider's id of the effect, recorded with it."""
        return Effect(self, scope, key, wait=wait, lease=lease, request=request, fingerprint=fingerprint,
                      provider_id=provider_id)


# The states an action is in after each settling call (unknown turns held).
_SETTLED = {"complete": ("completed",), "release": ("released",), "unknown": ("unknown", "held")}


class _Renewer:
    """A daemon thread renewing one reservation every lease/3 until stopped.
    A 4xx (the lease ran out, another attempt took the key) ends it, kept in
    error; no answer or a 503 is tried again at the next tick."""

    def __init__(self, client, scope, key, token, lease):
        self.client, self.scope, self.key, self.token, self.lease = client, scope, key, token, lease
        self.error = None
        self.renewals = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name=f"once-renew {scope}/{key}", daemon=True)
        self._thread.start()

    def _run(self):
        interval = self.lease / 3
        while not self._stop.wait(interval):
            try:
                self.client.renew(self.scope, self.key, self.token, self.lease)
                self.renewals += 1
            except (TransportError, ServiceUnavailable):
                continue
            except OnceError as e:
                self.error = e
                return

    def stop(self):
        self._stop.set()
        if self._thread is not threading.current_thread():
            self._thread.join(self.client.timeout + 1)


class Attempt:
    """One use of an effect: what the reservation answered, and how it ends.

    done: the outcome is recorded (replayed: by an earlier attempt; else by this
    one); result: the recorded result. While not done, the caller performs the
    effect and ends the attempt with complete(result), release() (certainly not
    done) or unknown()."""

    def __init__(self, client, scope, key, reservation, lease, provider_id=None):
        self.client, self.scope, self.key = client, scope, key
        self.reservation = reservation
        self.lease = lease
        self.replayed = reservation.status == "completed"
        self.done = self.replayed
        self.settled = self.replayed
        self.result = reservation.result if self.replayed else None
        self.provider_id = reservation.provider_id if self.replayed else None
        self.fingerprint_mismatch = reservation.fingerprint_mismatch
        self.token = reservation.token
        self.attempt = reservation.attempt
        self.record = None
        self._provider_id_of = provider_id
        self._lock = threading.Lock()
        self._renewer = None if self.replayed else _Renewer(client, scope, key, self.token, lease)

    @property
    def renew_error(self):
        """The error that stopped lease renewal (e.g. InvalidTransition: the lease
        ran out and the action is unknown), or None."""
        return self._renewer.error if self._renewer else None

    def _begin_settle(self, what):
        with self._lock:
            if self.settled:
                raise RuntimeError(f"{what}: this attempt on {self.scope}/{self.key} is already settled"
                                   + (" (an earlier attempt's result was replayed)" if self.replayed else ""))
            self.settled = True
        self._renewer.stop()

    def complete(self, result=None, provider_id=None):
        """Records result (JSON) as the outcome; returns it as recorded. A result
        with no JSON form (or a provider_id callable that fails) marks the action
        unknown instead, since the effect did run, and raises."""
        with self._lock:
            if self.settled:
                raise RuntimeError(f"complete: this attempt on {self.scope}/{self.key} is already settled"
                                   + (" (an earlier attempt's result was replayed)" if self.replayed else ""))
        try:
            recorded = _recorded(result)
            if provider_id is None and self._provider_id_of is not None:
                provider_id = self._provider_id_of(recorded)
            if provider_id is not None and not isinstance(provider_id, str):
                raise TypeError(f"provider_id must be a str, not {type(provider_id).__name__}")
        except Exception as e:
            self.fail(e)
            raise
        self._begin_settle("complete")
        self.record = self.client.complete(self.scope, self.key, self.token, recorded, provider_id)
        self.done, self.result, self.provider_id = True, recorded, provider_id
        return recorded

    def release(self, error=None):
        """The effect certainly did not happen: the key is free again."""
        self._begin_settle("release")
        self.record = self.client.release(self.scope, self.key, self.token, error)

    def unknown(self, error=None):
        """The effect may have happened: the action waits for a person."""
        self._begin_settle("unknown")
        self.record = self.client.unknown(self.scope, self.key, self.token, error)

    def fail(self, exc):
        """Settles the attempt for exc raised by the effect: NotDone releases, any
        other exception marks the action unknown. A failure to tell once is noted
        on exc, which the caller raises."""
        if self.settled:
            return
        try:
            if isinstance(exc, NotDone):
                self.release(error=_describe(exc))
            else:
                self.unknown(error=_describe(exc))
        except OnceError as e:
            _add_note(exc, f"once: could not record the outcome of {self.scope}/{self.key}: {e}")


def _derive(value, fn, args, kwargs):
    return value(*args, **kwargs) if callable(value) else value


def _default_key(fn, args, kwargs):
    try:
        return intent_key(f"{fn.__module__}.{fn.__qualname__}", list(args), kwargs)
    except TypeError as e:
        raise TypeError(f"{fn.__qualname__}: no key was given and the arguments have no JSON form "
                        f"to derive one from ({e}); pass key=") from e


class Effect:
    """What Once.effect returns: a decorator (each call of the function is one
    attempt) and a context manager (the with block is one attempt)."""

    def __init__(self, client, scope, key, *, wait=0, lease=None, request=None, fingerprint=None,
                 provider_id=None):
        self.client, self.scope, self.key = client, scope, key
        self.wait = wait
        self.lease = float(lease) if lease else client.lease
        self.request, self.fingerprint, self.provider_id = request, fingerprint, provider_id
        self._attempt = None

    def _key_for(self, fn, args, kwargs):
        if self.key is None:
            return _default_key(fn, args, kwargs)
        key = _derive(self.key, fn, args, kwargs)
        if not isinstance(key, str):
            raise TypeError(f"the key must be a str, not {type(key).__name__}")
        return key

    def begin(self, key, request=None):
        """Reserves key (waiting up to wait); returns the Attempt."""
        res = self.client.reserve(self.scope, key, request=request, fingerprint=self.fingerprint,
                                  lease=self.lease, wait=self.wait)
        return Attempt(self.client, self.scope, key, res, self.lease, self.provider_id)

    # ---- decorator

    def __call__(self, fn):
        if inspect.iscoroutinefunction(fn):
            raise TypeError(f"{fn.__qualname__} is a coroutine function: use AsyncOnce.effect")

        @functools.wraps(fn)
        def wrapper(*args, **kwargs):
            key = self._key_for(fn, args, kwargs)
            attempt = self.begin(key, _derive(self.request, fn, args, kwargs))
            if attempt.done:
                return attempt.result
            try:
                result = fn(*args, **kwargs)
            except BaseException as e:
                attempt.fail(e)
                raise
            return attempt.complete(result)

        wrapper.once_effect = self
        return wrapper

    # ---- context manager

    def __enter__(self):
        if self._attempt is not None:
            raise RuntimeError("this effect is already entered; call once.effect(...) for each with block")
        if not isinstance(self.key, str):
            raise TypeError("a with block needs key= as a str (intent_key(...) makes one)")
        self._attempt = self.begin(self.key, self.request() if callable(self.request) else self.request)
        return self._attempt

    def __exit__(self, et, ev, tb):
        attempt, self._attempt = self._attempt, None
        if attempt.settled:
            return False
        if ev is not None:
            attempt.fail(ev)
            return False
        attempt.complete(attempt.result)
        return False
