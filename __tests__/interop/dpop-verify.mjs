// Checks DPoP proofs with jose (EmbeddedJWK: the key from the proof header):
//   echo '["proof", ...]' | node dpop-verify.mjs
// prints [{ ok, alg, jkt, payload } | { ok: false, error }] as JSON.
import { EmbeddedJWK, calculateJwkThumbprint, jwtVerify } from 'jose';

const chunks = [];
for await (const chunk of process.stdin) chunks.push(chunk);
const out = [];
for (const proof of JSON.parse(Buffer.concat(chunks).toString('utf8'))) {
  try {
    const { payload, protectedHeader } = await jwtVerify(proof, EmbeddedJWK, {
      typ: 'dpop+jwt',
      algorithms: ['ES256', 'ES384', 'PS256', 'RS256'],
      maxTokenAge: '300s',
    });
    out.push({ ok: true, alg: protectedHeader.alg, jkt: await calculateJwkThumbprint(protectedHeader.jwk), payload });
  } catch (err) {
    out.push({ ok: false, error: String(err && err.code) });
  }
}
process.stdout.write(JSON.stringify(out));
