import { clip as clipText, echoed as echoedText, visible } from '../shared/visible-text';

/**
 * The one error a token request can end in. `error` is the RFC 6749 §5.2 code
 * the token endpoint sent, or one of this client's own codes when there was no
 * usable answer: `network_error`, `timeout`, `invalid_response`,
 * `discovery_failed`, `invalid_metadata`. An answer without a code gets one
 * from its status: 401 `invalid_client` (RFC 6749 §5.2), 429
 * `temporarily_unavailable`, 5xx `server_error`, a redirect or any other
 * status `invalid_response`.
 */
export interface TokenEndpointErrorInit {
  status?: number;
  error: string;
  error_description?: string;
  retryAfter?: number;
  cause?: unknown;
}

const DISCOVERY_ERRORS = new Set(['discovery_failed', 'invalid_metadata']);

/** How many characters of the token endpoint's own text a message repeats: an answer may hold anything, and messages end up in logs. */
export const ECHOED_CHARS = 200;

/**
 * `text` cut to `max` characters with an ellipsis when longer (never half a
 * surrogate pair): lib/shared/visible-text.ts's, with this client's default.
 */
export function clip(text: string, max = ECHOED_CHARS): string {
  return clipText(text, max);
}

/**
 * Someone else's text (a token endpoint's, a store's) as a message of this
 * client repeats it: cut to `max` characters, then every control character
 * escaped (see visible() in lib/shared/visible-text.ts, the one the issuer's
 * log lines use too), so it stays one line in the caller's log.
 */
export function echoed(text: string, max = ECHOED_CHARS): string {
  return echoedText(text, max);
}

/** Marks an init whose `error_description` is the token endpoint's own text, not a sentence of this client's (see endpointError()). */
const FROM_ENDPOINT = Symbol('error_description from the token endpoint');

type Init = TokenEndpointErrorInit & { [FROM_ENDPOINT]?: boolean };

/** The errors whose error_description is the token endpoint's own text, for again(). */
const fromEndpoint = new WeakSet<TokenEndpointError>();

export class TokenEndpointError extends Error {
  readonly code = 'ERR_TOKEN_ENDPOINT';
  /** HTTP status of the token endpoint's answer; `undefined` when there was none. */
  readonly status: number | undefined;
  readonly error: string;
  readonly error_description: string | undefined;
  /** Seconds until this client sends the next token request for the same key. */
  readonly retryAfter: number | undefined;

  /**
   * The message repeats at most ECHOED_CHARS characters of `error` (a real
   * code is far shorter) and of a description that is the token endpoint's
   * own text; the `error` and `error_description` properties hold them whole.
   * Message and properties alike have every control character escaped (see
   * visible()): `error` may be the endpoint's text, and so may part of a
   * sentence of this client's own (the issuer or token_type an answer named).
   * RFC 6749 §5.2 allows no control character in `error` or
   * `error_description`, so a real answer loses nothing.
   */
  constructor(init: TokenEndpointErrorInit) {
    const where = init.status === undefined ? 'no answer' : `HTTP ${init.status}`;
    // discovery's errors come before any token request: said as such (its status is the metadata request's)
    const what = DISCOVERY_ERRORS.has(init.error) ? 'token endpoint discovery failed' : 'token request failed';
    const endpointText = (init as Init)[FROM_ENDPOINT] === true;
    const description = init.error_description && (endpointText ? echoed(init.error_description) : visible(init.error_description));
    super(`${what} (${where}): ${echoed(init.error)}${description ? `: ${description}` : ''}`, init.cause === undefined ? undefined : { cause: init.cause });
    this.name = 'TokenEndpointError';
    this.status = init.status;
    this.error = visible(init.error);
    this.error_description = init.error_description === undefined ? undefined : visible(init.error_description);
    this.retryAfter = init.retryAfter;
    if (endpointText) fromEndpoint.add(this);
  }

  /** The same failure, seen later: `retryAfter` is what is left of the wait. */
  again(retryAfter: number): TokenEndpointError {
    const init: Init = { status: this.status, error: this.error, error_description: this.error_description, retryAfter, cause: this };
    if (fromEndpoint.has(this)) init[FROM_ENDPOINT] = true;
    const copy = new TokenEndpointError(init);
    // the properties are escaped already: a message made again from them would be cut at another place
    copy.message = this.message;
    return copy;
  }

  /** A 4xx other than 408 and 429: asking again soon gets the same answer (bad credentials, scope, endpoint). */
  get permanent(): boolean {
    return this.status !== undefined && this.status >= 400 && this.status < 500 && this.status !== 408 && this.status !== 429;
  }
}

/** What every call rejects with once `close()` was called (and what calls waiting at that moment reject with). */
export class TokenClientClosedError extends Error {
  readonly code = 'ERR_TOKEN_CLIENT_CLOSED';
  constructor(options?: { cause?: unknown }) {
    super('the token client is closed', options);
    this.name = 'TokenClientClosedError';
  }
}

/**
 * The error of a token endpoint's error answer, its `error_description` the
 * endpoint's own text: the message carries at most ECHOED_CHARS characters
 * of it (and again() the same), the property all of it.
 */
export function endpointError(init: TokenEndpointErrorInit): TokenEndpointError {
  const marked: Init = { ...init, [FROM_ENDPOINT]: true };
  return new TokenEndpointError(marked);
}
