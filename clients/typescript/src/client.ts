/*
 * client.ts — the client of once's actions API, and effect(): the glue every
 * agent would otherwise write by hand around it. Reserve the intent's key
 * (waiting while another attempt holds it), run the effect while a timer
 * renews the lease, then complete with its JSON result, release on NotDone,
 * or mark the action unknown on any other error. The Python client
 * (clients/python) does the same with the same defaults.
 */
import {
  AwaitingApproval,
  Denied,
  InFlight,
  InvalidTransition,
  NotDone,
  OnceError,
  OutcomeUnknown,
  ServiceUnavailable,
  TransportError,
  errorFor,
} from "./errors.js";

/** The server's default lease, sent explicitly so renewals need no clock (seconds). */
const DEFAULT_LEASE = 10;
const POLL_FIRST = 50; // ms: first pause while a key is in flight, doubling up to POLL_MAX
const POLL_MAX = 1000;
const SETTLE_TRIES = 3; // complete/release/unknown are tried this often on no answer or a 503
const ERROR_MAX = 1000; // characters of an error kept as the action's error
const USER_AGENT = "once-client-typescript/0.1";

export interface OnceOptions {
  /** The gateway, e.g. http://127.0.0.1:7600. */
  url: string;
  /** The bearer token (none when the gateway runs without tokens). */
  token?: string;
  /** Seconds a reservation lives without news; renewed every lease/3 while an effect runs. Default 10. */
  lease?: number;
  /** Seconds for one HTTP request to once. Default 30. */
  timeout?: number;
  /** The fetch to use (default: the platform's). */
  fetch?: typeof fetch;
}

export interface EffectOptions {
  /** The actions API scope (1–64 of A-Z a-z 0-9 . _ -). */
  scope: string;
  /** The intent's key (1–255 printable ASCII; intentKey(...) gives one). */
  key: string;
  /** Seconds to wait while another attempt holds the key, then InFlight. Default 0. */
  wait?: number;
  /** This effect's lease in seconds (default: the client's). */
  lease?: number;
  /** JSON stored with the action for a person to read (keep secrets out). */
  request?: unknown;
  /** A fingerprint of the payload: a retry with another one is flagged fingerprintMismatch. */
  fingerprint?: string;
  /** The provider's id of the effect, from its result; recorded with it. */
  providerId?: (result: unknown) => string | undefined | null;
}

/** What the effect function is given. */
export interface EffectContext {
  scope: string;
  key: string;
  /** The attempt number of this reservation (1 for the first). */
  attempt: number;
  /** Aborted when the lease is lost (the action turned unknown, another attempt has it). */
  signal: AbortSignal;
}

/** What effect() did: ran the function now, or replayed an earlier attempt's result. */
export interface EffectOutcome<T> {
  result: T;
  replayed: boolean;
  attempt: number | null;
  providerId: string | null;
  fingerprintMismatch: boolean;
}

/** The answer of a reserve that lets the caller go on. */
export interface Reservation {
  status: "reserved" | "completed";
  key?: string;
  token?: string;
  attempt?: number;
  lease_expires_at?: string;
  result?: unknown;
  provider_id?: string | null;
  replayed?: boolean;
  fingerprint_mismatch?: boolean;
}

export interface ReserveOptions {
  request?: unknown;
  fingerprint?: string;
  lease?: number;
  wait?: number;
}

/** An action's record (GET /v1/actions/{scope}/{key}; docs/api.md). */
export type ActionRecord = Record<string, unknown> & { scope: string; key: string; state: string };

interface Answer {
  status: number;
  headers: Headers;
  body: unknown;
}

const sleep = (ms: number) => new Promise<void>((resolve) => setTimeout(resolve, ms));

function describe(e: unknown): string {
  const text = e instanceof Error ? (e.message ? `${e.name}: ${e.message}` : e.name) : String(e);
  return text.slice(0, ERROR_MAX);
}

/** value as it is recorded and replayed: its JSON round trip (undefined is null). */
function recorded(value: unknown): unknown {
  let text: string | undefined;
  try {
    text = JSON.stringify(value === undefined ? null : value, (_k, v) => {
      if (typeof v === "number" && !Number.isFinite(v)) throw new TypeError(`the number ${v}`);
      if (typeof v === "bigint") throw new TypeError("a bigint");
      return v;
    });
  } catch (e) {
    throw new TypeError(`the effect's result must have a JSON form: ${describe(e)}`);
  }
  return text === undefined ? null : JSON.parse(text);
}

/** The states an action is in after each settling call (unknown turns held). */
const SETTLED: Record<string, string[]> = {
  complete: ["completed"],
  release: ["released"],
  unknown: ["unknown", "held"],
};

/** Headers for a call through once's proxy: Idempotency-Key, and Prefer: wait=N (whole
 * seconds, at most 60) to wait for another attempt holding the key. */
export function proxyHeaders(key: string, options: { wait?: number } = {}): Record<string, string> {
  const h: Record<string, string> = { "Idempotency-Key": key };
  if (options.wait && options.wait > 0) h["Prefer"] = `wait=${Math.max(1, Math.min(60, Math.floor(options.wait)))}`;
  return h;
}

/** Once-Outcome of a proxied answer ("completed", "replayed", …), or null when the ledger was not involved. */
export type ProxyOutcome =
  | "completed"
  | "streaming"
  | "replayed"
  | "released"
  | "unknown"
  | "in_flight"
  | "held"
  | "not_stored"
  | "awaiting_approval"
  | "denied";

export interface ProxyOptions {
  /** The intent's key (sent as Idempotency-Key). */
  key?: string;
  /** Seconds to wait (Prefer: wait) for another attempt holding the key, or for a decision. */
  wait?: number;
}

/** A proxied answer with once's outcome of it. */
export type ProxyResponse = Response & { outcome: ProxyOutcome | null; replayed: boolean };

// The problem codes of the proxy's own answers (docs/api.md); an upstream's answer, a
// problem+json one included, is passed as it is.
const PROXY_CODES = new Set([
  "bad_request", "unauthorized", "forbidden", "not_allowed", "cross_origin", "misdirected_request",
  "unknown_upstream", "invalid_path", "ambiguous_path", "method_not_allowed", "key_required", "invalid_key",
  "key_field_missing", "body_too_large", "key_in_flight", "outcome_unknown", "response_not_stored",
  "payload_mismatch", "denied", "limit_exceeded", "upstream_unreachable", "response_too_large",
  "store_unavailable", "shutting_down", "upstream_failed",
]);

export class Once {
  readonly url: string;
  readonly token: string | undefined;
  readonly lease: number;
  readonly timeout: number;
  private readonly fetchImpl: typeof fetch;

  constructor(options: OnceOptions) {
    if (!options || typeof options.url !== "string") throw new TypeError("new Once({url, token}): url is required");
    this.url = options.url.replace(/\/+$/, "");
    this.token = options.token;
    this.lease = options.lease ?? DEFAULT_LEASE;
    this.timeout = options.timeout ?? 30;
    this.fetchImpl = options.fetch ?? fetch;
    if (!(this.lease > 0)) throw new RangeError("lease must be positive");
  }

  // ---- the HTTP calls ---------------------------------------------------------

  private async send(method: string, path: string, body?: unknown, headers?: Record<string, string>, timeout?: number): Promise<Answer> {
    const h: Record<string, string> = { Accept: "application/json", "User-Agent": USER_AGENT, ...headers };
    if (this.token) h["Authorization"] = `Bearer ${this.token}`;
    let payload: string | undefined;
    if (body !== undefined) {
      payload = JSON.stringify(body);
      h["Content-Type"] = "application/json";
    }
    let res: Response;
    let raw: string;
    try {
      res = await this.fetchImpl(this.url + path, {
        method,
        headers: h,
        body: payload,
        redirect: "manual",
        signal: AbortSignal.timeout(Math.ceil((timeout ?? this.timeout) * 1000)),
      });
      raw = await res.text();
    } catch (e) {
      throw new TransportError(`${method} ${path}: no answer from once (${describe(e)})`, 0, {}, new Headers(), { cause: e });
    }
    let parsed: unknown = null;
    if (raw) {
      try {
        parsed = JSON.parse(raw);
      } catch {
        parsed = null;
      }
    }
    return { status: res.status, headers: res.headers, body: parsed };
  }

  private async call(method: string, path: string, body: unknown, what: string, headers?: Record<string, string>, timeout?: number): Promise<Answer> {
    const a = await this.send(method, path, body, headers, timeout);
    if (a.status === 202)
      throw new AwaitingApproval(`${what}: the action waits for a decision`, a.status, (a.body ?? {}) as Record<string, unknown>, a.headers);
    if (a.status >= 200 && a.status < 300) return a;
    throw errorFor(a.status, a.body, a.headers, what);
  }

  private static leaseMs(lease: number): number {
    return Math.max(1, Math.round(lease * 1000));
  }

  /** POST /v1/actions. Resolves to a Reservation ("reserved" or "completed"); throws
   * InFlight (after waiting up to `wait` seconds for the other attempt), OutcomeUnknown /
   * Held, Denied, AwaitingApproval (each with the action's record), LimitExceeded,
   * NotAllowed, Unauthorized, … */
  async reserve(scope: string, key: string, options: ReserveOptions = {}): Promise<Reservation> {
    const deadline = Date.now() + Math.max(0, (options.wait ?? 0) * 1000);
    let pause = POLL_FIRST;
    for (;;) {
      try {
        return await this.reserveOnce(scope, key, options, deadline);
      } catch (e) {
        if (e instanceof InFlight) {
          const left = deadline - Date.now();
          if (left <= 0) {
            await this.attachRecord(e, scope, key);
            throw e;
          }
          await sleep(Math.min(pause, left));
          pause = Math.min(pause * 2, POLL_MAX);
          continue;
        }
        if (e instanceof OutcomeUnknown || e instanceof Denied || e instanceof AwaitingApproval) await this.attachRecord(e, scope, key);
        throw e;
      }
    }
  }

  private async reserveOnce(scope: string, key: string, options: ReserveOptions, deadline: number): Promise<Reservation> {
    const body: Record<string, unknown> = { scope, key, lease_ms: Once.leaseMs(options.lease ?? this.lease) };
    if (options.request !== undefined) body.request = options.request;
    if (options.fingerprint !== undefined) body.fingerprint = options.fingerprint;
    const left = (deadline - Date.now()) / 1000;
    // Read by gateways that wait on the actions API; others answer at once and the
    // client polls.
    const headers = left >= 1 ? { Prefer: `wait=${Math.min(60, Math.floor(left))}` } : undefined;
    const a = await this.call("POST", "/v1/actions", body, `reserve ${scope}/${key}`, headers, this.timeout + (headers ? left : 0));
    return (a.body ?? {}) as Reservation;
  }

  private async attachRecord(e: OnceError, scope: string, key: string): Promise<void> {
    e.scope = scope;
    e.key = key;
    try {
      e.record = await this.get(scope, key);
    } catch (err) {
      if (!(err instanceof OnceError)) throw err;
      e.record = null;
    }
  }

  /** complete/release/unknown: tried again on no answer or a 503, never on a 4xx. */
  private async settle(what: "complete" | "release" | "unknown", body: Record<string, unknown>): Promise<ActionRecord> {
    for (let i = 0; ; i++) {
      try {
        return (await this.call("POST", `/v1/actions/${what}`, body, `${what} ${body.scope}/${body.key}`)).body as ActionRecord;
      } catch (e) {
        if (e instanceof TransportError || e instanceof ServiceUnavailable) {
          if (i === SETTLE_TRIES - 1) throw e;
          await sleep(200 * (i + 1));
          continue;
        }
        // An answer lost on the way, then this retry: the first call may have settled
        // the action already.
        if (e instanceof InvalidTransition && i > 0) {
          const record = await this.get(String(body.scope), String(body.key));
          if (SETTLED[what].includes(record.state)) return record;
        }
        throw e;
      }
    }
  }

  /** POST /v1/actions/complete: the action was performed; result (JSON) is recorded. */
  complete(scope: string, key: string, token: string, result: unknown, providerId?: string | null): Promise<ActionRecord> {
    const body: Record<string, unknown> = { scope, key, token, result: result === undefined ? null : result };
    if (providerId != null) body.provider_id = providerId;
    return this.settle("complete", body);
  }

  /** POST /v1/actions/release: certainly not performed; the key is free. */
  release(scope: string, key: string, token: string, error?: string): Promise<ActionRecord> {
    return this.settle("release", error === undefined ? { scope, key, token } : { scope, key, token, error });
  }

  /** POST /v1/actions/unknown: it may have been performed; a person settles it. */
  unknown(scope: string, key: string, token: string, error?: string): Promise<ActionRecord> {
    return this.settle("unknown", error === undefined ? { scope, key, token } : { scope, key, token, error });
  }

  /** POST /v1/actions/renew: the work behind the reservation goes on for lease seconds more. */
  async renew(scope: string, key: string, token: string, lease?: number): Promise<{ lease_expires_at: string }> {
    const body = { scope, key, token, lease_ms: Once.leaseMs(lease ?? this.lease) };
    return (await this.call("POST", "/v1/actions/renew", body, `renew ${scope}/${key}`)).body as { lease_expires_at: string };
  }

  /** GET /v1/actions/{scope}/{key}: the action's record. */
  async get(scope: string, key: string): Promise<ActionRecord> {
    const path = `/v1/actions/${encodeURIComponent(scope)}/${encodeURIComponent(key)}`;
    return (await this.call("GET", path, undefined, `get ${scope}/${key}`)).body as ActionRecord;
  }

  // ---- effect -------------------------------------------------------------------

  /** Runs fn at most once for the key: reserve → fn → complete with its JSON result.
   * A completed key resolves to the recorded result without running fn. fn throwing
   * NotDone releases the key; any other error marks the action unknown, and is thrown
   * again. Resolves to the result as recorded (its JSON round trip). */
  async effect<T>(options: EffectOptions, fn: (ctx: EffectContext) => T | Promise<T>): Promise<T> {
    return (await this.run(options, fn)).result;
  }

  /** effect(), telling also whether the result was replayed. */
  async run<T>(options: EffectOptions, fn: (ctx: EffectContext) => T | Promise<T>): Promise<EffectOutcome<T>> {
    const { scope, key } = options;
    if (typeof key !== "string") throw new TypeError("effect: key must be a string (intentKey(...) gives one)");
    const lease = options.lease ?? this.lease;
    const res = await this.reserve(scope, key, { request: options.request, fingerprint: options.fingerprint, lease, wait: options.wait });
    if (res.status === "completed")
      return {
        result: res.result as T,
        replayed: true,
        attempt: null,
        providerId: res.provider_id ?? null,
        fingerprintMismatch: Boolean(res.fingerprint_mismatch),
      };
    const token = res.token as string;
    const lost = new AbortController();
    const renewer = this.renewEvery(scope, key, token, lease, lost);
    let value: T;
    try {
      value = await fn({ scope, key, attempt: res.attempt ?? 1, signal: lost.signal });
    } catch (e) {
      renewer.stop();
      await this.settleFailure(scope, key, token, e);
      throw e;
    }
    renewer.stop();
    let result: unknown;
    try {
      result = recorded(value);
    } catch (e) {
      await this.settleFailure(scope, key, token, e);
      throw e;
    }
    const providerId = options.providerId ? (options.providerId(result) ?? null) : null;
    await this.complete(scope, key, token, result, providerId);
    return { result: result as T, replayed: false, attempt: res.attempt ?? 1, providerId, fingerprintMismatch: false };
  }

  /** After fn threw: NotDone releases, anything else marks the action unknown. A failure
   * to tell once is attached to the error, which the caller throws. */
  private async settleFailure(scope: string, key: string, token: string, e: unknown): Promise<void> {
    try {
      if (e instanceof NotDone) await this.release(scope, key, token, describe(e));
      else await this.unknown(scope, key, token, describe(e));
    } catch (err) {
      if (!(err instanceof OnceError)) throw err;
      if (e && typeof e === "object") (e as { onceError?: OnceError }).onceError = err;
    }
  }

  /** Renews every lease/3 until stopped. A 4xx (the lease ran out, another attempt has
   * the key) stops it and aborts `lost`; no answer or a 503 is tried at the next tick. */
  private renewEvery(scope: string, key: string, token: string, lease: number, lost: AbortController) {
    let stopped = false;
    let timer: NodeJS.Timeout | undefined;
    const tick = async () => {
      if (stopped) return;
      try {
        await this.renew(scope, key, token, lease);
      } catch (e) {
        if (!(e instanceof TransportError || e instanceof ServiceUnavailable)) {
          lost.abort(e);
          return;
        }
      }
      if (!stopped) timer = setTimeout(tick, (lease * 1000) / 3);
    };
    timer = setTimeout(tick, (lease * 1000) / 3);
    return {
      stop() {
        stopped = true;
        clearTimeout(timer);
      },
    };
  }

  // ---- the proxy -------------------------------------------------------------------

  /** The URL of an upstream's path through once's proxy (a base URL for an SDK). */
  proxyUrl(upstream: string, path = ""): string {
    return `${this.url}/v1/proxy/${upstream}${path}`;
  }

  /** proxyHeaders(key) plus this client's Authorization. */
  proxyHeaders(key: string, options: { wait?: number } = {}): Record<string, string> {
    const h = proxyHeaders(key, options);
    if (this.token) h["Authorization"] = `Bearer ${this.token}`;
    return h;
  }

  /** fetch through once's proxy: upstream's path with the key as Idempotency-Key. Resolves
   * to the upstream's answer (or its replay) with `outcome` (Once-Outcome) and `replayed`.
   * once's own refusals are thrown as typed errors: 401, 403 not_allowed, 429
   * limit_exceeded, 409 key_in_flight / outcome_unknown (InFlight, OutcomeUnknown, Held),
   * 403 denied, 202 awaiting_approval, 503 store_unavailable, …; an upstream's own
   * 4xx or 5xx is resolved as it is. */
  async proxyFetch(upstream: string, path: string, init: RequestInit = {}, options: ProxyOptions = {}): Promise<ProxyResponse> {
    const headers = new Headers(init.headers);
    if (options.key !== undefined) {
      for (const [k, v] of Object.entries(proxyHeaders(options.key, { wait: options.wait }))) headers.set(k, v);
    }
    if (this.token && !headers.has("authorization")) headers.set("Authorization", `Bearer ${this.token}`);
    let res: Response;
    try {
      res = await this.fetchImpl(this.proxyUrl(upstream, path), { ...init, headers, redirect: "manual" });
    } catch (e) {
      throw new TransportError(`${init.method ?? "GET"} ${upstream}${path}: no answer from once (${describe(e)})`, 0, {}, new Headers(), { cause: e });
    }
    const outcome = res.headers.get("once-outcome") as ProxyOutcome | null;
    const what = `${init.method ?? "GET"} ${upstream}${path}`;
    if (outcome === "awaiting_approval") {
      const body = await res.json().catch(() => ({}));
      throw new AwaitingApproval(`${what}: the request waits for a decision`, res.status, body as Record<string, unknown>, res.headers);
    }
    const type = res.headers.get("content-type") ?? "";
    if (type.startsWith("application/problem+json") && outcome !== "completed" && outcome !== "streaming") {
      const body = await res.clone().json().catch(() => null);
      const code = body && typeof body === "object" ? (body as { code?: unknown }).code : undefined;
      if (typeof code === "string" && PROXY_CODES.has(code)) {
        const err = errorFor(res.status, body, res.headers, what);
        err.key = options.key;
        throw err;
      }
    }
    return Object.assign(res, { outcome, replayed: outcome === "replayed" });
  }
}
