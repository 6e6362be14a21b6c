/*
 * errors.ts — every answer of once that is not "go ahead" or "done", as a
 * class: callers branch on the class (or on .code, the problem's stable code),
 * never on a message. The names are the Python client's (clients/python), so
 * one page of docs describes both.
 */

/** A problem+json body (RFC 9457) as once sends it. */
export interface Problem {
  type?: string;
  title?: string;
  status?: number;
  code?: string;
  detail?: string;
  [member: string]: unknown;
}

/** Throw it from an effect that certainly did nothing (the provider refused before
 * acting, a validation failed): the key is released, so a later attempt runs the
 * effect. Any other error marks the action unknown instead. effect() throws it again
 * after the release. */
export class NotDone extends Error {
  constructor(message = "not done", options?: { cause?: unknown }) {
    super(message, options);
    this.name = "NotDone";
  }
}

/** An answer of once that is not a success. status: the HTTP status (0 when nothing
 * was answered); code and detail: the problem's; problem: the whole body ({} when
 * none); record: for answers about one action, its record when it could be read. */
export class OnceError extends Error {
  readonly status: number;
  readonly code: string | undefined;
  readonly detail: string | undefined;
  readonly problem: Problem;
  readonly headers: Headers;
  scope?: string;
  key?: string;
  record?: Record<string, unknown> | null;

  constructor(message: string, status = 0, problem: Problem = {}, headers: Headers = new Headers(), options?: { cause?: unknown }) {
    super(message, options);
    this.name = new.target.name;
    this.status = status;
    this.problem = problem;
    this.code = typeof problem.code === "string" ? problem.code : undefined;
    this.detail = typeof problem.detail === "string" ? problem.detail : undefined;
    this.headers = headers;
  }

  /** Retry-After in seconds, when the answer had one. */
  get retryAfter(): number | undefined {
    const v = this.headers.get("retry-after");
    if (v === null || !/^\d+$/.test(v.trim())) return undefined;
    return Number(v.trim());
  }
}

/** once could not be reached, or its answer was cut or unreadable: whether the
 * request took effect is not known. */
export class TransportError extends OnceError {}
/** 400: a malformed request (invalid_key, invalid_scope, invalid_request, …). */
export class BadRequest extends OnceError {}
/** 401 unauthorized: no bearer token, or one once does not know. */
export class Unauthorized extends OnceError {}
/** 403 that is none of the subclasses (forbidden: an operator-only route). */
export class Forbidden extends OnceError {}
/** 403 not_allowed: the agent's grants do not cover this (docs/agents.md); nothing was stored or sent. */
export class NotAllowed extends Forbidden {}
/** 403 scope_reserved: the scope names an upstream of the gateway. */
export class ScopeReserved extends Forbidden {}
/** 403 denied: the action waited for approval and was denied (note says why). */
export class Denied extends Forbidden {
  get note(): string | undefined {
    return typeof this.problem.note === "string" ? this.problem.note : undefined;
  }
}
/** 404: no such action (or route). */
export class NotFound extends OnceError {}
/** 409 that is none of the subclasses. */
export class Conflict extends OnceError {}
/** 409 key_in_flight: another attempt holds the key and did not settle within the wait. */
export class InFlight extends Conflict {
  get leaseExpiresAt(): string | undefined {
    return typeof this.problem.lease_expires_at === "string" ? this.problem.lease_expires_at : undefined;
  }
}
/** 409 outcome_unknown: an earlier attempt may have performed the action; it is not run
 * again until a person (or a provider lookup) settles it. */
export class OutcomeUnknown extends Conflict {
  get state(): string | undefined {
    return typeof this.problem.state === "string" ? this.problem.state : undefined;
  }
  get reason(): string | undefined {
    return typeof this.problem.reason === "string" ? this.problem.reason : undefined;
  }
}
/** 409 outcome_unknown with state "held": waiting for a person (`once resolve`, the console). */
export class Held extends OutcomeUnknown {}
/** 409 stale_token: the token is not the current attempt's; nothing changed. */
export class StaleToken extends Conflict {}
/** 409 invalid_transition: the action's state does not allow this. */
export class InvalidTransition extends Conflict {}
/** 202: the action waits for a person's decision (the record's waits_for: "approval" or
 * "limit"). Nothing ran; try again once it is decided. */
export class AwaitingApproval extends OnceError {}
/** 429 limit_exceeded: past one of the agent's limits; retryAfter says when room comes
 * back (undefined when the request alone is more than the limit). */
export class LimitExceeded extends OnceError {}
/** 503 that is not store_unavailable (shutting_down, upstream_unavailable, …). */
export class ServiceUnavailable extends OnceError {}
/** 503 store_unavailable: the store could not record; nothing changed. */
export class StoreUnavailable extends ServiceUnavailable {}

type ErrorClass = new (message: string, status?: number, problem?: Problem, headers?: Headers) => OnceError;

const BY_CODE: Record<string, ErrorClass> = {
  unauthorized: Unauthorized,
  not_allowed: NotAllowed,
  scope_reserved: ScopeReserved,
  denied: Denied,
  key_in_flight: InFlight,
  stale_token: StaleToken,
  invalid_transition: InvalidTransition,
  limit_exceeded: LimitExceeded,
  store_unavailable: StoreUnavailable,
};

const BY_STATUS: Record<number, ErrorClass> = {
  400: BadRequest,
  401: Unauthorized,
  403: Forbidden,
  404: NotFound,
  409: Conflict,
  429: LimitExceeded,
  503: ServiceUnavailable,
};

/** The typed error of an answer: its status, parsed body and headers; `what` says
 * which request it answered. */
export function errorFor(status: number, body: unknown, headers: Headers, what: string): OnceError {
  const problem: Problem = body && typeof body === "object" && !Array.isArray(body) ? (body as Problem) : {};
  let cls: ErrorClass;
  if (problem.code === "outcome_unknown") cls = problem.state === "held" ? Held : OutcomeUnknown;
  else cls = (problem.code && BY_CODE[problem.code]) || BY_STATUS[status] || OnceError;
  const detail = problem.detail || problem.title || "no detail";
  return new cls(`${what}: ${detail} (${status}${problem.code ? " " + problem.code : ""})`, status, problem, headers);
}
