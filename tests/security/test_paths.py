"""The upstream is fixed by config: what an agent puts after /v1/proxy/{upstream} (or
the whole target on an upstream's own listen address) may only add a path below the
configured URL and a query. Anything else gets 400 invalid_path and reaches no one.

The attacks, with the upstream's credentials (`header = Authorization: Bearer
sk_live_SECRET`) as the prize:
- on an upstream's own listen port, a target that is glued to the configured URL
  as text: `@127.0.0.1:ATTACKER/steal` turns the URL's host into userinfo,
  `:ATTACKER/x` supplies the port of a URL that has none (`lp` is configured without
  one, so that the attack is real), `.127.0.0.1:ATTACKER/x` extends the host name, an
  absolute-form target names another server outright;
- dot segments, raw or percent-encoded, or hidden behind an encoded / or \\, that climb
  out of `url = http://127.0.0.1:PROVIDER/api/public` to /admin.

Targets are sent as raw bytes (requests would normalise them). libmicrohttpd answers
none of the targets below itself: a build of once without the check forwarded them
(the @ and : ones to the attacker, with the secret), and with the check each gets
once's own problem+json 400 invalid_path.
"""
import pytest

from gateway import assert_problem, describe, free_port, new_key
import security_harness as sh


@pytest.fixture(scope="module")
def ports():
    return {"lx": free_port(), "lp": free_port()}


@pytest.fixture(scope="module")
def gw(tmp_path_factory, provider_process, ports):
    """x: url with a base path, on /v1/proxy/x; lx: the provider's URL without a path,
    on its own listen port; lp: a URL without a port (http://127.0.0.1), on its own."""
    up = provider_process.url
    g = sh.launch(tmp_path_factory.mktemp("paths"), upstreams={
        "x": {"url": f"{up}/api/public", "header": [sh.INJECTED]},
        "lx": {"url": up, "header": [sh.INJECTED], "listen": f"127.0.0.1:{ports['lx']}"},
        "lp": {"url": "http://127.0.0.1", "header": [sh.INJECTED], "listen": f"127.0.0.1:{ports['lp']}"},
    })
    yield g
    sh.finish(g)


def send(port, method, target, headers=None, body=b""):
    """A request with its target exactly as given; the answer as a RawAnswer."""
    data = sh.http_request(method, target, f"127.0.0.1:{port}", headers, body)
    buf, how = sh.exchange_from(port, data, timeout=10)
    assert how == "answer", f"no answer to {data[:200]!r}: {how}, {buf[:200]!r}"
    return sh.RawAnswer(data, buf, port)


def assert_invalid_path(r, provider, attacker):
    assert_problem(r, 400, "invalid_path")
    attacker.assert_saw_nothing(secrets=[sh.SECRET])
    sh.assert_provider_saw_nothing(provider)


# ----------------------------------------------------------------------------- /v1/proxy/x…

DOT_SUFFIXES = [
    "/..", "/.", "/../../admin", "/./admin", "/a/../../admin", "/a/./../../admin", "/..?x=1",
    "/%2e%2e/admin", "/%2E%2e/admin", "/.%2e/admin", "/%2e./admin", "/%2e/admin", "/%2E",
    "/..%2fadmin", "/..%2Fadmin", "/a/..%2f..%2fadmin", "/a/b%2f..%2f..%2f..%2fadmin",
    "/..%5c..", "/a/..%5C..%5Cadmin", "/a%5c..%5c..%5cadmin", "/a\\..\\..\\admin", "/%2e%2e%5cadmin",
    "/a/.%2E/.%2e/admin",
]


@pytest.mark.parametrize("suffix", DOT_SUFFIXES)
def test_dot_segments_behind_the_proxy_prefix(gw, provider, attacker, suffix):
    """GET /v1/proxy/x<dot segments>: climbing out of url's /api/public (with the
    injected credentials) is refused; the provider never sees /admin."""
    assert_invalid_path(send(gw.port, "GET", "/v1/proxy/x" + suffix), provider, attacker)


def test_dot_segments_with_a_key_leave_no_row(gw, provider, attacker):
    """The same on a keyed POST: refused before anything is reserved."""
    key = new_key()
    r = send(gw.port, "POST", "/v1/proxy/x/../../admin/users", {"Idempotency-Key": key,
                                                                 "Content-Type": "application/json"}, b"{}")
    assert_invalid_path(r, provider, attacker)
    assert gw.action("x", key).status_code == 404


@pytest.mark.parametrize("upstream_part", [
    "lx@127.0.0.1:{atk}/steal", "lx%40127.0.0.1:{atk}/steal", "lp:{atk}/x", "lp%3a{atk}/x",
    "lx.127.0.0.1:{atk}/x", "x%2f..%2f..%2fadmin", "x%2F..%2F..%2Fadmin", "x%5c..%5cadmin",
])
def test_tricks_in_the_upstream_name(gw, provider, attacker, upstream_part):
    """The name segment itself carries the trick (/v1/proxy/lx@127.0.0.1:ATTACKER/steal):
    whether once calls it an unknown upstream or an invalid path, nothing is sent."""
    r = send(gw.port, "GET", "/v1/proxy/" + upstream_part.format(atk=attacker.port))
    assert r.status_code in (400, 404), describe(r)
    assert_problem(r, r.status_code, {400: "invalid_path", 404: "unknown_upstream"}[r.status_code])
    attacker.assert_saw_nothing(secrets=[sh.SECRET])
    sh.assert_provider_saw_nothing(provider)


@pytest.mark.parametrize("suffix,path,query", [
    ("", "/api/public", ""),
    ("/a..b/c.d", "/api/public/a..b/c.d", ""),
    ("/.well-known/thing", "/api/public/.well-known/thing", ""),
    ("/v1/...", "/api/public/v1/...", ""),
    ("/files/report.2026.json", "/api/public/files/report.2026.json", ""),
    ("?q=1", "/api/public", "q=1"),
    ("/search?path=../../etc", "/api/public/search", "path=../../etc"),
])
def test_legit_names_with_dots_pass(gw, provider, attacker, suffix, path, query):
    """Dots inside names, dot-files and a query that mentions .. are fine: 200, and the
    provider gets exactly the path below /api/public."""
    r = send(gw.port, "GET", "/v1/proxy/x" + suffix)
    assert r.status_code == 200, describe(r)
    seen = provider.requests_seen()
    assert [(s["path"], s["query"]) for s in seen] == [(path, query)], seen
    attacker.assert_saw_nothing()


# ----------------------------------------------------------------------------- an upstream's own listen

LISTEN_ATTACKS = [
    "@127.0.0.1:{atk}/steal",
    "@127.0.0.1:{atk}",
    ":{atk}/x",
    ":{atk}",
    ".127.0.0.1:{atk}/x",
    "http://127.0.0.1:{atk}/x",
    "https://127.0.0.1:{atk}/x",
    "x",
    "*",
    "/../admin",
    "/a/../../admin",
    "/%2e%2e/admin",
    "/.%2E/admin",
    "/..%2fadmin",
    "/a/..%5c..%5cadmin",
]


@pytest.mark.parametrize("target", LISTEN_ATTACKS)
@pytest.mark.parametrize("upstream", ["lx", "lp"])
def test_listen_port_target_tricks(gw, provider, attacker, ports, upstream, target):
    """GET <target> on an upstream's own listen port: 400 invalid_path; the attacker never
    sees a request or the injected secret."""
    r = send(ports[upstream], "GET", target.format(atk=attacker.port))
    assert_invalid_path(r, provider, attacker)


@pytest.mark.parametrize("target", ["//127.0.0.1:{atk}/x", "/v1/charges?next=http://127.0.0.1:{atk}/x"])
def test_listen_port_odd_but_relative_targets(gw, provider, attacker, ports, target):
    """A target that starts with / stays on the configured host whatever it looks like:
    once may forward or refuse it, but the attacker sees nothing."""
    r = send(ports["lx"], "GET", target.format(atk=attacker.port))
    assert r.status_code in (200, 400), describe(r)
    if r.status_code == 400:
        assert_problem(r, 400, "invalid_path")
    attacker.assert_saw_nothing(secrets=[sh.SECRET])


def test_listen_port_forwards_a_plain_path(gw, provider, attacker, ports):
    """The listener still works: /v1/charges?expand=x reaches the provider with the secret."""
    r = send(ports["lx"], "GET", "/v1/charges?expand=x")
    assert r.status_code == 200, describe(r)
    seen = provider.requests_seen()
    assert [(s["path"], s["query"]) for s in seen] == [("/v1/charges", "expand=x")], seen
    assert seen[0]["headers"].get("authorization") == f"Bearer {sh.SECRET}"
    attacker.assert_saw_nothing()


def test_absolute_form_on_the_main_port(gw, provider, attacker):
    """GET http://127.0.0.1:ATTACKER/v1/proxy/lx/x (absolute-form, proxy style) on the main
    port: refused or not found, and never sent to the host it names."""
    r = send(gw.port, "GET", f"http://127.0.0.1:{attacker.port}/v1/proxy/lx/steal")
    assert r.status_code in (400, 404), describe(r)
    attacker.assert_saw_nothing(secrets=[sh.SECRET])
    sh.assert_provider_saw_nothing(provider)


@pytest.mark.parametrize("status", [301, 302, 303, 307, 308])
def test_upstream_redirect_is_not_followed(gw, provider, attacker, status):
    """The upstream answers a redirect to the attacker: once passes it back to the agent
    and never follows it (with the injected credentials) itself."""
    location = f"http://127.0.0.1:{attacker.port}/steal"
    r = gw.proxy("POST", "lx", "/v1/charges", key=new_key(), json={"amount": 1}, allow_redirects=False,
                 headers={"X-Fake-Status": str(status), "X-Fake-Header": f"Location: {location}"})
    assert r.status_code == status and r.headers.get("Location") == location, describe(r)
    assert provider.count() == 1
    attacker.assert_saw_nothing(secrets=[sh.SECRET])
