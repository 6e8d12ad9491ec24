import type { ServerResponse } from 'node:http';
import { basicChallenge, InvalidClientError, type OAuthError } from '../errors';

/** Sends `body` as JSON with a status, the one way responses are written here. */
export function sendJson(res: ServerResponse, status: number, body: unknown, contentType = 'application/json; charset=utf-8'): void {
  const json = JSON.stringify(body);
  res.statusCode = status;
  res.setHeader('Content-Type', contentType);
  res.setHeader('Content-Length', Buffer.byteLength(json));
  res.end(json);
}

/** Sends an error with its headers and the challenge(s); an answer carrying a DPoP-Nonce is never cached. */
export function sendError(res: ServerResponse, err: OAuthError, challenge: string | string[] | undefined): void {
  if (res.headersSent) {
    res.destroy();
    return;
  }
  for (const [name, value] of Object.entries(err.headers)) res.setHeader(name, value);
  if (err.headers['DPoP-Nonce'] !== undefined) res.setHeader('Cache-Control', 'no-store');
  if (challenge) res.setHeader('WWW-Authenticate', challenge);
  sendJson(res, err.status, err.toJSON());
}

/** Token endpoint errors (RFC 6749 §5.2): every 401 carries a Basic challenge. */
export function sendTokenError(res: ServerResponse, err: OAuthError, realm: string): void {
  sendError(res, err, err instanceof InvalidClientError ? basicChallenge(realm) : undefined);
}
