import type { IncomingMessage } from 'node:http';
import { InvalidRequestError } from '../errors';

/** Largest token request body accepted. */
export const MAX_FORM_BYTES = 8 * 1024;
/** Past this much, an oversized body is no longer drained but the connection is dropped. */
const MAX_DRAIN_BYTES = 1024 * 1024;

const FORM = /^application\/x-www-form-urlencoded\s*(;|$)/i;

function tooLarge(): InvalidRequestError {
  return new InvalidRequestError(`request body larger than ${MAX_FORM_BYTES} bytes`, { status: 413, headers: { Connection: 'close' }, detail: 'body_too_large' });
}

function entriesOfParsed(body: unknown): [string, string][] {
  if (!body || typeof body !== 'object') return [];
  const entries: [string, string][] = [];
  for (const [name, value] of Object.entries(body)) {
    for (const v of Array.isArray(value) ? value : [value]) {
      if (typeof v !== 'string') throw new InvalidRequestError(`parameter ${name} is malformed`, { detail: 'malformed_parameter' });
      entries.push([name, v]);
    }
  }
  return entries;
}

/**
 * Reads an application/x-www-form-urlencoded body of at most 8 KiB and
 * returns its parameters in order, repeats included. When an application
 * body parser ran first, its result is used instead of the stream.
 */
export function readForm(req: IncomingMessage & { body?: unknown; _body?: boolean }): Promise<[string, string][]> {
  const type = req.headers['content-type'];
  if (!type || !FORM.test(type)) {
    return Promise.reject(new InvalidRequestError('the request body must be application/x-www-form-urlencoded', { detail: 'unsupported_content_type' }));
  }
  const charset = /;\s*charset\s*=\s*"?([^";\s]+)/i.exec(type)?.[1]?.toLowerCase();
  if (charset && charset !== 'utf-8' && charset !== 'utf8' && charset !== 'us-ascii') {
    return Promise.reject(new InvalidRequestError('the request body must be encoded in UTF-8', { detail: 'unsupported_charset' }));
  }
  const encoding = req.headers['content-encoding'];
  if (encoding && encoding.toLowerCase() !== 'identity') {
    return Promise.reject(new InvalidRequestError('a compressed request body is not accepted', { status: 415, detail: 'compressed_body' }));
  }
  // an application body parser ran first (body-parser 1 sets _body; 2 leaves the stream ended)
  if (req._body || req.readableEnded) {
    try {
      return Promise.resolve(entriesOfParsed(req.body));
    } catch (err) {
      return Promise.reject(err);
    }
  }
  const declared = Number(req.headers['content-length']);
  if (declared > MAX_FORM_BYTES) {
    req.resume();
    return Promise.reject(tooLarge());
  }
  return new Promise((resolve, reject) => {
    const chunks: Buffer[] = [];
    let size = 0;
    const onData = (chunk: Buffer): void => {
      size += chunk.length;
      if (size <= MAX_FORM_BYTES) return void chunks.push(chunk);
      // over the limit (a body without Content-Length): answer now, as for a declared one, while
      // what still comes is read and dropped, up to 1 MiB; past that the connection is dropped
      cleanup();
      let drained = size;
      req.on('data', (more: Buffer) => {
        drained += more.length;
        if (drained > MAX_DRAIN_BYTES) req.destroy();
      });
      reject(tooLarge());
    };
    const onEnd = (): void => {
      cleanup();
      resolve([...new URLSearchParams(Buffer.concat(chunks).toString('utf8'))]);
    };
    const onError = (err: Error): void => {
      cleanup();
      reject(new InvalidRequestError('the request body could not be read', { detail: 'body_unreadable', facts: { read_error: err.message.slice(0, 200) } }));
    };
    const cleanup = (): void => {
      req.off('data', onData);
      req.off('end', onEnd);
      req.off('error', onError);
      req.off('close', onClose);
    };
    const onClose = (): void => {
      if (!req.complete) onError(new Error('client closed the connection'));
    };
    req.on('data', onData);
    req.on('end', onEnd);
    req.on('error', onError);
    req.on('close', onClose);
  });
}

/** Names of the parameters in a request URL's query string. */
export function queryNames(url: string | undefined): Set<string> {
  const q = url?.indexOf('?') ?? -1;
  if (!url || q < 0) return new Set();
  return new Set(new URLSearchParams(url.slice(q + 1)).keys());
}
