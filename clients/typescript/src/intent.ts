/*
 * intent.ts — the key of an intent: the SHA-256 of the RFC 8785 (JCS)
 * canonical JSON of its parts. The key must not depend on the process, the
 * language or the order a model wrote the arguments in, so the Python client
 * computes the same function (clients/testdata/intent_keys.json holds the
 * shared vectors both suites check).
 */
import { createHash } from "node:crypto";

/** A JSON value as intentKey accepts it. */
export type JsonValue = null | boolean | number | string | JsonValue[] | { [k: string]: JsonValue };

function reject(what: string, path: string): never {
  throw new TypeError(`intentKey: ${what} at ${path || "the top"} has no JSON form`);
}

// JSON.stringify of a string is exactly JCS's string form: short escapes for
// \b \t \n \f \r, \u00xx for other controls, a lone surrogate as \udxxx (so the
// Python client, whose str may hold one, writes the same), everything else as is.
function canonicalString(s: string): string {
  return JSON.stringify(s);
}

function canonicalInto(v: unknown, path: string, out: string[], seen: Set<object>): void {
  if (v === null) {
    out.push("null");
    return;
  }
  switch (typeof v) {
    case "boolean":
      out.push(v ? "true" : "false");
      return;
    case "number":
      if (!Number.isFinite(v)) reject(`the number ${v}`, path);
      // ES Number::toString is JCS's number form; -0 is written 0.
      out.push(Object.is(v, -0) ? "0" : String(v));
      return;
    case "string":
      out.push(canonicalString(v));
      return;
    case "object":
      break;
    default:
      reject(`a ${typeof v}`, path);
  }
  const o = v as Record<string, unknown>;
  if (typeof (o as { toJSON?: unknown }).toJSON === "function") {
    canonicalInto((o as { toJSON: () => unknown }).toJSON(), path, out, seen);
    return;
  }
  if (seen.has(o)) reject("a cycle", path);
  seen.add(o);
  if (Array.isArray(o)) {
    out.push("[");
    o.forEach((item, i) => {
      if (i) out.push(",");
      canonicalInto(item, `${path}[${i}]`, out, seen);
    });
    out.push("]");
  } else {
    const proto = Object.getPrototypeOf(o);
    if (proto !== Object.prototype && proto !== null) reject(`an instance of ${proto?.constructor?.name ?? "a class"}`, path);
    // Array.prototype.sort compares strings by UTF-16 code units: JCS's order.
    const names = Object.keys(o).sort();
    out.push("{");
    names.forEach((name, i) => {
      if (i) out.push(",");
      out.push(canonicalString(name), ":");
      canonicalInto(o[name], `${path}.${name}`, out, seen);
    });
    out.push("}");
  }
  seen.delete(o);
}

/** The RFC 8785 canonical JSON text of a value. TypeError for what JSON cannot say
 * (undefined, functions, symbols, bigints, NaN and infinities, cycles,
 * class instances without toJSON). */
export function canonicalJson(value: unknown): string {
  const out: string[] = [];
  canonicalInto(value, "", out, new Set());
  return out.join("");
}

/** The key of an intent: lower-case hex SHA-256 of canonicalJson([...parts]).
 * Give it what names the intent (a run or thread id, the tool's name, its arguments),
 * never an id that changes with each attempt (a tool-call id, a JSON-RPC id). */
export function intentKey(...parts: unknown[]): string {
  return createHash("sha256").update(canonicalJson(parts), "utf8").digest("hex");
}
