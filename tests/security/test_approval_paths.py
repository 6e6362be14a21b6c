"""An approval rule no encoding can dodge (issue 26, item 1).

`approve = POST /v1/refunds*, POST /approve*` means: a refund waits for a person. The
provider behind it (lenient_provider.py, a real second server) routes paths the way
WSGI, Go's net/http, nginx, Spring and Tomcat do: decoded, '\\' as '/', slashes merged,
';params' cut, dot segments resolved, without case. So every spelling of a refund
below is a refund to it, carrying the injected credential.

Each spelling must either wait for a person (202 awaiting_approval: the rule matched
the canonical path) or be refused (400 ambiguous_path, or invalid_path for a dot
segment, which is refused on every upstream); none may reach the provider. Targets
are sent as raw bytes (requests would normalise them).

On the old code, `/v1/%72efunds`, `/v1%2Frefunds`, `/%761/refunds`, `//approve/x` and
`/APPROVE/x` were all sent at once (200 completed).
"""
import pytest

from gateway import assert_problem, describe, new_key
from lenient_provider import LenientProvider
import security_harness as sh

RULES = "POST /v1/refunds*, POST /approve*, DELETE *"


@pytest.fixture(scope="module")
def lenient():
    p = LenientProvider().start()
    yield p
    p.stop()


@pytest.fixture(scope="module")
def gw(tmp_path_factory, lenient):
    """pay: approval rules; open: the same provider without rules (the lenient checks
    only apply where a rule could be dodged)."""
    g = sh.launch(tmp_path_factory.mktemp("approval-paths"), upstreams={
        "pay": {"url": lenient.url, "header": [sh.INJECTED], "approve": RULES},
        "open": {"url": lenient.url, "header": [sh.INJECTED]},
    })
    yield g
    sh.finish(g)


@pytest.fixture
def provider(lenient):
    return lenient.forget()


def send(gw, method, target, key=None, body=b"{}"):
    headers = {"Content-Type": "application/json"}
    if key:
        headers["Idempotency-Key"] = key
    data = sh.http_request(method, target, f"127.0.0.1:{gw.port}", headers, body)
    buf, how = sh.exchange_from(gw.port, data, timeout=15)
    assert how == "answer", f"no answer to {data[:200]!r}: {how}, {buf[:200]!r}"
    return sh.RawAnswer(data, buf, gw.port)


# Spellings that a lenient provider routes to a path the rules cover.
MATCHED = [  # the canonical path matches a rule: waits for a person
    "/v1/%72efunds", "/v1/%72%65%66%75%6e%64%73", "/%761/refunds", "/V1/Refunds", "/v1/REFUNDS/re_1",
    "/APPROVE/x", "/Approve", "/v1/refunds;jsessionid=1", "/v1/refunds/", "/%41pprove/x",
]
REFUSED = [  # a provider could read them two ways: refused, nothing stored
    "/v1%2Frefunds", "/v1%2frefunds", "//approve/x", "/v1//refunds", "/x/..;/v1/refunds", "/x/%2e%2e;/v1/refunds",
    "/v1%5Crefunds", "/v1\\refunds", "/x/..%00/v1/refunds", "/v1/%2572efunds", "/x/.;/approve",
]


@pytest.mark.parametrize("target", MATCHED)
def test_every_spelling_of_a_ruled_path_waits_for_a_person(gw, provider, target):
    key = new_key()
    r = send(gw, "POST", "/v1/proxy/pay" + target, key)
    assert r.status_code == 202, describe(r)
    assert r.json().get("state") == "awaiting_approval", describe(r)
    provider.assert_saw_nothing(secrets=[sh.SECRET])


@pytest.mark.parametrize("target", REFUSED)
def test_ambiguous_paths_are_refused_where_rules_apply(gw, provider, target):
    key = new_key()
    r = send(gw, "POST", "/v1/proxy/pay" + target, key)
    assert r.status_code == 400, describe(r)
    assert r.json()["code"] in ("ambiguous_path", "invalid_path"), describe(r)
    provider.assert_saw_nothing(secrets=[sh.SECRET])
    assert gw.action("pay", key).status_code == 404, "a refused request left a row"


@pytest.mark.parametrize("target", ["//approve/x", "/v1%2Frefunds", "/x/..;/approve"])
def test_refusal_says_ambiguous_path(gw, provider, target):
    assert_problem(send(gw, "POST", "/v1/proxy/pay" + target, new_key()), 400, "ambiguous_path")


def test_canonical_path_is_what_is_sent_and_fingerprinted(gw, provider):
    """On the open upstream, %72 is sent as r and a lower-case escape upper-cased: the
    provider gets exactly what a rule would have matched; the two spellings of one
    request are one fingerprint (no payload mismatch on the replay)."""
    key = new_key()
    r = send(gw, "POST", "/v1/proxy/open/v1/%72efunds/%c3%a9?q=%2f", key)
    assert r.status_code == 200, describe(r)
    assert [q["target"] for q in provider.seen()] == ["/v1/refunds/%C3%A9?q=%2f"]
    again = send(gw, "POST", "/v1/proxy/open/v1/refunds/%C3%A9?q=%2f", key)
    assert again.status_code == 200 and again.headers.get("Idempotent-Replayed") == "true", describe(again)
    assert again.headers.get("Idempotency-Payload-Mismatch") is None, describe(again)
    assert len(provider.seen()) == 1


@pytest.mark.parametrize("target", ["//x", "/a%2Fb", "/a\\b"])
def test_without_rules_odd_paths_still_pass(gw, provider, target):
    """No rule to dodge: an upstream without path rules forwards them as before."""
    r = send(gw, "GET", "/v1/proxy/open" + target)
    assert r.status_code == 200, describe(r)
    assert len(provider.seen()) == 1


@pytest.mark.parametrize("target", ["/x/..;/admin", "/x/%2e%2e;/admin", "/x/..%00/admin", "/x/.%00/admin"])
def test_dot_segments_behind_params_or_nul_are_refused_everywhere(gw, provider, target):
    """'..;' and '..%00' climb out on Tomcat and C servers: refused on every upstream."""
    r = send(gw, "GET", "/v1/proxy/open" + target)
    assert_problem(r, 400, "invalid_path")
    provider.assert_saw_nothing(secrets=[sh.SECRET])


def test_bare_star_rule_matches_any_path(gw, provider):
    """approve = DELETE * (a bare '*': any path) is accepted and holds every DELETE."""
    for target in ("/customers/cus_1", "", "/"):
        r = send(gw, "DELETE", "/v1/proxy/pay" + target, new_key(), body=b"")
        assert r.status_code == 202, describe(r)
    provider.assert_saw_nothing(secrets=[sh.SECRET])


def test_lower_case_method_is_held_too(gw, provider):
    """A provider that routes methods without case must not see 'post' skip the rule."""
    r = send(gw, "post", "/v1/proxy/pay/v1/refunds", new_key())
    assert r.status_code in (202, 400, 405, 501), describe(r)
    provider.assert_saw_nothing(secrets=[sh.SECRET])
