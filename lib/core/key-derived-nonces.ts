import { hkdfSync } from 'node:crypto';
import { DpopNonces } from './dpop-nonces';
import type { KeyRing, LoadedKey } from './keys';

/**
 * DPoP server nonces whose secret every instance on one store already
 * shares: HKDF-SHA-256 over the private bytes of the issuer's signing keys
 * (PKCS#8 DER; salt and info name this use, so the derived secret reveals
 * nothing about the key). Why the keys: they are already in the store and
 * loaded by every instance, so nonces need no new table or column and no
 * shared state per request. A nonce is handed out from the current signing
 * key's secret and accepted from any loaded key's secret, so a key rotation
 * (another instance switching first) does not turn valid nonces away.
 */
export class KeyDerivedNonces {
  private readonly byKid = new Map<string, DpopNonces>();

  constructor(
    private readonly keys: Pick<KeyRing, 'current' | 'list'>,
    private readonly now: () => number = Date.now,
  ) {}

  current(): string {
    return this.noncesOf(this.keys.current())!.current();
  }

  isValid(nonce: unknown): boolean {
    if (typeof nonce !== 'string') return false;
    for (const key of this.keys.list()) {
      if (this.noncesOf(key)?.isValid(nonce)) return true;
    }
    return false;
  }

  private noncesOf(key: LoadedKey): DpopNonces | undefined {
    let nonces = this.byKid.get(key.kid);
    if (!nonces && key.privateKey) {
      const ikm = key.privateKey.export({ format: 'der', type: 'pkcs8' });
      const secret = Buffer.from(hkdfSync('sha256', ikm, 'express-client-credentials', 'dpop-nonce-secret', 32));
      nonces = new DpopNonces(secret, { now: this.now });
      this.byKid.set(key.kid, nonces);
    }
    return nonces;
  }
}
