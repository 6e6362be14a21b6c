"""AsyncOnce: the same guarantees from asyncio code (decorator and async with):
concurrent retries of one intent make one effect, NotDone releases, other
exceptions (a cancellation included) mark the action unknown, in flight waits
then InFlight, a cancelled reserve leaves no reservation behind, and the lease
is renewed even while the effect blocks the event loop.

Run: /usr/bin/python3 -m pytest -q clients/python/tests/test_async.py
"""
import asyncio
import time
import uuid

import pytest

from conftest import AGENT_TOKEN, LEASE_S, LIMITED_TOKEN, new_scope
from once_client import (AsyncOnce, InFlight, NotAllowed, NotDone, Once, OutcomeUnknown,
                         Unauthorized, intent_key)


def run(coro):
    return asyncio.run(asyncio.wait_for(coro, 120))


@pytest.fixture
def aonce(gw):
    return AsyncOnce(gw.url, AGENT_TOKEN)


def test_concurrent_coroutines_make_one_effect(aonce, effects):
    scope, tag = new_scope(), uuid.uuid4().hex
    ran = []

    @aonce.effect(scope=scope, key=lambda order: intent_key(tag, "ship", order), wait=30)
    async def ship(order):
        ran.append(order)
        pid = await asyncio.to_thread(effects.perform, tag)
        await asyncio.sleep(0.3)
        return {"provider_id": pid, "order": order}

    async def main():
        return await asyncio.gather(*(ship("o-1") for _ in range(8)))

    results = run(main())
    assert len(ran) == 1 and effects.count(tag) == 1
    assert all(r == results[0] for r in results) and results[0]["order"] == "o-1"
    assert run(ship("o-1")) == results[0] and effects.count(tag) == 1


def test_async_with(aonce, effects):
    scope, tag = new_scope(), uuid.uuid4().hex

    async def send():
        async with aonce.effect(scope=scope, key=tag) as e:
            if e.done:
                return e.result
            pid = await asyncio.to_thread(effects.perform, tag)
            return await e.complete({"id": pid})

    first = run(send())
    assert run(send()) == first and effects.count(tag) == 1

    async def not_done():
        async with aonce.effect(scope=scope, key=tag + "-nd"):
            raise NotDone("nothing happened")

    with pytest.raises(NotDone):
        run(not_done())
    assert Once(aonce.url, AGENT_TOKEN).get(scope, tag + "-nd")["state"] == "released"

    async def set_result():
        async with aonce.effect(scope=scope, key=tag + "-set") as e:
            e.result = {"via": "attribute"}

    run(set_result())
    rec = Once(aonce.url, AGENT_TOKEN).get(scope, tag + "-set")
    assert rec["state"] == "completed" and rec["response"]["body"] == '{"via":"attribute"}', rec


def test_async_not_done_and_unknown(aonce, effects):
    scope, tag = new_scope(), uuid.uuid4().hex
    once = Once(aonce.url, AGENT_TOKEN)
    tries = []

    @aonce.effect(scope=scope, key=tag)
    async def flaky():
        tries.append(1)
        if len(tries) == 1:
            raise NotDone("refused")
        await asyncio.to_thread(effects.perform, tag)
        raise ConnectionResetError("reset after sending")

    with pytest.raises(NotDone):
        run(flaky())
    assert once.get(scope, tag)["state"] == "released" and effects.count(tag) == 0
    with pytest.raises(ConnectionResetError):
        run(flaky())
    assert once.get(scope, tag)["state"] in ("unknown", "held")
    with pytest.raises(OutcomeUnknown) as info:
        run(flaky())
    assert len(tries) == 2 and effects.count(tag) == 1
    assert "ConnectionResetError" in info.value.record["error"]


def test_cancelled_effect_is_unknown(aonce, effects):
    scope, tag = new_scope(), uuid.uuid4().hex
    started = []

    @aonce.effect(scope=scope, key=tag)
    async def slow():
        await asyncio.to_thread(effects.perform, tag)
        started.append(1)
        await asyncio.sleep(60)

    async def main():
        task = asyncio.ensure_future(slow())
        while not started:
            await asyncio.sleep(0.01)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task

    run(main())
    rec = Once(aonce.url, AGENT_TOKEN).get(scope, tag)
    assert rec["state"] in ("unknown", "held") and "CancelledError" in rec["error"], rec
    assert effects.count(tag) == 1


def test_cancelled_reserve_leaves_no_reservation(gw):
    """A caller cancelled while its reserve is on the way: once the answer comes,
    the reservation nobody will use is released (nothing ran), not left to lapse."""
    scope, key = new_scope(), uuid.uuid4().hex
    aonce = AsyncOnce(gw.url, AGENT_TOKEN)

    async def main():
        task = asyncio.ensure_future(aonce.reserve(scope, key))
        await asyncio.sleep(0)  # the reserve is sent from its thread
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task

    run(main())
    once = Once(gw.url, AGENT_TOKEN)
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        try:
            rec = once.get(scope, key)
        except Exception:  # noqa: BLE001 - not there yet (404) is fine
            rec = None
        if rec and rec["state"] == "released":
            break
        time.sleep(0.05)
    # The reserve's thread is not cancelled with its caller: it reached once, and
    # what it reserved was released.
    assert rec is not None and rec["state"] == "released", rec
    assert "cancelled" in rec["error"], rec
    assert once.reserve(scope, key).status == "reserved"


def test_async_in_flight_then_inflight(aonce, effects):
    scope, tag = new_scope(), uuid.uuid4().hex

    @aonce.effect(scope=scope, key=tag, wait=0.5)
    async def slow():
        await asyncio.to_thread(effects.perform, tag)
        await asyncio.sleep(2)
        return "done"

    async def main():
        holder = asyncio.ensure_future(slow())
        await asyncio.sleep(0.3)
        t0 = time.monotonic()
        with pytest.raises(InFlight) as info:
            await slow()
        assert time.monotonic() - t0 >= 0.5
        assert info.value.record["state"] == "pending"
        patient = aonce.effect(scope=scope, key=tag, wait=30)(slow.__wrapped__)
        return await holder, await patient()

    assert run(main()) == ("done", "done") and effects.count(tag) == 1


def test_lease_renewed_while_the_loop_is_blocked(gw, effects):
    aonce = AsyncOnce(gw.url, AGENT_TOKEN, lease=LEASE_S)
    scope, tag = new_scope(), uuid.uuid4().hex

    @aonce.effect(scope=scope, key=tag)
    async def blocking():
        effects.perform(tag)
        time.sleep(4 * LEASE_S)  # holds the event loop: only a thread can renew
        return "ok"

    assert run(blocking()) == "ok"
    rec = Once(gw.url, AGENT_TOKEN).get(scope, tag)
    assert rec["state"] == "completed" and rec["attempt"] == 1, rec


def test_async_typed_errors(gw):
    ran = []

    async def f():
        ran.append(1)

    with pytest.raises(Unauthorized):
        run(AsyncOnce(gw.url, "wrong").effect(scope=new_scope(), key="k")(f)())
    with pytest.raises(NotAllowed):
        run(AsyncOnce(gw.url, LIMITED_TOKEN).effect(scope="nope", key="k")(f)())
    assert not ran
    with pytest.raises(TypeError, match="AsyncOnce"):
        Once(gw.url, AGENT_TOKEN).effect(scope="s", key="k")(f)


def test_sync_function_under_async_client(aonce, effects):
    scope, tag = new_scope(), uuid.uuid4().hex

    @aonce.effect(scope=scope, key=tag)
    def plain():
        effects.perform(tag)
        return 7

    assert run(plain()) == 7 and run(plain()) == 7 and effects.count(tag) == 1
