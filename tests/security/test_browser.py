"""Browsers: a web page the operator visits must not drive the gateway.

- A request whose Origin is not the gateway's own (http:// + the Host header as sent),
  `Origin: null` included, or with `Sec-Fetch-Site: cross-site`: 403 cross_origin,
  nothing forwarded. The page's weapons are the requests a browser sends without a
  preflight: a form POST (application/x-www-form-urlencoded) or a text/plain fetch.
- Without a tokens_file, a Host that is neither an IP literal nor `localhost`: 421
  misdirected_request (DNS rebinding: evil.example resolving to 127.0.0.1).
"""
import pytest

from gateway import assert_problem, describe, new_key
import security_harness as sh

TOKEN = "tok-browser-agent-5b7c9d1e3f"


@pytest.fixture(scope="module")
def gw(tmp_path_factory, provider_process):
    """No tokens. `open` passes POSTs without a key straight through (key_required = no),
    which is what a form could reach; `up` is a normal keyed upstream."""
    g = sh.launch(tmp_path_factory.mktemp("browser"), upstreams={
        "open": {"url": provider_process.url, "key_required": False},
        "up": {"url": provider_process.url}})
    yield g
    sh.finish(g)


FORMS = {
    "form": ("application/x-www-form-urlencoded", "to=%2B33123456789&text=pwned"),
    "text": ("text/plain", '{"to":"+33123456789","text":"pwned"}'),
}


def own(gw, host=None):
    return f"http://{host or f'127.0.0.1:{gw.port}'}"


# name -> gw -> headers. Each is a page of another origin.
CROSS = {
    "other-site": lambda gw: {"Origin": "http://evil.example"},
    "null": lambda gw: {"Origin": "null"},
    "other-port": lambda gw: {"Origin": f"http://127.0.0.1:{gw.port + 1 if gw.port < 65535 else 1}"},
    "https-scheme": lambda gw: {"Origin": f"https://127.0.0.1:{gw.port}"},
    "other-host-same-port": lambda gw: {"Host": f"localhost:{gw.port}", "Origin": own(gw)},
    "own-origin-as-prefix": lambda gw: {"Origin": own(gw) + ".evil.example"},
    "sec-fetch-site": lambda gw: {"Sec-Fetch-Site": "cross-site"},
}


def post_form(gw, form, headers, upstream="open", key=None):
    ctype, body = FORMS[form]
    return gw.proxy("POST", upstream, "/v1/messages", key=key, data=body,
                    headers=dict(headers, **{"Content-Type": ctype}))


@pytest.mark.parametrize("form", list(FORMS))
@pytest.mark.parametrize("attack", list(CROSS))
def test_cross_origin_post_to_the_proxy(gw, provider, attack, form):
    """A page of another origin POSTs a form / text to the proxy: 403 cross_origin,
    nothing reaches the provider."""
    r = post_form(gw, form, CROSS[attack](gw))
    assert_problem(r, 403, "cross_origin")
    sh.assert_provider_saw_nothing(provider)


def test_cross_origin_keyed_post(gw, provider):
    """Same with an Idempotency-Key on a keyed upstream: refused, and no row is left."""
    key = new_key()
    r = post_form(gw, "text", CROSS["other-site"](gw), upstream="up", key=key)
    assert_problem(r, 403, "cross_origin")
    sh.assert_provider_saw_nothing(provider)
    assert gw.action("up", key).status_code == 404


@pytest.mark.parametrize("method,path,body", [
    ("POST", "/v1/actions", '{"scope":"s","key":"k-cross"}'),
    ("POST", "/v1/actions/s/k-cross/resolve", '{"outcome":"completed"}'),
    ("GET", "/v1/actions", None),
    ("POST", "/v1/actions/s/k-cross/approve", "{}"),
    ("POST", "/v1/actions/s/k-cross/deny", "{}"),
    ("GET", "/v1/events?status=dead", None),
    ("POST", "/v1/events/inbox/e-cross/redeliver", None),
], ids=["reserve", "resolve", "list", "approve", "deny", "events", "redeliver"])
def test_cross_origin_actions_api(gw, method, path, body):
    """A page of another origin drives the actions API (text/plain, no preflight): 403."""
    r = gw.request(method, path, data=body, headers={"Origin": "http://evil.example",
                                                      "Content-Type": "text/plain"})
    assert_problem(r, 403, "cross_origin")


@pytest.mark.parametrize("headers", [
    lambda gw: {"Origin": own(gw)},
    lambda gw: {"Sec-Fetch-Site": "same-origin"},
    lambda gw: {"Sec-Fetch-Site": "none"},
    lambda gw: {"Origin": own(gw), "Sec-Fetch-Site": "same-origin"},
    lambda gw: {"Host": f"localhost:{gw.port}", "Origin": own(gw, f"localhost:{gw.port}")},
    lambda gw: {},
], ids=["same-origin", "sec-fetch-same-origin", "sec-fetch-none", "both", "localhost-origin", "no-origin"])
def test_same_origin_is_allowed(gw, provider, headers):
    """The gateway's own origin, and Sec-Fetch-Site same-origin / none, pass."""
    r = post_form(gw, "text", headers(gw))
    assert r.status_code == 200, describe(r)
    assert provider.count() == 1


# ----------------------------------------------------------------------------- DNS rebinding

REBOUND_HOSTS = ["evil.example:{port}", "evil.example", "127.0.0.1.nip.io:{port}", "localhost.evil.example:{port}",
                 "attacker.localhost:{port}", "0x7f000001.evil.example:{port}"]
LOCAL_HOSTS = ["127.0.0.1:{port}", "localhost:{port}", "[::1]:{port}", "127.0.0.1", "localhost",
               "127.0.0.2:{port}"]


@pytest.mark.parametrize("host", REBOUND_HOSTS)
def test_rebound_host_is_misdirected(gw, provider, host):
    """A page of evil.example whose name now resolves to 127.0.0.1 (same origin for the
    browser): 421 misdirected_request on the proxy and on the actions API."""
    h = {"Host": host.format(port=gw.port)}
    r = gw.proxy("POST", "up", "/v1/charges", key=new_key(), json={"amount": 1}, headers=h)
    assert_problem(r, 421, "misdirected_request")
    assert_problem(gw.get("/v1/actions", headers=h), 421, "misdirected_request")
    sh.assert_provider_saw_nothing(provider)


@pytest.mark.parametrize("host", LOCAL_HOSTS)
def test_local_host_names_pass(gw, provider, host):
    """IP literals and localhost, with or without a port, are served."""
    r = gw.proxy("POST", "up", "/v1/charges", key=new_key(), json={"amount": 1},
                 headers={"Host": host.format(port=gw.port)})
    assert r.status_code == 200, describe(r)
    assert provider.count() == 1


def test_host_not_checked_with_tokens(gateway, provider, tmp_path):
    """With a tokens_file (the gateway may sit behind a name), any Host is served."""
    tokens = sh.write_tokens(tmp_path / "tokens", [TOKEN])
    g = gateway(upstreams={"up": {"url": provider.url}}, server={"tokens_file": str(tokens)})
    r = g.proxy("POST", "up", "/v1/charges", key=new_key(), json={"amount": 1},
                headers=dict(sh.bearer(TOKEN), Host=f"once.internal.example:{g.port}"))
    assert r.status_code == 200, describe(r)


def test_console_cannot_be_framed_or_fed_foreign_script(gw):
    """The console's page, served to anyone (it holds no data), forbids every source but its
    own origin's script and style files, inline script included, and any framing (a page of
    another origin cannot overlay it to steal clicks)."""
    r = gw.request("GET", "/console")
    assert r.status_code == 200, describe(r)
    csp = r.headers.get("Content-Security-Policy", "")
    directives = {d.strip().split(" ")[0]: d.strip() for d in csp.split(";") if d.strip()}
    assert directives.get("default-src") == "default-src 'none'", csp
    assert directives.get("script-src") == "script-src 'self'", csp
    assert directives.get("frame-ancestors") == "frame-ancestors 'none'", csp
    assert "unsafe-inline" not in csp and "unsafe-eval" not in csp, csp
    assert r.headers.get("X-Frame-Options") == "DENY", describe(r)
    assert r.headers.get("X-Content-Type-Options") == "nosniff", describe(r)
    assert "Set-Cookie" not in r.headers, describe(r)
    assert "<script>" not in r.text.replace(" ", ""), "inline script in the console page"
