"""_http.py — one JSON request to once over urllib, answered as (status, headers, body).

Standard library only. Proxies from the environment are not used (the bearer
token goes to once and nowhere else) and redirects are not followed: once
answers none on the routes this client calls.
"""
import http.client
import json
import socket
import urllib.error
import urllib.request

from .errors import TransportError

__all__ = ["call"]


class _NoRedirect(urllib.request.HTTPRedirectHandler):
    def redirect_request(self, req, fp, code, msg, headers, newurl):
        return None


_OPENER = urllib.request.build_opener(urllib.request.ProxyHandler({}), _NoRedirect())

USER_AGENT = "once-client-python/0.1"


def _parse(raw):
    if not raw:
        return None
    try:
        return json.loads(raw.decode("utf-8"))
    except (UnicodeDecodeError, ValueError):
        return None


def call(method, url, token=None, body=None, headers=None, timeout=30.0):
    """Sends one request; returns (status, {lower-case name: value}, parsed JSON or None).

    Any answer, 4xx and 5xx included, is returned (the caller types it); only
    no answer at all raises TransportError."""
    data = None
    h = {"Accept": "application/json", "User-Agent": USER_AGENT}
    if body is not None:
        data = json.dumps(body, separators=(",", ":"), allow_nan=False).encode("utf-8")
        h["Content-Type"] = "application/json"
    if token:
        h["Authorization"] = f"Bearer {token}"
    if headers:
        h.update(headers)
    req = urllib.request.Request(url, data=data, headers=h, method=method)
    try:
        with _OPENER.open(req, timeout=timeout) as resp:
            raw = resp.read()
            status = resp.status
            got = {k.lower(): v for k, v in resp.headers.items()}
    except urllib.error.HTTPError as e:
        try:
            raw = e.read()
        except (OSError, http.client.HTTPException):
            raw = b""
        status = e.code
        got = {k.lower(): v for k, v in (e.headers or {}).items()}
        e.close()
    except (urllib.error.URLError, OSError, socket.timeout, http.client.HTTPException) as e:
        reason = getattr(e, "reason", e)
        raise TransportError(f"{method} {url}: no answer from once ({reason})") from e
    return status, got, _parse(raw)
