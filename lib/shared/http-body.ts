/**
 * Reading a fetched body without trusting its size: refused past `maxBytes`
 * while it is read (after decoding: fetch undoes a gzip content coding), so
 * neither a huge body nor a small gzip of a huge one is held whole.
 */

/** The body as UTF-8 text; `tooLarge(maxBytes)` makes the error thrown past `maxBytes` (a Content-Length over it fails at once). */
export async function readCapped(response: Response, maxBytes: number, tooLarge: (maxBytes: number) => Error): Promise<string> {
  const declared = Number(response.headers.get('content-length'));
  if (declared > maxBytes) {
    await response.body?.cancel().catch(() => undefined);
    throw tooLarge(maxBytes);
  }
  if (!response.body) return '';
  const chunks: Uint8Array[] = [];
  let size = 0;
  const reader = response.body.getReader();
  for (;;) {
    const { done, value } = await reader.read();
    if (done) break;
    size += value.byteLength;
    if (size > maxBytes) {
      await reader.cancel().catch(() => undefined);
      throw tooLarge(maxBytes);
    }
    chunks.push(value);
  }
  return Buffer.concat(chunks).toString('utf8');
}
