/** `keys list`, `keys rotate`, `keys revoke`, `keys prune`: the issuer's signing keys. */
import { KeyRing, SIGNING_ALGORITHMS, UnknownSigningKeyError, isWithdrawn, keyStatus, loadStoredKey, signingKeyAt, type SigningAlgorithm } from '../core/keys';
import { CommandError, UsageError, formatDuration, parseCommand, parseDuration } from './args';
import { HELP } from './help';
import { KID_SHAPE, auditLogger, iso, printable, quoted, table, withHelp, type Context, type Handler } from './context';

interface KeySettings {
  /** From SIGNING_ALG, or undefined to keep the signing key's algorithm. */
  algorithm: SigningAlgorithm | undefined;
  accessTokenTtl: number;
  clockTolerance: number;
  leadTime: number;
  /** The servers' key refresh interval, in seconds (KEY_REFRESH_INTERVAL). */
  refreshInterval: number;
}

/** A number of seconds from the environment: digits only (with a fraction when `fraction`), within min and max. */
function envNumber(env: NodeJS.ProcessEnv, name: string, fallback: number, max: number, command: string, min = 0, fraction = false): number {
  const text = env[name];
  if (text === undefined || text === '') return fallback;
  if (!(fraction ? /^\d+(\.\d+)?$/ : /^\d+$/).test(text.trim()) || Number(text) < min || Number(text) > max) {
    throw new UsageError(`${name} must be a ${fraction ? '' : 'whole '}number of seconds from ${min} to ${max}, got ${JSON.stringify(text)}`, command);
  }
  return Number(text);
}

function keySettings(env: NodeJS.ProcessEnv, command: string): KeySettings {
  const alg = env.SIGNING_ALG || undefined;
  if (alg !== undefined && !(SIGNING_ALGORITHMS as readonly string[]).includes(alg)) {
    throw new UsageError(`SIGNING_ALG must be one of ${SIGNING_ALGORITHMS.join(', ')}, got ${JSON.stringify(alg)}`, command);
  }
  return {
    algorithm: alg as SigningAlgorithm | undefined,
    accessTokenTtl: envNumber(env, 'ACCESS_TOKEN_TTL', 3600, 86400, command, 1),
    clockTolerance: envNumber(env, 'CLOCK_TOLERANCE', 5, 300, command),
    leadTime: envNumber(env, 'KEY_ROTATION_LEAD_TIME', 300, 86400, command),
    // the servers' (a fraction allowed, as they take it): a server learns of a rotation up to that long after it,
    // so `keys rotate` with a shorter lead time records that much more lifetime on the key it replaces
    refreshInterval: envNumber(env, 'KEY_REFRESH_INTERVAL', 30, 3600, command, 0.1, true),
  };
}

/**
 * The key ring, loaded (creating the first key when there is none) unless
 * `load` is false. The algorithm is SIGNING_ALG or else that of the key
 * that signs now (signingKeyAt, the issuer's rule; not the newest key's,
 * which may be a pending key of another algorithm that a rotation withdraws),
 * else ES256, so that loading never triggers KeyRing.init()'s immediate
 * rotation on an algorithm change; a change of algorithm goes through
 * `keys rotate` and its lead time.
 */
async function loadKeyRing(ctx: Context, settings: KeySettings, load = true): Promise<KeyRing> {
  const keyStore = ctx.stores.keyStore();
  const stored = await keyStore.listKeys();
  const signing = settings.algorithm === undefined ? signingKeyAt(stored.map(loadStoredKey), Date.now())?.alg : undefined;
  const algorithm =
    settings.algorithm ?? ((SIGNING_ALGORITHMS as readonly string[]).includes(signing ?? '') ? (signing as SigningAlgorithm) : 'ES256');
  const ring = new KeyRing(keyStore, {
    algorithm,
    maxTokenTtl: settings.accessTokenTtl + settings.clockTolerance,
    // the CLI signs no token: the servers record their lifetimes on the keys
    signs: false,
    reloadCooldownMs: 0,
    // the servers' refresh: how long after a rotation one may still sign with the key it replaced (KeyRing.rotate())
    refreshMs: settings.refreshInterval * 1000,
    rotationLeadTimeMs: settings.leadTime * 1000,
    logger: auditLogger(ctx.io.env),
    now: Date.now,
  });
  if (!load) return ring;
  if (stored.some((k) => k.retiredAt === null)) await ring.reload();
  else await ring.init(); // no key yet: creates the first one
  return ring;
}

const keysList: Handler = async (args, ctx) => {
  const { values } = parseCommand('keys list', args, { json: { type: 'boolean' } });
  const settings = keySettings(ctx.io.env, 'keys list');
  ctx.stores.readOnly = true;
  const ring = await loadKeyRing(ctx, settings);
  const now = Date.now();
  const keys = ring.list().map((k, _, all) => ({
    kid: k.kid,
    alg: k.alg,
    status: keyStatus(k, all, now),
    activates_at: new Date(k.activatesAt).toISOString(),
    retired_at: k.retiredAt === null ? null : new Date(k.retiredAt).toISOString(),
  }));
  if (values.json) {
    ctx.out(JSON.stringify(keys));
    return 0;
  }
  const rows = keys.map((k) => [k.kid, k.alg, k.status, iso(new Date(k.activates_at)), k.retired_at ? iso(new Date(k.retired_at)) : '-']);
  for (const line of table(['KID', 'ALG', 'STATUS', 'ACTIVATES_AT', 'RETIRED_AT'], rows)) ctx.out(line);
  return 0;
};

/** The shortest lead time after which every running issuer, at the default key refresh, publishes a new key before it signs. */
const SAFE_LEAD_TIME = 30;

const keysRotate: Handler = async (args, ctx) => {
  const { values } = parseCommand('keys rotate', args, { 'lead-time': { type: 'string' }, json: { type: 'boolean' } });
  const settings = keySettings(ctx.io.env, 'keys rotate');
  ctx.stores.checkRedisUrl(); // it rings the running issuers
  const leadTime =
    values['lead-time'] === undefined ? settings.leadTime : parseDuration(values['lead-time'], '--lead-time', 'keys rotate', 86400);
  const ring = await loadKeyRing(ctx, settings);
  const before = Date.now();
  // the key that signs until the new one does, and a key still pending from an earlier rotation, which this one withdraws
  const signing = signingKeyAt(ring.list(), before);
  const withdrawn = ring.list().filter((k) => k.activatesAt > before && !isWithdrawn(k) && (k.retiredAt === null || k.retiredAt > before));
  const key = await ring.rotate(leadTime * 1000);
  // the running issuers reload their keys when rung (the embedded file's issuers read its key version every revocationResync)
  await ctx.stores.notifyRevocations();
  // the servers publish a key only at their next key refresh: a lead time under it is never safe
  const safeLeadTime = Math.max(SAFE_LEAD_TIME, settings.refreshInterval);
  if (leadTime < safeLeadTime) {
    // running issuers learn of the key at their next key refresh, and resource servers at their next JWKS fetch
    ctx.err(
      `warning: a lead time under ${safeLeadTime} s: running issuers publish the new key at their next key refresh (keyRefreshInterval, ${settings.refreshInterval} s here) and resource servers fetch it when their JWKS copy ages (jwksMaxAge), so until then some may refuse its tokens; the README's rotation procedure publishes first (--lead-time 10m).`,
    );
  }
  const soon = withdrawn.filter((k) => k.activatesAt - before < safeLeadTime * 1000);
  if (soon.length > 0) {
    // an issuer that has not reloaded since may sign with it from its activation until its next key refresh
    ctx.err(
      `warning: the pending key ${soon.map((k) => k.kid).join(', ')} was due to sign in under ${safeLeadTime} s: running issuers that have not refreshed their keys (keyRefreshInterval, ${settings.refreshInterval} s here) may sign with it briefly; it stays published until such tokens expire.`,
    );
  }
  if (values.json) {
    ctx.out(
      JSON.stringify({
        kid: key.kid,
        alg: key.alg,
        status: keyStatus(key, ring.list(), Date.now()),
        activates_at: new Date(key.activatesAt).toISOString(),
        // what the text says in words: the key that signs until then, and pending keys this rotation withdrew
        signs_until_then: leadTime > 0 ? (signing?.kid ?? null) : null,
        withdrawn: withdrawn.map((k) => k.kid),
      }),
    );
    return 0;
  }
  ctx.out(`New signing key ${key.kid} (${key.alg}) published.`);
  ctx.out(
    leadTime > 0
      ? `It signs from ${iso(key.activatesAt)} (in ${formatDuration(leadTime)}); ${signing?.kid ?? 'the previous key'} signs until then.`
      : 'It signs from now on.',
  );
  for (const k of withdrawn) ctx.out(`The pending key ${k.kid} (due at ${iso(k.activatesAt)}) is withdrawn: it will not sign.`);
  return 0;
};

const keysPrune: Handler = async (args, ctx) => {
  const { values } = parseCommand('keys prune', args, { json: { type: 'boolean' } });
  const settings = keySettings(ctx.io.env, 'keys prune');
  const ring = await loadKeyRing(ctx, settings, false); // pruning needs no key, and creates none
  const removed = await ring.prune();
  if (values.json) ctx.out(JSON.stringify({ removed }));
  else ctx.out(`Removed ${removed} retired key${removed === 1 ? '' : 's'}.`);
  return 0;
};

/**
 * A key whose private part may have leaked: out of the store at once (no
 * longer published, its tokens refused), replaced first by a key that signs
 * at once when it signs now or would later.
 */
const keysRevoke: Handler = async (args, ctx) => {
  const { values, positionals } = parseCommand('keys revoke', args, { json: { type: 'boolean' } }, { min: 1, max: 1, name: 'KID', shape: KID_SHAPE });
  const [kid] = positionals;
  const settings = keySettings(ctx.io.env, 'keys revoke');
  ctx.stores.checkRedisUrl(); // it rings the running issuers
  const ring = await loadKeyRing(ctx, settings, false); // an unknown kid creates no key
  let result;
  try {
    result = await ring.revoke(kid);
  } catch (err) {
    if (err instanceof UnknownSigningKeyError) throw new CommandError(`no signing key has kid ${quoted(kid)} ('keys list' shows them)`);
    throw err;
  }
  const { revoked, replacement } = result;
  await ctx.stores.notifyRevocations();
  if (values.json) {
    ctx.out(JSON.stringify({ revoked: revoked.kid, replaced_by: replacement?.kid ?? null }));
    return 0;
  }
  ctx.out(`Signing key ${revoked.kid} (${revoked.alg}) revoked: it is no longer published, and every token it signed is refused.`);
  if (replacement) ctx.out(`New signing key ${replacement.kid} (${replacement.alg}) signs from now on.`);
  ctx.out(
    `Running issuers on this store refuse its tokens, and stop signing with it, once told: at once through PostgreSQL or Redis (REDIS_URL), within their revocationResync (2 s) on the embedded file, else at their next key refresh (keyRefreshInterval, ${settings.refreshInterval} s here). Resource servers that verify against the JWKS do within a poll of the revocation list when they poll it, else at their next fetch of the JWKS (jwksMaxAge, 120 s by default).`,
  );
  return 0;
};

const KEY_COMMANDS: Record<string, Handler> = { list: keysList, rotate: keysRotate, revoke: keysRevoke, prune: keysPrune };

export const keys: Handler = async (args, ctx) => {
  const [sub, ...rest] = args;
  if (sub === '-h' || sub === '--help') {
    ctx.io.stdout(HELP.keys);
    return 0;
  }
  if (sub === undefined) {
    ctx.io.stderr(HELP.keys);
    return 2;
  }
  const handler = Object.hasOwn(KEY_COMMANDS, sub) ? KEY_COMMANDS[sub] : undefined;
  if (!handler) {
    ctx.err(`error: unknown command 'keys ${printable(sub)}' (keys ${Object.keys(KEY_COMMANDS).join(', keys ')}; client-credentials keys --help describes them)`);
    return 2;
  }
  return withHelp(`keys ${sub}`, handler)(rest, ctx);
};
