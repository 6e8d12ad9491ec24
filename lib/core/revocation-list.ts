/**
 * The signed revocation list: how standalone verifiers (requireBearer with a
 * remote JWKS) learn of revocations without a round trip per request.
 *
 * The issuer signs its RevocationState's snapshot as a JWT (`typ:
 * revocation-list+jwt`, the current signing key, short `exp`) and serves it
 * with an ETag. A verifier polls it (default every 10 s, conditional with
 * If-None-Match), checks it against the JWKS keys it already has, merges it
 * into its own RevocationState, and checks tokens with in-memory lookups.
 *
 * Bound: a revocation reaches a standalone verifier within one poll interval
 * plus one fetch (≤ intervalMs + timeoutMs: 10 s + 5 s by default; keep the
 * sum ≤ 30 s). The issuer re-signs as soon as its state changes.
 *
 * The issuer cannot be reached: the verifier keeps trusting the last list it
 * verified for `maxStaleMs` (default 5 minutes) after its last successful
 * poll (a 304 counts: the issuer confirmed the list is current; not for a
 * list past its `exp`, which the issuer would have re-signed). Past that,
 * and before a first list was ever verified, it fails closed: isRevoked()
 * throws TemporarilyUnavailableError (503 temporarily_unavailable with
 * Retry-After), because it can no longer tell a revoked token from a live
 * one. `failOpen: true` instead keeps accepting with the last list known
 * (revocations made meanwhile are missed until the issuer is back); choose it
 * only where availability matters more than revocation.
 */
import { createHash } from 'node:crypto';
import { gzipSync } from 'node:zlib';
import jwt from 'jsonwebtoken';
import { TemporarilyUnavailableError } from '../errors';
import { readCapped } from '../shared/http-body';
import { SIGNING_ALGORITHMS, type KeyResolver, type LoadedKey } from './keys';
import type { RevocationSnapshot } from '../stores/types';
import type { RevocableClaims, RevocationReason, RevocationState } from './revocation';

export const REVOCATION_LIST_TYP = 'revocation-list+jwt';
/** Media type to serve the list with. */
export const REVOCATION_LIST_MEDIA_TYPE = 'application/revocation-list+jwt';

export interface RevocationListClaims extends RevocationSnapshot {
  iss: string;
  /** Epoch seconds. */
  iat: number;
  exp: number;
  /**
   * The kids the issuer published in its JWKS when it signed (absent from
   * lists of earlier versions). A verifier holding a key the list does not
   * name fetches the JWKS again: a signing key revoked (`keys revoke`)
   * reaches it within a poll, not at its next JWKS refresh.
   */
  kids?: string[];
}

const ALLOWED = new Set<string>(SIGNING_ALGORITHMS);

/** Signs the state's snapshot with the issuer's signing key. `ttl` in seconds (default 300). */
export function signRevocationList(
  state: Pick<RevocationState, 'snapshot'> | RevocationSnapshot,
  key: LoadedKey,
  opts: { issuer: string; now: number; ttl?: number; kids?: readonly string[] },
): string {
  if (!key.privateKey) throw new Error(`key ${key.kid} cannot sign`);
  const snapshot = 'snapshot' in state ? state.snapshot() : state;
  const iat = Math.floor(opts.now / 1000);
  const claims: RevocationListClaims = { iss: opts.issuer, iat, exp: iat + (opts.ttl ?? 300), tokens: snapshot.tokens, clients: snapshot.clients };
  if (opts.kids) claims.kids = [...opts.kids];
  return jwt.sign(claims, key.privateKey, {
    algorithm: key.alg as jwt.Algorithm,
    header: { alg: key.alg as jwt.Algorithm, typ: REVOCATION_LIST_TYP, kid: key.kid },
  });
}

/** Why a list was refused; never a user-facing error. */
export class RevocationListError extends Error {
  constructor(message: string) {
    super(message);
    this.name = 'RevocationListError';
  }
}

function refuse(message: string): never {
  throw new RevocationListError(message);
}

function checkSnapshot(payload: Record<string, unknown>): RevocationSnapshot {
  const { tokens, clients } = payload;
  if (!Array.isArray(tokens) || !Array.isArray(clients)) refuse('tokens and clients must be arrays');
  for (const t of tokens as unknown[]) {
    const e = t as Record<string, unknown>;
    if (!e || typeof e.jti !== 'string' || typeof e.client_id !== 'string' || typeof e.exp !== 'number') refuse('malformed token entry');
  }
  for (const c of clients as unknown[]) {
    const e = c as Record<string, unknown>;
    if (!e || typeof e.client_id !== 'string' || !Number.isSafeInteger(e.generation) || (e.generation as number) < 0) refuse('malformed client entry');
    if (e.revoked_at !== null && typeof e.revoked_at !== 'number') refuse('malformed client entry');
  }
  return { tokens: tokens as RevocationSnapshot['tokens'], clients: clients as RevocationSnapshot['clients'] };
}

/** Verifies a list: `typ`, an allowlisted algorithm, a known kid, the signature, `iss`, `exp`. */
export async function verifyRevocationList(
  jws: string,
  keys: KeyResolver,
  opts: { issuer: string; now: number; clockTolerance?: number },
): Promise<RevocationListClaims> {
  const decoded = jwt.decode(jws, { complete: true });
  if (!decoded || typeof decoded.payload !== 'object') refuse('not a JWS');
  const { header } = decoded;
  if (header.typ !== REVOCATION_LIST_TYP) refuse(`typ ${typeof header.typ === 'string' ? header.typ : `(${typeof header.typ})`} is not ${REVOCATION_LIST_TYP}`);
  if (!ALLOWED.has(header.alg)) refuse(`algorithm ${header.alg} is not allowed`);
  if (typeof header.kid !== 'string') refuse('no kid in the header');
  const key = await keys.resolve(header.kid);
  if (!key) refuse(`unknown kid ${header.kid}`);
  if (key.alg !== header.alg) refuse(`kid ${header.kid} is a ${key.alg} key`);
  let payload: Record<string, unknown>;
  try {
    payload = jwt.verify(jws, key.publicKey, {
      algorithms: [key.alg as jwt.Algorithm],
      issuer: opts.issuer,
      clockTolerance: opts.clockTolerance ?? 0,
      clockTimestamp: Math.floor(opts.now / 1000),
    }) as Record<string, unknown>;
  } catch (err) {
    return refuse(err instanceof Error ? err.message : 'verification failed');
  }
  if (typeof payload.iat !== 'number' || typeof payload.exp !== 'number') refuse('iat and exp must be numbers');
  const { kids } = payload;
  if (kids !== undefined && (!Array.isArray(kids) || kids.some((k) => typeof k !== 'string'))) refuse('kids must be an array of strings');
  return { iss: opts.issuer, iat: payload.iat, exp: payload.exp, ...checkSnapshot(payload), ...(kids !== undefined && { kids: kids as string[] }) };
}

/** Lists shorter than this (bytes) are served as they are: gzip would save little. */
export const GZIP_MIN_BYTES = 1024;

/** The ETag of a list's gzip representation, from the ETag of the list as it is. */
export function gzipEtag(etag: string): string {
  return `${etag.slice(0, -1)}-gz"`;
}

/**
 * The issuer's side: the current signed list and its ETag, re-signed only
 * when the state changed, the signing key or the published keys changed, or
 * half its lifetime passed. What the list route serves (`ETag`, 304 on a matching
 * If-None-Match).
 */
export class PublishedRevocationList {
  private cached: { body: string; etag: string; version: number; kid: string; kids: string; signedAt: number; gzip?: { body: Buffer; etag: string } | null } | undefined;

  constructor(
    private readonly options: {
      state: RevocationState;
      issuer: string;
      /** The key that signs now (e.g. `() => keyRing.current()`). */
      signingKey: () => LoadedKey;
      /** The kids the issuer's JWKS publishes now, which the list names (a change re-signs it). */
      publishedKids?: () => readonly string[];
      /** List lifetime in seconds (default 300). */
      ttl?: number;
      now?: () => number;
    },
  ) {}

  current(): { body: string; etag: string } {
    const now = (this.options.now ?? Date.now)();
    const key = this.options.signingKey();
    const ttlMs = (this.options.ttl ?? 300) * 1000;
    const kids = this.options.publishedKids?.();
    const kidsText = kids ? kids.join(' ') : '';
    const c = this.cached;
    if (c && c.version === this.options.state.version && c.kid === key.kid && c.kids === kidsText && now - c.signedAt < ttlMs / 2) return c;
    const version = this.options.state.version;
    const body = signRevocationList(this.options.state, key, { issuer: this.options.issuer, now, ttl: this.options.ttl, kids });
    const etag = `"${createHash('sha256').update(body).digest('base64url').slice(0, 27)}"`;
    this.cached = { body, etag, version, kid: key.kid, kids: kidsText, signedAt: now };
    return this.cached;
  }

  /**
   * The current list gzipped (compressed once per signed list), with an ETag
   * of its own (the identity ETag + `-gz`: a strong validator names one
   * representation); undefined when the list is shorter than GZIP_MIN_BYTES.
   * The JWS is base64url of JSON with many repeated keys: 10,000 entries
   * take 1.28 MB as they are and 0.32 MB gzipped.
   */
  gzipped(): { body: Buffer; etag: string } | undefined {
    this.current();
    const c = this.cached!;
    if (c.gzip === undefined) {
      c.gzip = Buffer.byteLength(c.body) < GZIP_MIN_BYTES ? null : { body: gzipSync(c.body), etag: gzipEtag(c.etag) };
    }
    return c.gzip ?? undefined;
  }
}

export interface RevocationListPollerOptions {
  /** Where the issuer serves the list. */
  url: string;
  issuer: string;
  /** The verifier's keys (the remote JWKS it already has). */
  keys: KeyResolver;
  /** Receives the lists; the same state the verifier checks. */
  state: RevocationState;
  /** Poll period, ms (default 10 000). */
  intervalMs?: number;
  /** One fetch's time limit, ms (default 5 000). */
  timeoutMs?: number;
  /** How long after the last successful poll the list is still trusted, ms (default 300 000). */
  maxStaleMs?: number;
  /** Past maxStaleMs: `false` (default) → isRevoked() throws 503; `true` → keep answering from the last list. */
  failOpen?: boolean;
  clockTolerance?: number;
  /** Largest list accepted, bytes (default 16 MiB). */
  maxBytes?: number;
  fetch?: typeof fetch;
  now?: () => number;
  /** Told why a poll failed (for logs); never throws into the timer. */
  onError?: (err: unknown) => void;
  /** Told every poll's result, timer polls included (for outage and recovery logs). */
  onResult?: (result: PollResult) => void;
  /** Told the kids a newly verified list names (a list without them tells nothing), with its `iat`. */
  onKids?: (kids: readonly string[], iat: number) => void;
}

export type PollResult = 'updated' | 'unchanged' | 'failed';

/** The standalone verifier's side: polls the list and answers isRevoked(). */
export class RevocationListPoller {
  private etag: string | undefined;
  private heldIat = Number.NEGATIVE_INFINITY;
  /** The held list's `exp` (epoch seconds). */
  private heldExp = Number.NEGATIVE_INFINITY;
  private lastSuccess: number | undefined;
  /** When the last poll finished, successful or not. */
  lastAttempt: number | undefined;
  private timer: NodeJS.Timeout | undefined;
  private running: Promise<PollResult> | undefined;
  private readonly now: () => number;
  private readonly intervalMs: number;
  private readonly maxStaleMs: number;

  constructor(private readonly options: RevocationListPollerOptions) {
    this.now = options.now ?? Date.now;
    this.intervalMs = options.intervalMs ?? 10_000;
    this.maxStaleMs = options.maxStaleMs ?? 300_000;
  }

  /** Polls once (waits for it), then every intervalMs on an unref'd timer. Answers the first poll's result. */
  async start(): Promise<PollResult> {
    const first = await this.poll();
    if (!this.timer) {
      this.timer = setInterval(() => void this.poll(), this.intervalMs);
      this.timer.unref();
    }
    return first;
  }

  stop(): void {
    if (this.timer) clearInterval(this.timer);
    this.timer = undefined;
  }

  /** One conditional fetch; never throws. Concurrent calls share one fetch. */
  poll(): Promise<PollResult> {
    this.running ??= this.fetchOnce()
      .then((result) => {
        this.lastAttempt = this.now();
        try {
          this.options.onResult?.(result);
        } catch {
          // a logging hook never breaks polling
        }
        return result;
      })
      .finally(() => {
        this.running = undefined;
      });
    return this.running;
  }

  private async fetchOnce(): Promise<PollResult> {
    const o = this.options;
    try {
      const headers: Record<string, string> = { accept: REVOCATION_LIST_MEDIA_TYPE };
      if (this.etag && this.lastSuccess !== undefined) headers['if-none-match'] = this.etag;
      const res = await (o.fetch ?? fetch)(o.url, { headers, signal: AbortSignal.timeout(o.timeoutMs ?? 5_000), redirect: 'error' });
      if (res.status === 304 && this.lastSuccess !== undefined) {
        // the issuer re-signs its list well before it expires, so an expired list is never its current one:
        // a cache or a man in the middle answering 304 for ever would otherwise freeze the revocations
        if (this.heldExp + (o.clockTolerance ?? 0) < this.now() / 1000) {
          this.etag = undefined;
          throw new RevocationListError(`a 304 for the held revocation list, which expired at ${new Date(this.heldExp * 1000).toISOString()}`);
        }
        this.lastSuccess = this.now();
        return 'unchanged';
      }
      if (res.status !== 200) throw new RevocationListError(`the revocation list answered ${res.status}`);
      const body = (await readCapped(res, o.maxBytes ?? 16 * 1024 * 1024, (max) => new RevocationListError(`the revocation list is larger than ${max} bytes`))).trim();
      const list = await verifyRevocationList(body, o.keys, { issuer: o.issuer, now: this.now(), clockTolerance: o.clockTolerance });
      // an older list than the one held (a replay, a lagging instance or cache): refused, and not counted as contact
      if (list.iat < this.heldIat) throw new RevocationListError(`the revocation list (iat ${list.iat}) is older than the one held (iat ${this.heldIat})`);
      o.state.load(list);
      if (list.kids) o.onKids?.(list.kids, list.iat);
      this.heldIat = list.iat;
      this.heldExp = list.exp;
      this.etag = res.headers.get('etag') ?? undefined;
      this.lastSuccess = this.now();
      return 'updated';
    } catch (err) {
      o.onError?.(err);
      return 'failed';
    }
  }

  /** The poll in flight, if any. */
  inFlight(): Promise<PollResult> | undefined {
    return this.running;
  }

  /** Whether the list is trusted now: verified once, and last confirmed within maxStaleMs. */
  fresh(): boolean {
    return this.lastSuccess !== undefined && this.now() - this.lastSuccess <= this.maxStaleMs;
  }

  /**
   * The state's answer, or TemporarilyUnavailableError when the list is
   * stale and failOpen is off (see the module comment). Sync: the hot path.
   */
  isRevoked(claims: RevocableClaims): false | RevocationReason {
    if (!this.options.failOpen && !this.fresh()) {
      throw new TemporarilyUnavailableError('revocation status cannot be checked now', {
        detail: this.lastSuccess === undefined ? 'no revocation list verified yet' : `revocation list not refreshed for ${this.now() - this.lastSuccess} ms`,
        retryAfter: Math.ceil(this.intervalMs / 1000),
        dependency: 'revocation_list',
      });
    }
    return this.options.state.isRevoked(claims);
  }

  /** For health checks and logs. */
  status(): { lastSuccess: number | undefined; listIat: number | undefined; fresh: boolean } {
    return { lastSuccess: this.lastSuccess, listIat: Number.isFinite(this.heldIat) ? this.heldIat : undefined, fresh: this.fresh() };
  }
}
