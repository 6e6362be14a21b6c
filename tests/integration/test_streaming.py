"""Streamed answers (`stream: true`, text/event-stream) through the proxy, against
docs/api.md "Streamed answers": relayed live, recorded, replayed byte for byte; a cut
stream is unknown; a caller that hangs up still leaves the whole answer for its retry;
a stream over max_response is completed without a body. In every case the provider's
effect count is 1.

The provider is tests/fakes/provider.py (its X-Fake-Stream-* headers shape the stream);
the official openai npm client (tests/clients) is driven as an agent would drive it.

Run: ONCE_BIN=build/me/once /usr/bin/python3 -m pytest -q tests/integration/test_streaming.py
"""
import json
import os
import shutil
import socket
import subprocess
import threading
import time
from pathlib import Path

import pytest
import requests

from gateway import Gateway, assert_problem, describe, new_key, outcome, require_serve

CLIENTS = Path(__file__).resolve().parents[1] / "clients"
CHAT = "/chat/completions"


def chat_body(**extra):
    return dict({"model": "fake", "stream": True, "messages": [{"role": "user", "content": "hi"}]}, **extra)


@pytest.fixture(scope="module")
def gw(tmp_path_factory, provider, store_kind):
    require_serve()
    base = {"url": provider.url, "timeout": "20s", "key_required": True, "max_response": "64KiB"}
    ups = {
        "llm": dict(base),
        "tiny": dict(base, max_response="2KiB"),
        "open": dict(base, key_required=False),
    }
    g = Gateway(tmp_path_factory.mktemp("streaming"), ups, store_kind=store_kind)
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


def stream_post(gw, upstream, key, body=None, headers=None, path=CHAT, timeout=30):
    h = {"Content-Type": "application/json"}
    h.update(headers or {})
    return gw.proxy("POST", upstream, path, key=key, headers=h, data=json.dumps(body or chat_body()),
                    stream=True, timeout=timeout)


def read_all(r):
    """The body as it came, with the time of its first piece."""
    first, parts = None, []
    for piece in r.iter_content(chunk_size=None):
        if piece and first is None:
            first = time.time()
        parts.append(piece)
    return b"".join(parts), first


def effect(provider):
    effects = provider.effects()
    assert len(effects) == 1, effects
    return effects[0]


def state_of(gw, scope, key):
    r = gw.action(scope, key)
    assert r.status_code == 200, describe(r)
    return r.json()


def wait_state(gw, scope, key, want, timeout=15):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        got = state_of(gw, scope, key)
        if got["state"] == want:
            return got
        time.sleep(0.05)
    raise AssertionError(f"{scope}/{key} is {got['state']}, not {want}: {got}")


def test_first_event_arrives_long_before_the_last_is_sent(gw, provider):
    key = new_key("live")
    r = stream_post(gw, "llm", key, headers={"X-Fake-Stream-Frames": "6", "X-Fake-Stream-Gap-Ms": "300"})
    assert r.status_code == 200, describe(r)
    assert r.headers["Content-Type"] == "text/event-stream"
    assert outcome(r) == "streaming"
    body, first = read_all(r)
    eff = effect(provider)
    # Five gaps of 300 ms lie between the first and the last event: the first must
    # be here well before the provider wrote the last one.
    assert first < eff["stream_last_sent"] - 1.0, (first, eff["stream_last_sent"])
    assert body.endswith(b"data: [DONE]\n\n")
    assert b"generation 1, part 6." in body
    assert wait_state(gw, "llm", key, "completed")["response"]["status"] == 200


def test_replay_is_byte_for_byte(gw, provider):
    key = new_key("replay")
    first = stream_post(gw, "llm", key, body=chat_body(stream_options={"include_usage": True}))
    body1, _ = read_all(first)
    wait_state(gw, "llm", key, "completed")
    again = stream_post(gw, "llm", key, body=chat_body(stream_options={"include_usage": True}))
    body2, _ = read_all(again)
    assert again.status_code == 200, describe(again)
    assert body2 == body1
    assert again.headers["Content-Type"] == "text/event-stream"
    assert again.headers["Idempotent-Replayed"] == "true"
    assert outcome(again) == "replayed"
    assert provider.count() == 1


def test_trailer_says_completed_after_the_record(gw, provider):
    """The last chunk carries Once-Outcome: completed, and comes after the outcome is
    durable: a retry sent the moment the stream ended is a replay, not a 409."""
    key = new_key("trailer")
    body = json.dumps(chat_body()).encode()
    req = (f"POST /v1/proxy/llm{CHAT} HTTP/1.1\r\nHost: 127.0.0.1\r\nIdempotency-Key: {key}\r\n"
           f"Content-Type: application/json\r\nContent-Length: {len(body)}\r\nConnection: close\r\n\r\n").encode()
    s = socket.create_connection(("127.0.0.1", gw.port), timeout=10)
    s.sendall(req + body)
    buf = b""
    while True:
        piece = s.recv(65536)
        if not piece:
            break
        buf += piece
    s.close()
    head, _, rest = buf.partition(b"\r\n\r\n")
    assert b"transfer-encoding: chunked" in head.lower(), head
    assert rest.endswith(b"0\r\nOnce-Outcome: completed\r\n\r\n"), rest[-200:]
    r = gw.proxy("POST", "llm", CHAT, key=key, data=body, headers={"Content-Type": "application/json"})
    assert r.status_code == 200 and outcome(r) == "replayed", describe(r)
    assert provider.count() == 1


def test_caller_hangs_up_then_retry_gets_the_whole_stream(gw, provider):
    key = new_key("hangup")
    hdr = {"X-Fake-Stream-Frames": "8", "X-Fake-Stream-Gap-Ms": "150"}
    r = stream_post(gw, "llm", key, headers=hdr)
    first = next(r.iter_content(chunk_size=None))
    assert first.startswith(b"data: ")
    r.close()  # the caller is gone, two events in
    # once reads the upstream to the end and records it all.
    got = wait_state(gw, "llm", key, "completed", timeout=20)
    assert got["response"]["status"] == 200
    again = stream_post(gw, "llm", key, headers=hdr)
    body, _ = read_all(again)
    assert outcome(again) == "replayed", describe(again)
    assert b"generation 1, part 8." in body and body.endswith(b"data: [DONE]\n\n")
    assert provider.count() == 1


def test_retry_while_streaming_is_in_flight_then_waits_for_the_whole(gw, provider):
    key = new_key("inflight")
    hdr = {"X-Fake-Stream-Frames": "5", "X-Fake-Stream-Gap-Ms": "200"}
    live = stream_post(gw, "llm", key, headers=hdr)
    pieces = live.iter_content(chunk_size=None)
    head = next(pieces)
    busy = gw.proxy("POST", "llm", CHAT, key=key, json=chat_body())
    assert_problem(busy, 409, "key_in_flight")
    waited = {}

    def wait():
        w = stream_post(gw, "llm", key, headers=dict(hdr, Prefer="wait=15"))
        waited["r"], (waited["body"], _) = w, read_all(w)

    t = threading.Thread(target=wait)
    t.start()
    body = head + b"".join(pieces)
    t.join(20)
    assert waited["r"].status_code == 200 and outcome(waited["r"]) == "replayed", describe(waited["r"])
    assert waited["body"] == body
    assert provider.count() == 1


def test_cut_stream_is_unknown_and_never_resent(gw, provider):
    key = new_key("cut")
    r = stream_post(gw, "llm", key, headers={"X-Fake-Stream-Frames": "6", "X-Fake-Stream-Cut-After": "2"})
    assert r.status_code == 200
    got = b""
    # The caller sees the frames it got, then an abrupt end: never a made-up ending.
    with pytest.raises(requests.exceptions.ChunkedEncodingError):
        for piece in r.iter_content(chunk_size=None):
            got += piece
    assert b"part 2." in got and b"[DONE]" not in got
    st = wait_state(gw, "llm", key, "unknown")
    assert "cut after" in (st.get("error") or ""), st
    again = gw.proxy("POST", "llm", CHAT, key=key, json=chat_body())
    assert_problem(again, 409, "outcome_unknown")
    assert provider.count() == 1


@pytest.mark.parametrize("path,shape", [(CHAT, "openai-chat"), ("/v1/responses", "openai-responses"),
                                        ("/v1/messages", "anthropic")])
def test_clean_end_without_the_final_event_is_unknown(gw, provider, path, shape):
    """The transfer ended cleanly, but the stream's own last event never came: the
    provider may have billed a generation the caller never saw whole."""
    key = new_key("nofinal")
    r = stream_post(gw, "llm", key, path=path, headers={"X-Fake-Stream-No-Final": "1"})
    body, _ = read_all(r)  # ended as the upstream ended it: cleanly, nothing added
    assert b"part 5." in body
    st = wait_state(gw, "llm", key, "unknown")
    assert shape in st["error"] and "without its final event" in st["error"], st
    assert provider.count() == 1


@pytest.mark.parametrize("path,final", [("/v1/responses", b"response.completed"), ("/v1/messages", b"message_stop")])
def test_other_shapes_complete_and_replay(gw, provider, path, final):
    key = new_key("shape")
    first, _ = read_all(stream_post(gw, "llm", key, path=path))
    assert final in first
    wait_state(gw, "llm", key, "completed")
    again, _ = read_all(stream_post(gw, "llm", key, path=path))
    assert again == first
    assert provider.count() == 1


def test_stream_longer_than_max_response_is_completed_without_a_body(gw, provider):
    key = new_key("long")
    hdr = {"X-Fake-Stream-Frames": "20", "X-Fake-Stream-Frame-Bytes": "400"}
    r = stream_post(gw, "tiny", key, headers=hdr)
    body, _ = read_all(r)
    assert r.status_code == 200
    assert b"generation 1, part 20." in body and body.endswith(b"data: [DONE]\n\n")  # passed through whole
    assert len(body) > 8 * 1024
    st = wait_state(gw, "tiny", key, "completed")
    assert st["response"]["body_not_stored"] == len(body), st["response"]
    again = gw.proxy("POST", "tiny", CHAT, key=key, json=chat_body(), headers=hdr)
    p = assert_problem(again, 409, "response_not_stored")
    assert p["state"] == "completed" and p["bytes"] == len(body)
    assert provider.count() == 1


def test_error_status_stream_is_answered_as_today(gw, provider):
    """An event stream with an unknown_on status is not relayed live: the action is
    unknown and the answer is the upstream's, whole."""
    key = new_key("err")
    r = stream_post(gw, "llm", key, headers={"X-Fake-Status": "500"})
    body, _ = read_all(r)
    assert r.status_code == 500 and outcome(r) == "unknown", describe(r)
    assert body.endswith(b"data: [DONE]\n\n")
    assert provider.count() == 1


def test_pass_through_stream_is_relayed_live(gw, provider):
    r = gw.proxy("POST", "open", CHAT, json=chat_body(),
                 headers={"X-Fake-Stream-Frames": "4", "X-Fake-Stream-Gap-Ms": "300"}, stream=True, timeout=30)
    body, first = read_all(r)
    assert r.status_code == 200 and "Once-Outcome" not in r.headers
    assert first < effect(provider)["stream_last_sent"] - 0.5
    assert body.endswith(b"data: [DONE]\n\n")


def test_tokens_saved_count_replayed_streams(gw, provider):
    def saved():
        for line in gw.get("/metrics").text.splitlines():
            if line.startswith('once_llm_tokens_saved_total{scope="llm"}'):
                return int(float(line.split()[-1]))
        return 0

    key = new_key("tokens")
    body = chat_body(stream_options={"include_usage": True})
    read_all(stream_post(gw, "llm", key, body=body, headers={"X-Fake-Total-Tokens": "321"}))
    wait_state(gw, "llm", key, "completed")
    before = saved()
    read_all(stream_post(gw, "llm", key, body=body))
    read_all(stream_post(gw, "llm", key, body=body))
    assert saved() == before + 642


# ---- the official openai npm client ---------------------------------------------------

@pytest.fixture(scope="module")
def openai_client():
    node = shutil.which("node")
    if not node or not (CLIENTS / "node_modules" / "openai").is_dir():
        pytest.fail("the openai npm client is not installed: run `npm ci --prefix tests/clients` "
                    "(scripts/test does)")
    return node


def run_openai(node, gw, key, abort_after=None):
    argv = [node, str(CLIENTS / "openai_stream.mjs"), gw.url + "/v1/proxy/llm", "sk-agent-never-sees-the-real-key",
            key]
    if abort_after:
        argv.append(str(abort_after))
    p = subprocess.run(argv, capture_output=True, text=True, timeout=60)
    lines = [json.loads(ln) for ln in p.stdout.splitlines() if ln.strip()]
    assert lines, p.stderr
    return lines


def test_openai_client_streams_through_once(gw, provider, openai_client):
    key = new_key("sdk")
    lines = run_openai(openai_client, gw, key)
    assert lines[-1].get("done"), lines
    assert "generation 1, part 5." in lines[-1]["text"]
    assert lines[-1]["usage"]["total_tokens"] == 123
    eff = effect(provider)
    assert eff["idempotency_key"] is None  # the key is once's; the SDK's header is not forwarded
    # The replay, through the same client: the same text, no second generation.
    again = run_openai(openai_client, gw, key)
    assert again[-1]["text"] == lines[-1]["text"]
    assert provider.count() == 1


def test_openai_client_hangs_up_and_its_retry_gets_the_whole_answer(gw, provider, openai_client):
    key = new_key("sdk-abort")
    provider.reset()
    lines = run_openai(openai_client, gw, key, abort_after=1)
    assert lines[-1].get("aborted"), lines
    wait_state(gw, "llm", key, "completed", timeout=20)
    again = run_openai(openai_client, gw, key)
    assert again[-1].get("done") and "part 5." in again[-1]["text"], again
    assert provider.count() == 1
