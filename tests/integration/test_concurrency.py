"""Concurrency: many clients with one key get one effect; many keys against a
slow upstream are in flight together without a thread each.

Run: ONCE_BIN=build/me/once /usr/bin/python3 -m pytest -q tests/integration/test_concurrency.py
"""
import concurrent.futures as cf
import threading
import time

import pytest
import requests

from gateway import Gateway, describe, new_key, outcome, require_serve, thread_sampler

MAX_THREADS = 32


@pytest.fixture(scope="module")
def gw(tmp_path_factory, provider, store_kind):
    require_serve()
    g = Gateway(tmp_path_factory.mktemp("conc"), {"demo": {"url": provider.url, "timeout": "30s"}},
                store_kind=store_kind)
    g.start()
    yield g
    rc = g.stop()
    assert rc == 0, f"once serve exited {rc} on SIGTERM:\n{g.stderr()[-3000:]}"
    assert not g.sanitizer_reports(), g.stderr(all_runs=True)[-6000:]


@pytest.fixture(autouse=True)
def fresh(gw, provider):
    provider.reset()
    yield
    assert gw.alive(), gw.death_note()


def hammer(n, fn):
    """Runs fn(i) in n threads released together; returns the results (or exceptions)."""
    barrier = threading.Barrier(n)

    def run(i):
        barrier.wait(30)
        try:
            return fn(i)
        except requests.RequestException as e:
            return e

    with cf.ThreadPoolExecutor(n) as ex:
        return list(ex.map(run, range(n)))


def test_100_clients_same_key_one_effect(gw, provider):
    key = new_key("same")
    body = {"amount": 100, "to": "acct_1"}

    def call(i):
        return gw.proxy("POST", "demo", "/charges", key=key, json=body, headers={"X-Fake-Delay-Ms": "300"},
                        timeout=60)

    results = hammer(100, call)
    errors = [r for r in results if isinstance(r, Exception)]
    assert not errors, errors[:3]
    assert provider.count() == 1, f"{provider.count()} effects for one key"
    winners = [r for r in results if r.status_code == 200]
    assert winners, [r.status_code for r in results]
    completed = [r for r in winners if outcome(r) == "completed"]
    assert len(completed) == 1, [outcome(r) for r in winners]
    the = completed[0].content
    for r in results:
        if r.status_code == 200:
            assert r.content == the and outcome(r) in ("completed", "replayed"), describe(r)
        else:
            assert r.status_code == 409, describe(r)
            assert r.json()["code"] == "key_in_flight" and outcome(r) == "in_flight", describe(r)
    r = gw.proxy("POST", "demo", "/charges", key=key, json=body)
    assert r.status_code == 200 and r.content == the and outcome(r) == "replayed", describe(r)


def test_100_clients_same_key_prefer_wait_all_get_the_answer(gw, provider):
    key = new_key("wait")

    def call(i):
        return gw.proxy("POST", "demo", "/charges", key=key, json={"x": 1},
                        headers={"X-Fake-Delay-Ms": "500", "Prefer": "wait=20"}, timeout=60)

    results = hammer(100, call)
    errors = [r for r in results if isinstance(r, Exception)]
    assert not errors, errors[:3]
    codes = sorted({r.status_code for r in results})
    assert codes == [200], [(r.status_code, r.text[:100]) for r in results if r.status_code != 200][:5]
    assert len({r.content for r in results}) == 1
    assert [outcome(r) for r in results].count("completed") == 1
    assert provider.count() == 1


def test_500_distinct_keys_against_a_2s_upstream(gw, provider):
    n = 500
    keys = [new_key(f"many{i}") for i in range(n)]
    stop = threading.Event()
    samples = []
    sampler = threading.Thread(target=thread_sampler, args=(gw, stop, samples, 0.05), daemon=True)
    base_threads = gw.threads()
    sampler.start()

    def call(i):
        return gw.proxy("POST", "demo", "/jobs", key=keys[i], json={"i": i},
                        headers={"X-Fake-Delay-Ms": "2000"}, timeout=60)

    t0 = time.monotonic()
    try:
        results = hammer(n, call)
    finally:
        stop.set()
        sampler.join(5)
    elapsed = time.monotonic() - t0
    errors = [r for r in results if isinstance(r, Exception)]
    assert not errors, f"{len(errors)} failed: {errors[:3]}"
    bad = [(r.status_code, r.text[:200]) for r in results if r.status_code != 200 or outcome(r) != "completed"]
    assert not bad, bad[:5]
    assert provider.count() == n
    stats = provider.stats()
    assert elapsed < 15, f"500 calls of 2 s took {elapsed:.1f} s (max in flight upstream {stats['max_in_flight']})"
    assert stats["max_in_flight"] >= 100, f"at most {stats['max_in_flight']} calls were in flight upstream"
    print(f"500 keys: {elapsed:.1f} s, upstream max in flight {stats['max_in_flight']}, "
          f"server threads at rest {base_threads}, max {max(samples) if samples else None} "
          f"over {len(samples)} samples")
    assert samples, "no thread samples"
    assert max(samples) < MAX_THREADS, \
        f"thread count rose to {max(samples)} (at rest {base_threads}; must stay under {MAX_THREADS})"
    # every row is there and completed
    items, after = [], None
    while True:
        q = "/v1/actions?scope=demo&status=completed&limit=1000" + (f"&after={after}" if after else "")
        j = gw.get(q).json()
        items += j["items"]
        if j["next"] is None:
            break
        after = requests.utils.quote(j["next"], safe="")
    got = {x["key"] for x in items}
    assert set(keys) <= got, f"{len(set(keys) - got)} rows missing"
