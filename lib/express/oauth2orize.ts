import oauth2orize from 'oauth2orize';
import type { NextFunction, Response } from 'express';
import type { AuthorizationServer } from '../core/authorization-server';
import type { ClientRecord } from '../stores/types';

/** What the token is issued with: the granted scopes, the DPoP key's thumbprint, the audience; `startedAt` when metrics are on. */
export interface Grant {
  scopes: string[];
  startedAt?: number;
  jkt?: string;
  audience?: string;
}

/** What the token route hands to oauth2orize in place of `req`: the parameters, the client (`user`) and the grant (`authInfo`). */
export interface GrantedRequest {
  body: Record<string, string>;
  user: ClientRecord;
  authInfo: Grant;
}

/**
 * The oauth2orize server with its client_credentials exchange. By the time it
 * runs, the request is validated and the client authenticated; the exchange
 * only turns the grant into a token response. Its own error handler is never
 * used (it answers 501 and echoes messages).
 */
/** oauth2orize's token middleware, called with the grant instead of the request. */
export type GrantExchange = (granted: GrantedRequest, res: Response, next: NextFunction) => void;

export function clientCredentialsExchange(server: AuthorizationServer, onIssued?: (startedAt: number) => void): GrantExchange {
  const oauth = oauth2orize.createServer();
  // oauth2orize picks the callback's signature by its arity: five explicit parameters.
  function issue(
    client: ClientRecord,
    _requested: string[] | undefined,
    _body: unknown,
    authInfo: Grant,
    done: (err: Error | null, accessToken?: string, params?: Record<string, unknown>) => void,
  ): void {
    let issued;
    try {
      issued = server.issue(client, authInfo.scopes, authInfo.jkt, authInfo.audience);
    } catch (err) {
      done(err as Error);
      return;
    }
    // oauth2orize writes the response before done() returns
    done(null, issued.accessToken, { token_type: authInfo.jkt ? 'DPoP' : 'Bearer', expires_in: issued.expiresIn, scope: issued.claims.scope });
    if (onIssued && authInfo.startedAt !== undefined) onIssued(authInfo.startedAt);
  }
  oauth.exchange(oauth2orize.exchange.clientCredentials({ scopeSeparator: ' ' }, issue as never));
  return oauth.token() as unknown as GrantExchange;
}
