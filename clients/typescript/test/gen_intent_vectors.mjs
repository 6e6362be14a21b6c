// gen_intent_vectors.mjs — writes clients/testdata/intent_keys.json, the vectors both
// clients' intent-key tests check (TypeScript: intent.test.mjs; Python: its own suite).
//
//   npm run build && node test/gen_intent_vectors.mjs
//
// Each case is written as JSON *text* so that values JSON.stringify cannot write survive
// into the file: -0.0, 1.0, 1e21 as the literals a Python json.loads reads as floats.
// Cases whose canonical form RFC 8785 itself gives carry it here (`rfc`), and the
// generator refuses to write the file if this implementation disagrees with the RFC.
// Integers beyond 2**53 are written as floats (1.2345678901234568e20): a JSON number is a
// double to JavaScript, while the Python client refuses a Python int it cannot hold exactly.
import fs from "node:fs";
import { canonicalJson, intentKey } from "../dist/intent.js";

const cases = [
  // scalars and empties
  { text: "[]" },
  { text: "[null]" },
  { text: "[true, false]" },
  { text: '[""]' },
  { text: "[{}, []]" },
  { text: '["run-1", "send_email", {}]' },
  // integers and floats in ES form
  { text: "[0, 1, -1, 42, 9007199254740991, -9007199254740991]" },
  { text: "[-0.0, 0.0, -0]" },
  { text: "[1.0, 100.0, 1.5, -2.50]" },
  { text: "[0.1, 0.2, 0.30000000000000004]" },
  { text: "[1e21, 1e20, 1E+21, 1.2345678901234568e20, 123456789012345680000.0]" },
  { text: "[1e-7, 1e-6, 0.000001, 0.0000001, 5e-324, 1.7976931348623157e308]" },
  { text: "[2.9514790517935283e20, 9007199254740992, 333333333.33333329, 4.50, 2e-3, 1e-27, 1E30]" },
  // strings: escapes, controls, non-ASCII, astral, what is not escaped
  { text: '["\\u0000\\u0001\\u0007\\b\\t\\n\\u000b\\f\\r\\u000e\\u001f", "\\u007f", "\\"", "\\\\", "/", "\\/"]' },
  { text: '["é", "€", "日本語", "😀", "\\ud83d\\ude00", "\\u2028\\u2029", "a\\u0000b"]' },
  // lone surrogates are escaped, as well-formed JSON.stringify does
  { text: '["\\ud800", "a\\udfffb", {"\\udc00": 1, "\\ud800": 2, "z": 3}]' },
  // members sorted by UTF-16 code units (astral-plane names sort before U+E000..U+FFFF)
  { text: '[{"b": 1, "a": 2, "A": 3, "": 4, "aa": 5, "ab": 6, "10": 7, "9": 8}]' },
  {
    text: '[{"\\u20ac":"Euro Sign","\\r":"Carriage Return","\\ufb33":"Hebrew Letter Dalet With Dagesh","1":"One","\\ud83d\\ude00":"Emoji: Grinning Face","\\u0080":"Control","\\u00f6":"Latin Small Letter O With Diaeresis"}]',
    rfc: '[{"\\r":"Carriage Return","1":"One","\u0080":"Control","\u00f6":"Latin Small Letter O With Diaeresis","\u20ac":"Euro Sign","\ud83d\ude00":"Emoji: Grinning Face","\ufb33":"Hebrew Letter Dalet With Dagesh"}]',
  },
  { text: '[{"\\ue000": "private use", "\\ud83d\\ude00": "astral", "\\uffff": "last BMP", "\\ud800\\udc00": "first astral"}]' },
  { text: '[{"é": 1, "e": 2, "f": 3, "z": 4, "\\u00e9t\\u00e9": 5}]' },
  // nesting
  { text: '[{"outer": {"z": [1, {"y": null, "x": [true, {"w": "v"}]}], "a": {}}, "list": [[], [[]], {}]}]' },
  { text: '["thread-9", "book_flight", {"to": "LIS", "from": "BER", "passengers": [{"name": "Zoë", "age": 31}, {"name": "Ana", "age": 2}], "flex": false, "price": 129.9}]' },
  // RFC 8785 section 3.2.2's example
  {
    text: '[{"numbers": [333333333.33333329, 1E30, 4.50, 2e-3, 0.000000000000000000000000001], "string": "\\u20ac$\\u000F\\u000aA\'\\u0042\\u0022\\u005c\\\\\\"\\/", "literals": [null, true, false]}]',
    rfc: '[{"literals":[null,true,false],"numbers":[333333333.3333333,1e+30,4.5,0.002,1e-27],"string":"€$\\u000f\\nA\'B\\"\\\\\\\\\\"/"}]',
  },
];

const out = [];
for (const c of cases) {
  const parts = JSON.parse(c.text);
  const canonical = canonicalJson(parts);
  if (c.rfc !== undefined && canonical !== c.rfc) {
    console.error(`RFC 8785 disagrees:\n  got  ${canonical}\n  want ${c.rfc}`);
    process.exit(1);
  }
  out.push(`  {"parts": ${c.text},\n   "canonical": ${JSON.stringify(canonical)},\n   "key": "${intentKey(...parts)}"}`);
}
const file = new URL("../../testdata/intent_keys.json", import.meta.url);
fs.writeFileSync(file, `[\n${out.join(",\n")}\n]\n`);
console.log(`wrote ${out.length} vectors to ${file.pathname}`);
