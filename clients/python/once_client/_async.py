"""_async.py — the asyncio client: the same calls and effect(), awaited.

The HTTP calls run in asyncio.to_thread (the standard library has no async
HTTP client); the lease is renewed by the same daemon thread as in the
synchronous client, so an event loop held up by the effect's own code cannot
let the lease lapse.
"""
import asyncio
import functools
import inspect
import threading
import time

from ._client import POLL_FIRST, POLL_MAX, Attempt, Effect, Once, _derive, _recorded
from .errors import AwaitingApproval, Denied, InFlight, OnceError, OutcomeUnknown

__all__ = ["AsyncOnce", "AsyncEffect"]


class _Orphans:
    """A reserve whose caller is cancelled while it is on the way: when it
    answers, the reservation nobody will use is released (nothing ran) instead
    of lapsing into unknown. Whichever of the thread and the cancelled caller
    comes second does it, decided under a lock."""

    def __init__(self, client, scope, key):
        self.client, self.scope, self.key = client, scope, key
        self.lock = threading.Lock()
        self.cancelled = False
        self.answer = None

    def reserve(self, *args):
        res = self.client._reserve_once(self.scope, self.key, *args)
        with self.lock:
            self.answer = res
            orphan = self.cancelled
        if orphan:
            self._release(res)
        return res

    def cancel(self):
        with self.lock:
            self.cancelled = True
            res = self.answer
        if res is not None:
            # Not a daemon: an interpreter about to exit still lets the release out.
            threading.Thread(target=self._release, args=(res,)).start()

    def _release(self, res):
        if res.status != "reserved":
            return
        try:
            self.client.release(self.scope, self.key, res.token,
                                error="the caller was cancelled before the effect began")
        except OnceError:
            pass


async def _shielded(fn, *args):
    """fn(*args) in a thread; a cancellation of the caller lets it finish."""
    return await asyncio.shield(asyncio.ensure_future(asyncio.to_thread(fn, *args)))


class AsyncOnce:
    """The asyncio twin of Once (same arguments); .sync is the Once it uses."""

    def __init__(self, url, token=None, **kw):
        self.sync = Once(url, token, **kw)

    @property
    def url(self):
        return self.sync.url

    async def reserve(self, scope, key, *, request=None, fingerprint=None, lease=None, wait=0):
        """As Once.reserve; the waits are asyncio.sleep."""
        c = self.sync
        deadline = time.monotonic() + max(0.0, float(wait or 0))
        pause = POLL_FIRST
        while True:
            orphans = _Orphans(c, scope, key)
            fut = asyncio.ensure_future(
                asyncio.to_thread(orphans.reserve, request, fingerprint, lease, deadline))
            try:
                return await asyncio.shield(fut)
            except asyncio.CancelledError:
                orphans.cancel()
                raise
            except InFlight as e:
                left = deadline - time.monotonic()
                if left <= 0:
                    await asyncio.to_thread(c._attach_record, e, scope, key)
                    raise
                await asyncio.sleep(min(pause, left))
                pause = min(pause * 2, POLL_MAX)
            except (OutcomeUnknown, Denied, AwaitingApproval) as e:
                await asyncio.to_thread(c._attach_record, e, scope, key)
                raise

    async def complete(self, scope, key, token, result, provider_id=None):
        return await _shielded(self.sync.complete, scope, key, token, result, provider_id)

    async def release(self, scope, key, token, error=None):
        return await _shielded(self.sync.release, scope, key, token, error)

    async def unknown(self, scope, key, token, error=None):
        return await _shielded(self.sync.unknown, scope, key, token, error)

    async def renew(self, scope, key, token, lease=None):
        return await asyncio.to_thread(self.sync.renew, scope, key, token, lease)

    async def get(self, scope, key):
        return await asyncio.to_thread(self.sync.get, scope, key)

    def proxy_url(self, upstream, path=""):
        return self.sync.proxy_url(upstream, path)

    def proxy_headers(self, key, wait=None):
        return self.sync.proxy_headers(key, wait)

    def effect(self, scope, key=None, *, wait=0, lease=None, request=None, fingerprint=None,
               provider_id=None):
        """As Once.effect: a decorator of async functions, and an async context manager."""
        return AsyncEffect(self, scope, key, wait=wait, lease=lease, request=request,
                           fingerprint=fingerprint, provider_id=provider_id)


class AsyncAttempt:
    """The awaitable face of an Attempt: complete/release/unknown are coroutines."""

    def __init__(self, attempt):
        self._a = attempt

    def __getattr__(self, name):
        return getattr(self._a, name)

    @property
    def result(self):
        return self._a.result

    @result.setter
    def result(self, value):
        self._a.result = value

    async def complete(self, result=None, provider_id=None):
        return await _shielded(self._a.complete, result, provider_id)

    async def release(self, error=None):
        await _shielded(self._a.release, error)

    async def unknown(self, error=None):
        await _shielded(self._a.unknown, error)

    async def fail(self, exc):
        await _shielded(self._a.fail, exc)


class AsyncEffect:
    """What AsyncOnce.effect returns: a decorator and an async context manager."""

    def __init__(self, aclient, scope, key, **kw):
        self.aclient = aclient
        self._spec = Effect(aclient.sync, scope, key, **kw)
        self._attempt = None

    async def begin(self, key, request=None):
        s = self._spec
        res = await self.aclient.reserve(s.scope, key, request=request, fingerprint=s.fingerprint,
                                         lease=s.lease, wait=s.wait)
        return AsyncAttempt(Attempt(s.client, s.scope, key, res, s.lease, s.provider_id))

    def __call__(self, fn):
        @functools.wraps(fn)
        async def wrapper(*args, **kwargs):
            key = self._spec._key_for(fn, args, kwargs)
            attempt = await self.begin(key, _derive(self._spec.request, fn, args, kwargs))
            if attempt.done:
                return attempt.result
            try:
                result = fn(*args, **kwargs)
                if inspect.isawaitable(result):
                    result = await result
                _recorded(result)
            except BaseException as e:
                await attempt.fail(e)
                raise
            return await attempt.complete(result)

        wrapper.once_effect = self
        return wrapper

    async def __aenter__(self):
        s = self._spec
        if self._attempt is not None:
            raise RuntimeError("this effect is already entered; call once.effect(...) for each async with block")
        if not isinstance(s.key, str):
            raise TypeError("an async with block needs key= as a str (intent_key(...) makes one)")
        self._attempt = await self.begin(s.key, s.request() if callable(s.request) else s.request)
        return self._attempt

    async def __aexit__(self, et, ev, tb):
        attempt, self._attempt = self._attempt, None
        if attempt.settled:
            return False
        if ev is not None:
            await attempt.fail(ev)
            return False
        await attempt.complete(attempt.result)
        return False
