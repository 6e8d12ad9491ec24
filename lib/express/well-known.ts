import type { NextFunction, Request, RequestHandler, Response } from 'express';
import type { AuthorizationServer } from '../core/authorization-server';
import { metadataPath } from '../core/metadata';
import { InvalidRequestError } from '../errors';
import { sendJson, sendTokenError } from './respond';

/** Answers GET and HEAD with the RFC 8414 metadata. */
export function sendMetadata(server: AuthorizationServer, res: Response): void {
  res.setHeader('Cache-Control', 'public, max-age=3600');
  sendJson(res, 200, server.metadata);
}

/**
 * The metadata at the host's RFC 8414 §3.1 location, for the app's root: one
 * path, derived from the issuer identifier, so it can never answer for
 * another issuer (several issuers on one host each mount their own). Any
 * other path goes on at once.
 */
export function wellKnownHandler(server: AuthorizationServer): RequestHandler {
  const path = metadataPath(server.config.issuer);
  const withSlash = `${path}/`;
  return function issuerMetadata(req: Request, res: Response, next: NextFunction) {
    if (req.path !== path && req.path !== withSlash) return next();
    if (req.method === 'GET' || req.method === 'HEAD') return sendMetadata(server, res);
    sendTokenError(res, new InvalidRequestError(`method ${req.method} is not allowed; use GET, HEAD`, { status: 405, headers: { Allow: 'GET, HEAD' } }), server.config.tokenRealm);
  };
}
