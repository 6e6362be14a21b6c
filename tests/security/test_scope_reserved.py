"""Scopes that belong to the gateway: the actions API may not reserve, complete,
release, mark unknown or renew in a scope that names an upstream (403
scope_reserved), or an agent could plant a forged "completed" answer that the proxy
would then replay instead of making the call. Reading stays allowed; an upstream
with `actions_api = yes` opts in (and then replays what the agent recorded, by design).
"""
import pytest

from gateway import assert_problem, describe, new_key, outcome
import security_harness as sh

TOKEN = "tok-scope-agent-93a1c6e2d4b8"      # a bare line: an agent
FORGED = {"status": 200, "body": {"id": "ch_FORGED", "paid": True}, "forged": True}
VERBS = ["complete", "release", "unknown", "renew"]
GUESSED = "0123456789abcdef" * 2              # a well-formed fencing token (32 hex digits)


def make_gateway(tmp_path_factory, provider, **upstreams):
    d = tmp_path_factory.mktemp("scopes")
    tokens = sh.write_tokens(d / "tokens", [TOKEN])
    ups = {name: dict({"url": provider.url}, **extra) for name, extra in upstreams.items()}
    return sh.launch(d, upstreams=ups, server={"tokens_file": str(tokens)})


@pytest.fixture(scope="module")
def gw(tmp_path_factory, provider_process):
    """One upstream, `pay`, whose scope the actions API may not touch."""
    g = make_gateway(tmp_path_factory, provider_process, pay={})
    yield g
    sh.finish(g)


@pytest.fixture(scope="module")
def sdk_gw(tmp_path_factory, provider_process):
    """`pay` as above, and `sdk` with actions_api = yes."""
    g = make_gateway(tmp_path_factory, provider_process, pay={}, sdk={"actions_api": True})
    yield g
    sh.finish(g)


def post(gw, path, body):
    return gw.post(path, json=body, headers=sh.bearer(TOKEN))


def proxy_charge(gw, upstream, key):
    return gw.proxy("POST", upstream, "/v1/charges", key=key, json={"amount": 4200},
                    headers=sh.bearer(TOKEN))


def verb_body(verb, scope, key, token):
    body = {"scope": scope, "key": key, "token": token}
    if verb == "complete":
        body.update(result=FORGED, provider_id="ch_FORGED")
    elif verb in ("release", "unknown"):
        body["error"] = "forged"
    else:
        body["lease_ms"] = 60000
    return body


def test_forged_result_is_not_replayed_by_the_proxy(gw, provider):
    """An agent reserves key K in upstream pay's scope and completes it with a forged
    answer; the proxied charge with key K must still reach the provider."""
    key = new_key("order")
    reserved = post(gw, "/v1/actions", {"scope": "pay", "key": key})
    completed = None
    if reserved.status_code == 201:       # the attack goes on as far as the gateway lets it
        completed = post(gw, "/v1/actions/complete",
                         verb_body("complete", "pay", key, reserved.json()["token"]))
    r = proxy_charge(gw, "pay", key)
    assert r.status_code == 200 and outcome(r) == "completed", \
        f"the proxy did not make the call (forgery {'completed' if completed else 'refused'})" + describe(r)
    assert "ch_FORGED" not in r.text, "the forged answer was replayed" + describe(r)
    assert provider.count() == 1, f"the provider saw {provider.count()} effects, not 1"
    assert_problem(reserved, 403, "scope_reserved")


RESERVATIONS = {   # uid -> (body without scope, the key it would reserve)
    "key": lambda uid: ({"key": uid}, uid),
    "key-with-options": lambda uid: ({"key": uid, "fingerprint": "f" * 64, "lease_ms": 60000}, uid),
    "key-template": lambda uid: ({"key_template": "order:{json:/cart}", "request": {"cart": uid}}, f"order:{uid}"),
}


@pytest.mark.parametrize("form", list(RESERVATIONS))
def test_reserve_in_an_upstream_scope_is_refused(gw, form):
    """Every form of reservation in an upstream's scope: 403 scope_reserved, and no row."""
    body, key = RESERVATIONS[form](new_key("order"))
    r = post(gw, "/v1/actions", dict(body, scope="pay"))
    assert_problem(r, 403, "scope_reserved")
    row = gw.action("pay", key, headers=sh.bearer(TOKEN))
    assert row.status_code == 404, "a row appeared in scope pay" + describe(row)


@pytest.mark.parametrize("verb", VERBS)
def test_settling_a_proxied_action_is_refused(gw, provider, verb):
    """The agent tries to overwrite (complete), free (release, unknown) or hold (renew) an
    action the proxy made in upstream pay's scope: 403 scope_reserved, and the action is
    unchanged: a retry still replays the provider's real answer."""
    key = new_key("order")
    first = proxy_charge(gw, "pay", key)
    assert first.status_code == 200 and outcome(first) == "completed", describe(first)
    r = post(gw, f"/v1/actions/{verb}", verb_body(verb, "pay", key, GUESSED))
    assert_problem(r, 403, "scope_reserved")
    again = proxy_charge(gw, "pay", key)
    assert outcome(again) == "replayed" and again.content == first.content, describe(again)
    assert provider.count() == 1


@pytest.mark.parametrize("verb", VERBS)
def test_verbs_in_an_upstream_scope_without_an_action(gw, verb):
    """The same verbs on a key the proxy has not used yet: 403 scope_reserved (not a 404
    that would tell the agent to go ahead and reserve)."""
    r = post(gw, f"/v1/actions/{verb}", verb_body(verb, "pay", new_key(), GUESSED))
    assert_problem(r, 403, "scope_reserved")


def test_reading_an_upstream_scope_is_allowed(gw, provider):
    """GET /v1/actions/pay/K and the list of scope pay stay open to agents."""
    key = new_key("order")
    assert proxy_charge(gw, "pay", key).status_code == 200
    r = gw.action("pay", key, headers=sh.bearer(TOKEN))
    assert r.status_code == 200 and r.json()["state"] == "completed", describe(r)
    r = gw.get("/v1/actions?scope=pay&limit=1000", headers=sh.bearer(TOKEN))
    assert r.status_code == 200 and key in [i["key"] for i in r.json()["items"]], describe(r)


def test_a_scope_that_names_no_upstream_is_free(gw):
    """The actions API still works in the agent's own scopes (here one called `payments`,
    close to but not the upstream's name)."""
    key = new_key()
    r = post(gw, "/v1/actions", {"scope": "payments", "key": key})
    assert r.status_code == 201, describe(r)
    r = post(gw, "/v1/actions/complete", verb_body("complete", "payments", key, r.json()["token"]))
    assert r.status_code == 200, describe(r)


def test_actions_api_yes_opts_in(sdk_gw, provider):
    """An upstream with actions_api = yes: the agent may reserve and settle in its scope,
    and the proxy then replays what the agent recorded (by design). pay stays closed."""
    key = new_key("sdk")
    r = post(sdk_gw, "/v1/actions", {"scope": "sdk", "key": key})
    assert r.status_code == 201, describe(r)
    r = post(sdk_gw, "/v1/actions/complete", verb_body("complete", "sdk", key, r.json()["token"]))
    assert r.status_code == 200, describe(r)
    r = proxy_charge(sdk_gw, "sdk", key)
    assert outcome(r) == "replayed", describe(r)
    assert provider.count() == 0
    assert_problem(post(sdk_gw, "/v1/actions", {"scope": "pay", "key": new_key()}), 403, "scope_reserved")
