"""A provider that reads requests as leniently as real ones do: the second server of the
hardening attacks (tests/security/test_ambiguity.py).

It is an Attacker (a real HTTP server on 127.0.0.1 that records every byte) that:
- routes a path the way Python's WSGI servers, Go's net/http, nginx, Spring and Tomcat
  do between them: percent-decoded (%2F becomes a '/' too), '\\' read as '/', empty
  segments merged, ';params' cut from each segment, '.' and '..' resolved, a trailing
  '/' dropped, letters compared without case. `routed(req)` is that path, so a test can
  ask "did a request that the rule meant to stop reach the provider?";
- takes a bare CR as a line end when it reads header fields, as some parsers do, so a
  header smuggled behind one shows up as a field of its own;
- answers TRACE as RFC 9110 9.3.8 says: the request it received, as the body.
"""
import urllib.parse

from attacker import Attacker, _parse_one


def routed(target):
    """The path a lenient router takes target (raw, as received) to mean."""
    path = target.split("?", 1)[0]
    for _ in range(2):  # some decode twice
        path = urllib.parse.unquote(path, encoding="latin-1")
    path = path.replace("\\", "/").replace("\x00", "")
    out = []
    for seg in path.split("/"):
        seg = seg.split(";", 1)[0]
        if seg in ("", "."):
            continue
        if seg == "..":
            if out:
                out.pop()
            continue
        out.append(seg)
    return "/" + "/".join(out).lower()


class LenientProvider(Attacker):
    def _parse(self, buf):
        req, rest = _parse_one(buf, line_end=rb"\r\n|\r|\n")
        if req is not None:
            req["routed"] = routed(req["target"])
        return req, rest

    def _answer(self, req):
        if req["method"] == "TRACE":
            body, ctype = req["head"], b"message/http"
        else:
            body, ctype = b'{"provider":"did it"}', b"application/json"
        return (b"HTTP/1.1 200 OK\r\nContent-Type: " + ctype + b"\r\nContent-Length: %d\r\n\r\n" % len(body)
                + body)

    def seen(self):
        with self._lock:
            return list(self.requests)

    def routed_paths(self):
        return [(r["method"], r["routed"]) for r in self.seen()]

    def header_names(self):
        """Lower-case names of every header field of every request, as this provider read them."""
        return [n.lower() for r in self.seen() for n, _ in r["headers"]]
