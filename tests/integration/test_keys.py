"""Intent-derived keys (`key = TEMPLATE`), end to end against the real binary.

Proxy: the template decides the key when the client sends none (or always,
with key_source = template); a missing field is 400 key_field_missing naming
it and nothing is sent; the same intent with a different payload is one
effect. LLM step memoisation: a retried step replays the first completion
and once_llm_tokens_saved_total counts its usage.total_tokens.

Actions API: {"scope", "key_template", "request"} instead of "key" (json:
fields only). It is used here to check every function and error, with
domain() on tricky inputs, because its keys can be read back from the
ledger directly.
"""
import hashlib
import uuid

import pytest

from gateway import assert_problem, describe, outcome, write_config
from reconcile_harness import Gateway, Provider, list_actions, metric, new_key, upstream

UPSTREAMS = {
    # reply per inbound message and step
    "reply": {"key": "reply:{json:/message_id}:{header:X-Step}"},
    # order per cart and customer; the client's key is ignored
    "orders": {"key": "order:{json:/cart_id}:{header:X-Customer}", "key_source": "template"},
    # one email per company
    "mail": {"key": "welcome:domain({json:/to})"},
    # query and path fields, functions
    "q": {"key": "{path:1}:lower(trim({query:user})):digits({header:X-Phone})"},
    # LLM step memoisation
    "llm": {"key": "{header:X-Conversation-Id}:{header:X-Step}"},
}


@pytest.fixture(scope="module")
def env(tmp_path_factory, store_kind):
    prov = Provider()
    ups = {name: upstream(prov, **extra) for name, extra in UPSTREAMS.items()}
    gw = Gateway(tmp_path_factory.mktemp("keys"), ups, store_kind=store_kind)
    gw.start()
    yield gw, prov
    gw.stop()
    prov.stop()
    assert not gw.sanitizer_reports(), gw.stderr(all_runs=True)[-6000:]


def _keys(gw, scope):
    return sorted(a["key"] for a in list_actions(gw, scope))


def _uid():
    return uuid.uuid4().hex[:10]


# --------------------------------------------------------------------------- proxy

def test_same_intent_different_payload_is_one_effect(env):
    gw, prov = env
    mid = "m-" + _uid()
    before = prov.count()
    r1 = gw.proxy("POST", "reply", "/messages", json={"message_id": mid, "text": "Hello!"},
                  headers={"X-Step": "answer"})
    assert r1.status_code == 200 and outcome(r1) == "completed", describe(r1)
    # The retry wrote a different text (an LLM rarely says the same thing twice).
    r2 = gw.proxy("POST", "reply", "/messages", json={"message_id": mid, "text": "Hi there, how can I help?"},
                  headers={"X-Step": "answer"})
    assert r2.status_code == 200 and r2.headers.get("Idempotent-Replayed") == "true", describe(r2)
    assert r2.headers.get("Idempotency-Payload-Mismatch") == "true", describe(r2)
    assert r2.json()["id"] == r1.json()["id"]
    assert prov.count() == before + 1
    assert f"reply:{mid}:answer" in _keys(gw, "reply")
    # Another step of the same message is another intent.
    r3 = gw.proxy("POST", "reply", "/messages", json={"message_id": mid, "text": "Bye"},
                  headers={"X-Step": "follow-up"})
    assert outcome(r3) == "completed", describe(r3)
    assert prov.count() == before + 2


def test_integer_json_field(env):
    gw, _ = env
    n = int(uuid.uuid4().int % 10**12)
    r = gw.proxy("POST", "reply", "/messages", json={"message_id": n}, headers={"X-Step": "s"})
    assert outcome(r) == "completed", describe(r)
    assert f"reply:{n}:s" in _keys(gw, "reply")


@pytest.mark.parametrize("body,headers,field", [
    ({"message_id": "m1"}, {}, "header:X-Step"),
    ({"text": "no id"}, {"X-Step": "s"}, "json:/message_id"),
    ({"message_id": ""}, {"X-Step": "s"}, "json:/message_id"),
    ({"message_id": None}, {"X-Step": "s"}, "json:/message_id"),
    ({"message_id": True}, {"X-Step": "s"}, "json:/message_id"),
    ({"message_id": 1.5}, {"X-Step": "s"}, "json:/message_id"),
    ({"message_id": {"a": 1}}, {"X-Step": "s"}, "json:/message_id"),
    (b"not json", {"X-Step": "s"}, "json:/message_id"),
    # duplicate members: the key must not come from one copy while the upstream reads the other
    (b'{"message_id":"m1","message_id":"m2"}', {"X-Step": "s"}, "json:/message_id"),
])
def test_missing_field_is_400_naming_it_and_nothing_is_sent(env, body, headers, field):
    gw, prov = env
    before = prov.count()
    kw = {"data": body} if isinstance(body, bytes) else {"json": body}
    r = gw.proxy("POST", "reply", "/messages", headers=headers, **kw)
    j = assert_problem(r, 400, "key_field_missing")
    assert j.get("field") == field, describe(r)
    assert field in j.get("detail", ""), describe(r)
    assert prov.count() == before


def test_unprintable_value_outside_sha256_is_400_and_nothing_is_sent(env):
    gw, prov = env
    before = prov.count()
    r = gw.proxy("POST", "reply", "/messages", json={"message_id": "café"}, headers={"X-Step": "s"})
    j = assert_problem(r, 400, "invalid_key")
    assert "json:/message_id" in j.get("detail", ""), describe(r)
    assert prov.count() == before


def test_client_key_wins_by_default(env):
    gw, prov = env
    mid = "m-" + _uid()
    before = prov.count()
    k1, k2 = new_key("client"), new_key("client")
    for k in (k1, k2):
        r = gw.proxy("POST", "reply", "/messages", key=k, json={"message_id": mid}, headers={"X-Step": "s"})
        assert outcome(r) == "completed", describe(r)
    assert prov.count() == before + 2
    keys = _keys(gw, "reply")
    assert k1 in keys and k2 in keys and f"reply:{mid}:s" not in keys


def test_client_key_does_not_need_the_template_fields(env):
    gw, _ = env
    r = gw.proxy("POST", "reply", "/messages", key=new_key("client"), json={"other": 1})
    assert outcome(r) == "completed", describe(r)


def test_key_source_template_ignores_the_client_key(env):
    gw, prov = env
    cart = "cart-" + _uid()
    before = prov.count()
    answers = []
    for i, k in enumerate((new_key("retry"), new_key("retry"), None)):
        r = gw.proxy("POST", "orders", "/orders", key=k, json={"cart_id": cart, "note": f"attempt {i}"},
                     headers={"X-Customer": "cus_42"})
        assert r.status_code == 200, describe(r)
        answers.append(r)
    assert outcome(answers[0]) == "completed"
    assert [outcome(r) for r in answers[1:]] == ["replayed", "replayed"]
    assert prov.count() == before + 1
    assert _keys(gw, "orders").count(f"order:{cart}:cus_42") == 1
    # The template's key is the one forwarded... nowhere: without forward_key_as no key
    # reaches the provider, and the client's own header is dropped too.
    assert "idempotency-key" not in prov.effects()[-1]["headers"]
    # Another customer, same cart id: another order.
    r = gw.proxy("POST", "orders", "/orders", json={"cart_id": cart}, headers={"X-Customer": "cus_43"})
    assert outcome(r) == "completed", describe(r)
    assert prov.count() == before + 2


def test_key_source_template_missing_field_even_with_a_client_key(env):
    gw, prov = env
    before = prov.count()
    r = gw.proxy("POST", "orders", "/orders", key=new_key(), json={"cart_id": "c"})
    j = assert_problem(r, 400, "key_field_missing")
    assert j["field"] == "header:X-Customer"
    assert prov.count() == before


def test_one_email_per_company(env):
    gw, prov = env
    dom = f"acme-{_uid()}.co.uk"
    before = prov.count()
    results = []
    for to in (f"alice@{dom}", f"Bob <bob@Sales.{dom.upper()}>", f"carol@www.{dom}"):
        r = gw.proxy("POST", "mail", "/send", json={"to": to, "template": "welcome"})
        assert r.status_code == 200, describe(r)
        results.append(outcome(r))
    assert results == ["completed", "replayed", "replayed"]
    assert prov.count() == before + 1
    assert f"welcome:{dom}" in _keys(gw, "mail")
    r = gw.proxy("POST", "mail", "/send", json={"to": "x@co.uk"})  # a public suffix, no company
    j = assert_problem(r, 400, "invalid_key")
    assert "public suffix" in j["detail"], j
    assert prov.count() == before + 1


def test_query_path_header_fields_and_functions(env):
    gw, prov = env
    uid = _uid()
    r = gw.proxy("POST", "q", f"/users/U{uid}/notify?x=1&user=%20Ann%20Smith%20&y=2", json={},
                 headers={"X-Phone": "+44 (20) 7946-0958"})
    assert outcome(r) == "completed", describe(r)
    assert f"U{uid}:ann smith:442079460958" in _keys(gw, "q")
    before = prov.count()
    r = gw.proxy("POST", "q", f"/users/U{uid}/other?user=ANN%20SMITH", json={"a": 1},
                 headers={"X-Phone": "44-20-7946-0958"})
    assert r.headers.get("Idempotent-Replayed") == "true", describe(r)
    assert prov.count() == before
    r = gw.proxy("POST", "q", f"/users/U{uid}/notify", json={}, headers={"X-Phone": "1"})
    assert assert_problem(r, 400, "key_field_missing")["field"] == "query:user"
    r = gw.proxy("POST", "q", "/users", json={}, headers={"X-Phone": "1"})
    j = assert_problem(r, 400, "key_field_missing")
    assert j["field"] in ("path:1", "query:user"), j  # the first missing one is reported
    r = gw.proxy("POST", "q", f"/users/U{uid}/n?user=a", json={}, headers={"X-Phone": "no digits"})
    assert_problem(r, 400, "invalid_key")
    assert prov.count() == before


def test_safe_methods_pass_without_the_template(env):
    gw, prov = env
    r = gw.proxy("GET", "reply", "/messages")
    assert r.status_code == 200, describe(r)
    assert r.json()["id"] is None


# --------------------------------------------------------------------------- LLM memoisation

def test_llm_step_memoisation_replays_and_counts_tokens_saved(env):
    gw, prov = env
    conv = "conv-" + _uid()
    saved0 = metric(gw, "once_llm_tokens_saved_total", scope="llm")
    h = {"X-Conversation-Id": conv, "X-Step": "plan-1", "X-Fake-Total-Tokens": "123"}
    body = {"model": "gpt-x", "messages": [{"role": "user", "content": "plan my trip"}]}
    r1 = gw.proxy("POST", "llm", "/v1/chat/completions", json=body, headers=h)
    assert r1.status_code == 200 and outcome(r1) == "completed", describe(r1)
    first = r1.json()["choices"][0]["message"]["content"]
    assert r1.json()["usage"]["total_tokens"] == 123
    assert metric(gw, "once_llm_tokens_saved_total", scope="llm") == saved0

    # The agent crashed and retries the planning step, its prompt slightly different.
    body2 = dict(body, temperature=0.7)
    r2 = gw.proxy("POST", "llm", "/v1/chat/completions", json=body2, headers=h)
    assert r2.headers.get("Idempotent-Replayed") == "true", describe(r2)
    assert r2.json()["choices"][0]["message"]["content"] == first
    assert metric(gw, "once_llm_tokens_saved_total", scope="llm") == saved0 + 123
    r3 = gw.proxy("POST", "llm", "/v1/chat/completions", json=body, headers=h)
    assert r3.json()["choices"][0]["message"]["content"] == first
    assert metric(gw, "once_llm_tokens_saved_total", scope="llm") == saved0 + 246

    # The next step is a new generation (paid for), not a replay.
    r4 = gw.proxy("POST", "llm", "/v1/chat/completions", json=body,
                  headers=dict(h, **{"X-Step": "plan-2", "X-Fake-Total-Tokens": "50"}))
    assert outcome(r4) == "completed" and r4.json()["choices"][0]["message"]["content"] != first
    assert metric(gw, "once_llm_tokens_saved_total", scope="llm") == saved0 + 246
    gens = [e for e in prov.effects() if e["path"].endswith("/chat/completions")
            and e["headers"].get("x-conversation-id") == conv]
    assert len(gens) == 2, gens


def test_replay_without_usage_saves_no_tokens(env):
    gw, _ = env
    before = metric(gw, "once_llm_tokens_saved_total", scope="reply")
    mid = "m-" + _uid()
    for _ in range(2):
        gw.proxy("POST", "reply", "/messages", json={"message_id": mid}, headers={"X-Step": "s"})
    assert metric(gw, "once_llm_tokens_saved_total", scope="reply") == before


# --------------------------------------------------------------------------- actions API

def _derive(gw, template, request):
    """(key, None) for a templated reservation, or (None, problem JSON)."""
    scope = "kt-" + _uid()
    r = gw.post("/v1/actions", json={"scope": scope, "key_template": template, "request": request})
    if r.status_code != 201:
        return None, (r.status_code, r.json())
    keys = _keys(gw, scope)
    assert len(keys) == 1, keys
    return keys[0], None


@pytest.mark.parametrize("template,request_,want", [
    ("lower({json:/a})", {"a": "MiXeD-Case_1"}, "mixed-case_1"),
    ("lower({json:/a})", {"a": "ÀB"}, None),  # non-ASCII outside sha256/digits/domain
    ("trim({json:/a})", {"a": " \t padded \n"}, "padded"),
    ("digits({json:/a})", {"a": "+1 (555) 010-0199"}, "15550100199"),
    ("digits({json:/a})", {"a": "tél. ٣ 42"}, "42"),  # only ASCII digits
    ("sha256({json:/a})", {"a": "x"}, hashlib.sha256(b"x").hexdigest()),
    ("sha256({json:/a})", {"a": "é"}, hashlib.sha256("é".encode()).hexdigest()),
    ("sha256(lower(trim({json:/to})))", {"to": "  Bob@Example.COM "},
     hashlib.sha256(b"bob@example.com").hexdigest()),
    ("c:{json:/a/b/0}:{json:/n}", {"a": {"b": ["x"]}, "n": 7}, "c:x:7"),
    (r"lit\{{json:/a}\}\(x\)", {"a": "v"}, "lit{v}(x)"),
    ("{json:/a~1b}-{json:/c~0d}", {"a/b": "s", "c~d": "t"}, "s-t"),
    ("order {json:/a}", {"a": "1"}, "order 1"),
])
def test_template_functions(env, template, request_, want):
    gw, _ = env
    key, problem = _derive(gw, template, request_)
    if want is None:
        assert problem and problem[0] == 400 and problem[1]["code"] == "invalid_key", problem
    else:
        assert problem is None, problem
        assert key == want


@pytest.mark.parametrize("value,want", [
    ("Sales@www.Acme.co.uk", "acme.co.uk"),
    ("Bob <bob@Mail.Google.COM>", "google.com"),
    ("https://user:pw@Shop.Example.com:8443/p?q=1#f", "example.com"),
    ("http://a.b.c.example.org", "example.org"),
    ("//cdn.example.net/lib.js", "example.net"),
    ("example.com:8080", "example.com"),
    ("example.com.", "example.com"),
    ("EXAMPLE.COM", "example.com"),
    ("deep.sub.example.co.jp", "example.co.jp"),
    ("someone.github.io", "someone.github.io"),  # private section of the PSL
    ("x.someone.github.io", "someone.github.io"),
    ("bücher.de", "xn--bcher-kva.de"),
    ("Info@Bücher.DE", "xn--bcher-kva.de"),
    ("faß.de", "xn--fa-hia.de"),  # UTS #46 nontransitional
    ("https://www.xn--bcher-kva.de/", "xn--bcher-kva.de"),
    ("例え.jp", "xn--r8jz45g.jp"),
    ("shop.例え.jp", "xn--r8jz45g.jp"),
    ("example\u3002com", "example.com"),  # ideographic full stop
    ('"a@b"@example.com', "example.com"),
])
def test_domain(env, value, want):
    gw, _ = env
    key, problem = _derive(gw, "domain({json:/v})", {"v": value})
    assert problem is None, (value, problem)
    assert key == want, value


@pytest.mark.parametrize("value", [
    "co.uk",            # a public suffix
    "user@co.uk",
    "github.io",
    "localhost",
    "com",
    "127.0.0.1",
    "http://127.0.0.1:8080/",
    "http://[::1]:80/",
    "2001:db8::1",
    "example.com:http",  # the port is not a number
    "a..b.example.com",
    "exa mple.com",
    "user@",
    "https:///path",
    "-",
])
def test_domain_rejects(env, value):
    gw, _ = env
    key, problem = _derive(gw, "domain({json:/v})", {"v": value})
    assert key is None, f"domain({value!r}) gave {key!r}"
    status, j = problem
    assert status == 400 and j["code"] == "invalid_key", problem
    assert "domain()" in j["detail"], problem


def test_actions_template_missing_field(env):
    gw, _ = env
    key, (status, j) = None, _derive(gw, "x:{json:/a}:{json:/b}", {"a": "1"})[1]
    assert status == 400 and j["code"] == "key_field_missing" and j["field"] == "json:/b", j
    _, (status, j) = _derive(gw, "{json:/a}", None)
    assert status == 400 and j["code"] == "key_field_missing" and j["field"] == "json:/a", j


@pytest.mark.parametrize("template,naming", [
    ("{header:X-Step}", "header:X-Step"),
    ("{json:/a}:{query:q}", "query:q"),
    ("{path:0}", "path:0"),
])
def test_actions_template_only_json_fields(env, template, naming):
    gw, _ = env
    _, (status, j) = _derive(gw, template, {"a": "1"})
    assert status == 400 and j["code"] == "invalid_request", j
    assert naming in j["detail"], j


@pytest.mark.parametrize("template,fragment", [
    ("sha265({json:/a})", "unknown function"),
    ("constant", "no field"),
    ("{json:a}", "starts with '/'"),
    ("{json:/a", "unclosed"),
    ("lower()", "empty"),
    ("{nope:x}", "unknown field"),
    ("x}{json:/a}", "without '{'"),
    ("", "empty"),
])
def test_actions_template_parse_errors(env, template, fragment):
    gw, _ = env
    _, (status, j) = _derive(gw, template, {"a": "1"})
    assert status == 400 and j["code"] == "invalid_request", j
    assert "key_template" in j["detail"] and fragment in j["detail"], j


def test_actions_template_same_intent_replays(env):
    gw, _ = env
    scope = "kt-" + _uid()
    body = {"scope": scope, "key_template": "invoice:{json:/customer}:{json:/month}",
            "request": {"customer": "cus_1", "month": "2026-11", "amount": 10}}
    r = gw.post("/v1/actions", json=body)
    assert r.status_code == 201, describe(r)
    tok = r.json()["token"]
    key = "invoice:cus_1:2026-11"
    assert _keys(gw, scope) == [key]
    c = gw.post("/v1/actions/complete", json={"scope": scope, "key": key, "token": tok,
                                             "result": {"id": "in_1"}, "provider_id": "in_1"})
    assert c.status_code == 200, describe(c)
    r2 = gw.post("/v1/actions", json=dict(body, request={"customer": "cus_1", "month": "2026-11", "amount": 11}))
    assert r2.status_code == 200, describe(r2)
    assert r2.json()["status"] == "completed" and r2.json()["provider_id"] == "in_1"


def test_actions_template_reservation_tells_the_key(env):
    """The agent must complete with {scope, key, token}: a templated reservation has
    to say which key it derived, or the agent cannot settle it."""
    gw, _ = env
    scope = "kt-" + _uid()
    r = gw.post("/v1/actions", json={"scope": scope, "key_template": "a:{json:/x}", "request": {"x": "1"}})
    assert r.status_code == 201, describe(r)
    assert r.json().get("key") == "a:1", describe(r)


# --------------------------------------------------------------------------- config

@pytest.mark.parametrize("extra,fragment", [
    ({"key": "sha265({json:/a})"}, "unknown function"),
    ({"key": "static"}, "no field"),
    ({"key": "{json:/a}", "key_source": "client"}, "not header or template"),
    ({"key_source": "template"}, "needs key = TEMPLATE"),
    ({"lookup": "DELETE /x/{key}", "lookup_found": "json:/id"}, "not GET, HEAD or POST"),
    ({"lookup": "GET /x/{nope}", "lookup_found": "json:/id"}, "unknown placeholder"),
    ({"lookup": "GET /x/{key}"}, "needs lookup_found"),
    ({"lookup_found": "json:/id"}, "does nothing without lookup"),
    ({"lookup": "GET /x/{key}", "lookup_found": "json:/id", "lookup_absent": "404 | json-empty:data"},
     "json-empty"),
    ({"lookup": "GET /x/{key}", "lookup_found": "json:/id", "lookup_attempts": 0}, "from 1"),
])
def test_check_config_rejects(tmp_path, env, extra, fragment):
    gw, _ = env
    cfg = tmp_path / "bad.ini"
    write_config(cfg, {"listen": "127.0.0.1:7999", "store": f"sqlite:{tmp_path / 'x.db'}"},
                 {"u": dict({"url": "http://127.0.0.1:9"}, **extra)})
    r = gw.cli("check-config", cfg)
    assert r.returncode == 1, (r.stdout, r.stderr)
    assert fragment in r.stderr and "bad.ini:" in r.stderr, r.stderr


def test_check_config_accepts_the_recipes(tmp_path, env):
    gw, _ = env
    cfg = tmp_path / "good.ini"
    write_config(cfg, {"listen": "127.0.0.1:7999", "store": f"sqlite:{tmp_path / 'x.db'}"}, {
        "reply": {"url": "http://127.0.0.1:9", "key": "reply:{json:/message_id}:{header:X-Step}"},
        "orders": {"url": "http://127.0.0.1:9", "key": "order:{json:/cart_id}:{header:X-Customer}",
                   "key_source": "template"},
        "mail": {"url": "http://127.0.0.1:9", "key": "welcome:domain({json:/to})"},
        "llm": {"url": "http://127.0.0.1:9", "key": "{header:X-Conversation-Id}:{header:X-Step}"},
        "pay": {"url": "http://127.0.0.1:9", "lookup": "GET /v1/charges/search?ref={key}",
                "lookup_found": "json:/data/0/id", "lookup_absent": "404 | json-empty:/data",
                "lookup_backoff": "10s", "lookup_attempts": 5},
    })
    r = gw.cli("check-config", cfg)
    assert r.returncode == 0, r.stderr
    assert "ok (5 upstreams" in r.stdout, r.stdout
