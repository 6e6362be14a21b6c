// intent.test.mjs — intentKey: the shared vectors (clients/testdata/intent_keys.json, which
// the Python client's suite checks too), what has no JSON form, and random parts compared
// with the Python client's `python3 -m once_client.intent_key`.
import { test } from "node:test";
import assert from "node:assert/strict";
import fs from "node:fs";
import path from "node:path";
import { spawnSync } from "node:child_process";
import { intentKey, canonicalJson } from "../dist/index.js";
import { REPO } from "./harness.mjs";

const vectors = JSON.parse(fs.readFileSync(path.join(REPO, "clients/testdata/intent_keys.json"), "utf8"));

test("the shared vectors: canonical form and key", () => {
  assert.ok(vectors.length >= 20);
  for (const v of vectors) {
    assert.equal(canonicalJson(v.parts), v.canonical, JSON.stringify(v.parts));
    assert.equal(intentKey(...v.parts), v.key, v.canonical);
    assert.match(v.key, /^[0-9a-f]{64}$/);
  }
});

test("member order does not matter; array order and types do", () => {
  assert.equal(intentKey("r", { a: 1, b: [1, 2] }), intentKey("r", { b: [1, 2], a: 1 }));
  assert.notEqual(intentKey("r", { b: [2, 1] }), intentKey("r", { b: [1, 2] }));
  assert.notEqual(intentKey("1"), intentKey(1));
  assert.notEqual(intentKey("a", "b"), intentKey(["a", "b"]));
  assert.equal(intentKey(-0), intentKey(0));
  assert.equal(intentKey(1.0), intentKey(1));
  assert.equal(intentKey({ d: new Date(0) }), intentKey({ d: "1970-01-01T00:00:00.000Z" }));
  assert.equal(canonicalJson(["\ud800", "\ud83d\ude00"]), '["\\ud800","😀"]');
});

test("what has no JSON form is a TypeError", () => {
  const bad = [NaN, Infinity, -Infinity, undefined, () => 1, 10n, Symbol("s"), new Map(), new Set(), { a: undefined }, [undefined]];
  for (const b of bad) assert.throws(() => intentKey("run", b), TypeError, String(b?.toString?.() ?? b));
  const cyclic = { a: 1 };
  cyclic.self = cyclic;
  assert.throws(() => intentKey(cyclic), TypeError);
  // The same object twice is no cycle.
  const shared = { x: 1 };
  assert.equal(canonicalJson([shared, shared]), '[{"x":1},{"x":1}]');
});

// A deterministic generator (xorshift), so a failure can be replayed.
function rng(seed) {
  let s = seed >>> 0 || 1;
  return () => {
    s ^= s << 13;
    s >>>= 0;
    s ^= s >>> 17;
    s ^= s << 5;
    s >>>= 0;
    return s / 4294967296;
  };
}

const ALPHABET = ["a", "Z", "0", " ", "é", "ß", "€", "日", "😀", "𐀀", "\u0000", "\u001f", "\n", "\t", '"', "\\", "/", "\u007f", "\u2028", "\ue000", "\ufb33", "\uffff", "\ud800", "\udfff", "\udc00"];

function randString(r) {
  let s = "";
  const n = Math.floor(r() * 6);
  for (let i = 0; i < n; i++) s += ALPHABET[Math.floor(r() * ALPHABET.length)];
  return s;
}

function randNumber(r) {
  switch (Math.floor(r() * 6)) {
    case 0:
      return Math.floor(r() * 2000) - 1000;
    case 1:
      return (r() - 0.5) * 10 ** Math.floor(r() * 40 - 20);
    case 2:
      return [0.1, 1e21, 1e-7, 123456789012345680000, 5e-324, 1.7976931348623157e308, 2 ** 53, 1e20][Math.floor(r() * 8)];
    case 3:
      return Math.round(r() * 1e6) / 100;
    case 4:
      return r() * 1e25;
    default:
      return -r() / 1e5;
  }
}

function randValue(r, depth) {
  const pick = Math.floor(r() * (depth > 2 ? 5 : 7));
  switch (pick) {
    case 0:
      return null;
    case 1:
      return r() < 0.5;
    case 2:
    case 3:
      return randNumber(r);
    case 4:
      return randString(r);
    case 5: {
      const n = Math.floor(r() * 4);
      return Array.from({ length: n }, () => randValue(r, depth + 1));
    }
    default: {
      const o = {};
      const n = Math.floor(r() * 5);
      for (let i = 0; i < n; i++) o[randString(r)] = randValue(r, depth + 1);
      return o;
    }
  }
}

// A double past 2**53 goes to Python as a float: JSON.stringify would write it as an
// integer, which Python reads as an int and (rightly) refuses.
function pythonJson(value) {
  return JSON.stringify(value, (_k, v) =>
    typeof v === "number" && Number.isInteger(v) && Math.abs(v) > 2 ** 53 ? `@@${v.toExponential()}@@` : v,
  ).replace(/"@@([^@]+)@@"/g, "$1");
}

const PY = { cwd: path.join(REPO, "clients/python"), encoding: "utf8" };

test("the Python client's command gives the same key", () => {
  const parts = ["run-1", "send_email", { to: "zoë@example.com", n: 1e21 }];
  const py = spawnSync("/usr/bin/python3", ["-m", "once_client.intent_key"], { ...PY, input: JSON.stringify(parts) });
  assert.equal(py.status, 0, `python3 -m once_client.intent_key (clients/python) failed: ${py.stderr}`);
  assert.equal(py.stdout.trim(), intentKey(...parts));
});

test("300 random parts give the Python client's key", () => {
  const r = rng(0x5eed32);
  const cases = Array.from({ length: 300 }, () => Array.from({ length: 1 + Math.floor(r() * 3) }, () => randValue(r, 0)));
  const script = "import json, sys\nfrom once_client import intent_key\nfor parts in json.load(sys.stdin):\n    print(intent_key(*parts))\n";
  const py = spawnSync("/usr/bin/python3", ["-c", script], { ...PY, input: pythonJson(cases) });
  assert.equal(py.status, 0, `python failed: ${py.stderr}`);
  const keys = py.stdout.trim().split("\n");
  assert.equal(keys.length, cases.length);
  cases.forEach((parts, i) => assert.equal(keys[i], intentKey(...parts), `parts ${pythonJson(parts)}, canonical ${canonicalJson(parts)}`));
});
