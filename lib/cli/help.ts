/** Usage texts of `client-credentials`, keyed by command (`""` is the top level). */

export const BIN = 'client-credentials';

const ENVIRONMENT = `Environment:
  DATA_DIR                folder of the embedded store (default ./data)
  DATABASE_URL            postgres:// URL; when set, PostgreSQL is used and DATA_DIR is ignored
  DATABASE_SCHEMA         the PostgreSQL schema of the issuer's tables (default client_credentials);
                          set it as the server has it, or the CLI works on another set of clients
  REDIS_URL               the Redis the issuers share (redis://, rediss:// or a socket's path):
                          revoke, revoke-tokens, an update that takes something away,
                          rotate-secret and client-key remove ring them there, so they reload
                          at once (REVOCATION_CHANNEL: its channel); a malformed one stops
                          every command that changes a client before it changes anything
  LOG_LEVEL               when set (info, debug, ...), audit lines (client.created, client.revoked,
                          ...) go to stderr as JSON`;

const SCOPES_LINE = `
  SCOPES_SUPPORTED        the scopes the server offers, separated by single spaces, as the
                          server has it (the example server reads it too): when set, a --scope
                          outside it is refused; unset, --scope is checked for its form only`;

/** For create and update: the scopes they check --scope against. */
const CLIENT_ENVIRONMENT = `${ENVIRONMENT}${SCOPES_LINE}`;

const KEY_ENVIRONMENT = `${ENVIRONMENT}
  ACCESS_TOKEN_TTL        access token lifetime in seconds, as the server has it (default 3600)
  CLOCK_TOLERANCE         clock skew in seconds the server allows (default 5)
  SIGNING_ALG             ES256 or RS256, for new keys (default: the signing key's, else ES256)
  KEY_ROTATION_LEAD_TIME  default --lead-time of 'keys rotate', in seconds (default 300)
  KEY_REFRESH_INTERVAL    how often the servers reload keys, in seconds, as they have it (default 30):
                          a rotation with a shorter lead time keeps the replaced key that much longer`;

export const HELP: Record<string, string> = {
  '': `Usage: ${BIN} <command> [options]

Manages the clients and signing keys of an express-client-credentials issuer.

Commands:
  create --name NAME [--scope "a b"] [--resource URL]... [--introspect] [--require-dpop] [--json]
                                                 create a client; shows its secret once
  create --name NAME --auth private_key_jwt (--jwks FILE | --jwks-uri URL | --generate-key --out FILE)
                                                 create a key-based client (no secret)
  list [--json]                                  list clients (never secrets)
  show CLIENT_ID [--json]                        everything about one client (never secrets)
  update CLIENT_ID [--name NAME] [--scope "a b"] [--resource URL]... [--no-resources]
         [--[no-]introspect] [--[no-]require-dpop] [--json]
                                                 change a client's name or what it may have
  revoke CLIENT_ID [--json]                      revoke a client, its secrets and its tokens
  revoke-tokens CLIENT_ID [--json]               revoke every token the client holds; it stays active
  rotate-secret CLIENT_ID [--keep-old DURATION] [--json]
                                                 give a client a new secret; shows it once
  keys list [--json]                             list signing keys
  keys rotate [--lead-time DURATION] [--json]    publish a new signing key
  keys revoke KID [--json]                       take a leaked signing key out at once
  keys prune [--json]                            remove retired keys whose tokens have expired
  client-key add CLIENT_ID FILE [--json]         add a public key to a key-based client
  client-key remove CLIENT_ID KID [--json]       remove one of its keys
  client-key list CLIENT_ID [--json]             list its keys
  help [COMMAND]                                 show help for a command

Options:
  -h, --help                                     show help (also after any command)

Run '${BIN} <command> --help' for the details of a command.

${KEY_ENVIRONMENT}${SCOPES_LINE}
`,

  create: `Usage: ${BIN} create --name NAME [--scope "a b"] [--resource URL]... [--introspect] [--require-dpop] [--json]
       ${BIN} create --name NAME --auth private_key_jwt (--jwks FILE | --jwks-uri URL) [--scope "a b"] [--json]
       ${BIN} create --name NAME --auth private_key_jwt --generate-key --out FILE [--scope "a b"] [--json]

Creates a client and prints its client_id and client_secret. The secret is
shown only this once and cannot be recovered; 'rotate-secret' issues a new one.

With --auth private_key_jwt the client has no secret: it signs a JWT with its
private key for every token request (RFC 7523), and only its public keys are
registered. Refused: private members, symmetric keys, RSA under 2048 bits,
duplicate kids, one key under two kids, more than 8 keys.

Options:
  --name NAME       name for operators, 1 to 200 printable characters (required)
  --scope SCOPES    scopes the client may request, separated by single spaces,
                    e.g. --scope "orders:read orders:write" (default: none);
                    with SCOPES_SUPPORTED set, only scopes it lists
  --auth METHOD     client_secret (default) or private_key_jwt
  --jwks FILE       the client's public keys: a JWK Set or one JWK (EC P-256,
                    P-384 or RSA); a key without kid gets its RFC 7638 thumbprint
  --generate-key    make an ES256 key pair: the private JWK (with its kid) goes to
                    --out FILE with mode 0600, the public key is registered
  --out FILE        where --generate-key writes the private key; never overwritten,
                    never stdout ('-' is refused)
  --jwks-uri URL    where the client publishes its public keys (https; http only
                    on loopback; at most 2048 characters); fetched with a 5 s
                    timeout and a 64 KiB cap, cached 5 min, refetched once per
                    30 s for an unknown kid
  --resource URL    an API (RFC 8707 resource) the client may ask tokens for, with
                    resource=URL; repeatable. Without it, tokens carry the issuer's
                    default audience only. An absolute URI, no query or fragment;
                    the server refuses it if it is not in its resources option
  --introspect      let the client call /oauth/introspect (for resource servers)
  --require-dpop    refuse this client's token requests without a DPoP proof
                    (RFC 9449 dpop_bound_access_tokens): its tokens are always
                    sender-constrained
  --json            print one JSON object {client_id, client_secret, name, scope, auth};
                    with private_key_jwt {client_id, name, scope, auth, kids}, or
                    {client_id, name, scope, auth, kid} with --generate-key
  -h, --help        show this help

${CLIENT_ENVIRONMENT}
`,

  list: `Usage: ${BIN} list [--json]

Lists every client: client_id, name, scope, status (active or revoked),
creation time and how it authenticates (client_secret or private_key_jwt). Secrets and their hashes are never shown.

Options:
  --json      print a JSON array of {client_id, name, scope, status, created_at,
              revoked_at, active_secrets, auth}, with jwks_uri for a client
              that publishes its keys there, kids for one whose keys are
              registered, and resources, permissions and
              dpop_bound_access_tokens when set
  -h, --help  show this help

${ENVIRONMENT}
`,

  show: `Usage: ${BIN} show CLIENT_ID [--json]

Shows one client: its name, status, creation time, how it authenticates (how
many secrets work now, or its keys' kids or jwks_uri), its scope, the resources
it may ask tokens for, its permissions and whether it must use DPoP. Secrets and
their hashes are never shown. Exits 1 when no client has that id.

Options:
  --json      print one JSON object, the same as one element of 'list --json'
  -h, --help  show this help

${ENVIRONMENT}
`,

  update: `Usage: ${BIN} update CLIENT_ID [--name NAME] [--scope "a b"] [--resource URL]... [--no-resources]
         [--[no-]introspect] [--[no-]require-dpop] [--json]

Changes a client's name, its scopes, the resources it may ask tokens for, its
introspect permission or its DPoP requirement; the client_id and its secrets
or keys stay. Each option given replaces what the client has; the others stay.

An access token keeps the scopes and audience it was issued with until it
expires. So when the change takes something away (a scope, a resource) or makes
DPoP required, every token issued to the client until now is revoked with it,
in the same store transaction, as 'revoke-tokens' does: running issuers refuse
those tokens within their revocation reload interval (2 s by default; sooner
with PostgreSQL or a Redis push), and the client's next token request gets what
it may have now. What is taken away is judged on what the client has when the
change is written; a first --resource list counts as taking the default
audience away (only the server knows whether the list names it). A change that
only adds revokes nothing; running issuers use it at once on the embedded
store, within their client cache time (2 s) on PostgreSQL.

Options:
  --name NAME          a new name, 1 to 200 printable characters
  --scope SCOPES       the scopes it may request, separated by single spaces;
                       repeatable, the values joined (--scope "" for none);
                       with SCOPES_SUPPORTED set, only scopes it lists
  --resource URL       the APIs (RFC 8707 resources) it may ask tokens for;
                       repeatable, the whole list. Checked for its form only
                       here: the server refuses token requests for a resource
                       it does not serve (invalid_target)
  --no-resources       none: the issuer's default audience only
  --introspect         let it call /oauth/introspect; --no-introspect: no more
  --require-dpop       refuse its token requests without a DPoP proof;
                       --no-require-dpop: accept them again
  --json               print one JSON object {client_id, name, scope, auth,
                       changed, tokens_revoked}, with jwks_uri, resources,
                       permissions and dpop_bound_access_tokens when set;
                       changed names those keys
  -h, --help           show this help

${CLIENT_ENVIRONMENT}
`,

  revoke: `Usage: ${BIN} revoke CLIENT_ID [--json]

Revokes the client, for good: its secrets and keys stop working at once on
the instance that revoked, and on the others once their client cache expires
(clientCacheTtl, 2 s by default). The access tokens it holds are refused by
every issuer on the same store within its revocation reload interval
(revocationResync, 2 s by default; at once on the instance that revoked and,
with PostgreSQL, on every instance notified), and by standalone verifiers
polling the revocation list within their poll interval.

Options:
  --json      print one JSON object {client_id, status, revoked_at}
  -h, --help  show this help

${ENVIRONMENT}
`,

  'revoke-tokens': `Usage: ${BIN} revoke-tokens CLIENT_ID [--json]

Revokes every access token issued to the client until now. The client stays
active: its secrets or keys keep working and the tokens it gets from now on are
accepted. Use it when a token may have leaked but the credentials have not.
The old tokens are refused within the same bounds as after 'revoke'.

Options:
  --json      print one JSON object {client_id, tokens_revoked, generation}
  -h, --help  show this help

${ENVIRONMENT}
`,

  'rotate-secret': `Usage: ${BIN} rotate-secret CLIENT_ID [--keep-old DURATION] [--json]

Gives the client a new secret and prints it. The secret is shown only this
once. By default the old secret stops working at once.

Options:
  --keep-old DURATION  keep the old secret working this long, so the client can
                       switch over: 30s, 15m, 2h, 1d or seconds (at most 365d)
  --json               print one JSON object {client_id, client_secret}
  -h, --help           show this help

${ENVIRONMENT}
`,

  keys: `Usage: ${BIN} keys <list|rotate|revoke|prune> [options]

Manages the signing keys. A new key is published at once and signs after a
lead time, so verifiers can fetch it first; the key it replaces stays
published until the tokens it signed have expired.

Commands:
  keys list [--json]                            list signing keys
  keys rotate [--lead-time DURATION] [--json]   publish a new signing key
  keys revoke KID [--json]                      take a leaked signing key out at once
  keys prune [--json]                           remove retired keys whose tokens have expired

Run '${BIN} keys <command> --help' for the details of a command.

${KEY_ENVIRONMENT}
`,

  'keys list': `Usage: ${BIN} keys list [--json]

Lists the signing keys: kid, alg, status (pending: published, not signing yet;
current: the one key signing; retired: not signing any more, or withdrawn by a
later rotation before it signed, published until its tokens expire), when the
key signs from and when it retires. On a store that has no signing key yet it
creates the first one, as the server's first start does. A DATA_DIR without a
store, or a DATABASE_SCHEMA that does not exist, is an error: nothing is
created there.

Options:
  --json      print a JSON array of {kid, alg, status, activates_at, retired_at}
  -h, --help  show this help

${KEY_ENVIRONMENT}
`,

  'keys rotate': `Usage: ${BIN} keys rotate [--lead-time DURATION] [--json]

Publishes a new signing key now; it signs after the lead time, and the current
key signs until then and retires at that moment. A key still pending from an
earlier rotation is withdrawn: it never signs. Prints the new kid.

Options:
  --lead-time DURATION  30s, 15m, 2h, 1d or seconds, at most 1d
                        (default: KEY_ROTATION_LEAD_TIME, else 300 seconds)
  --json                print one JSON object {kid, alg, status, activates_at,
                        signs_until_then, withdrawn}: the kid of the key that signs
                        until the new one does (null with no lead time) and the
                        kids of pending keys the rotation withdrew
  -h, --help            show this help

${KEY_ENVIRONMENT}
`,

  'keys revoke': `Usage: ${BIN} keys revoke KID [--json]

For a signing key whose private part may have leaked: deletes it from the
store at once, so it is no longer published and every token it signed is
refused, whatever its expiry. A key that signs now, or a pending one, is first
replaced by a new key that signs at once. Running issuers learn of it at their
next key refresh (KEY_REFRESH_INTERVAL), resource servers at their next JWKS
fetch; until then some may still accept, or sign, tokens with it. Clients
simply get new tokens. An unknown KID exits 1 and changes nothing.

Options:
  --json      print one JSON object {revoked, replaced_by}: the kid taken out,
              and the new key's kid (null when the key signed no more)
  -h, --help  show this help

${KEY_ENVIRONMENT}
`,

  'keys prune': `Usage: ${BIN} keys prune [--json]

Removes retired keys once no token they signed can still be valid
(retired longer ago than ACCESS_TOKEN_TTL + CLOCK_TOLERANCE). Prints how many.

Options:
  --json      print one JSON object {removed}
  -h, --help  show this help

${KEY_ENVIRONMENT}
`,
};

const CLIENT_KEY_ADD = `Usage: ${BIN} client-key add CLIENT_ID FILE [--json]

Adds one public key (a JWK, or a JWK Set holding one key) to a key-based
client. Both keys then work: move the client to the new key, then remove the
old one with 'client-key remove'. A key without kid gets its RFC 7638
thumbprint. Refused: private members, symmetric keys, RSA under 2048 bits, a
kid or a key the client has already (a new key needs a new key pair), a ninth
key.

Options:
  --json      print one JSON object {client_id, kid, alg}
  -h, --help  show this help

${ENVIRONMENT}
`;

HELP['client-key'] = `Usage: ${BIN} client-key <add|remove|list> [options]

Manages the public keys of a key-based (private_key_jwt) client. Rotate with
overlap: add the new key, switch the client to it, remove the old one.

Commands:
  client-key add CLIENT_ID FILE [--json]     add a public key (JWK file)
  client-key remove CLIENT_ID KID [--json]   remove a key (never the last one)
  client-key list CLIENT_ID [--json]         list the keys

Run '${BIN} client-key <command> --help' for the details of a command.

${ENVIRONMENT}
`;
HELP['client-key add'] = CLIENT_KEY_ADD;
HELP['client-key remove'] = `Usage: ${BIN} client-key remove CLIENT_ID KID [--json]

Removes the key KID from the client: assertions signed with it stop working.
The last key cannot be removed (revoke the client instead). A KID that
starts with '-' is taken as it is; one that starts with '--' goes after '--'
(client-key remove CLIENT_ID -- --kid).

Options:
  --json      print one JSON object {client_id, removed}
  -h, --help  show this help

${ENVIRONMENT}
`;
HELP['client-key list'] = `Usage: ${BIN} client-key list CLIENT_ID [--json]

Lists the client's public keys: kid, key type (and curve) and algorithm.
A client that publishes its keys at a jwks_uri has none stored: the URI is
named instead (with --json, on a note: line on stderr).

Options:
  --json      print a JSON array of {kid, kty, alg, crv}: [] for a client
              with a secret, and for a jwks_uri client (the list --json
              field jwks_uri tells the two apart)
  -h, --help  show this help

${ENVIRONMENT}
`;

export function helpPointer(command: string): string {
  return `run '${[BIN, command, '--help'].filter(Boolean).join(' ')}' for usage`;
}
