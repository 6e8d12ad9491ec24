/** How the brute-force limits and the refusal logs count a source address. */

/**
 * One key per peer: an IPv4 address as it is, whether the server listens on
 * IPv4 or dual-stack (`::ffff:192.0.2.1` is `192.0.2.1`); an IPv6 address by
 * its /64, the smallest block a host or a subscriber is given (one host may
 * pick any of its 2^64 addresses for each request).
 */
export function addressKey(address: string): string {
  if (!address.includes(':')) return address;
  if (address.startsWith('::ffff:') && address.includes('.')) return address.slice(7);
  return ipv6Prefix64(address) ?? address;
}

/** `2001:db8:1:2::/64` for any address of that /64; undefined for what is not a plain IPv6 address. */
function ipv6Prefix64(address: string): string | undefined {
  const zone = address.indexOf('%');
  const bare = zone >= 0 ? address.slice(0, zone) : address;
  if (bare.includes('.')) return undefined; // an IPv4 tail (other than ::ffff:): kept whole
  const halves = bare.split('::');
  if (halves.length > 2) return undefined;
  const head = halves[0] === '' ? [] : halves[0].split(':');
  const tail = halves.length === 2 && halves[1] !== '' ? halves[1].split(':') : [];
  const zeros = 8 - head.length - tail.length;
  if (halves.length === 1 ? zeros !== 0 : zeros < 1) return undefined;
  const groups = [...head, ...new Array<string>(halves.length === 2 ? zeros : 0).fill('0'), ...tail];
  if (!groups.every((g) => /^[0-9a-fA-F]{1,4}$/.test(g))) return undefined;
  return `${groups.slice(0, 4).map((g) => parseInt(g, 16).toString(16)).join(':')}::/64`;
}
