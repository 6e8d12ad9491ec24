/** How the brute-force limits and the refusal logs count a source address. */

/**
 * One key per peer: an IPv4 address as it is, whether the server listens on
 * IPv4 or dual-stack (`::ffff:192.0.2.1` is `192.0.2.1`), also when it comes
 * written in hex (`::ffff:c000:201`) or through NAT64's well-known prefix
 * (`64:ff9b::c000:201`, RFC 6052: IPv4 clients of an IPv6-only server); any
 * other IPv6 address by its /64, the smallest block a host or a subscriber
 * is given (one host may pick any of its 2^64 addresses for each request).
 * Keying an IPv4 peer by the /64 its embedding falls in would put every IPv4
 * client in one count.
 */
export function addressKey(address: string): string {
  if (!address.includes(':')) return address;
  if (address.startsWith('::ffff:') && address.includes('.')) return address.slice(7);
  const groups = ipv6Groups(address);
  if (!groups) return address;
  const embedded = embeddedIpv4(groups);
  if (embedded !== undefined) return embedded;
  return `${groups.slice(0, 4).map((g) => g.toString(16)).join(':')}::/64`;
}

/** The eight 16-bit groups of an IPv6 address (a dotted IPv4 tail is the last two); undefined for what is not one. */
function ipv6Groups(address: string): number[] | undefined {
  const zone = address.indexOf('%');
  let bare = zone >= 0 ? address.slice(0, zone) : address;
  const lastColon = bare.lastIndexOf(':');
  if (bare.includes('.', lastColon)) {
    const octets = bare.slice(lastColon + 1).split('.');
    if (octets.length !== 4 || !octets.every((o) => /^\d{1,3}$/.test(o) && Number(o) <= 255)) return undefined;
    const [a, b, c, d] = octets.map(Number);
    bare = `${bare.slice(0, lastColon + 1)}${((a << 8) | b).toString(16)}:${((c << 8) | d).toString(16)}`;
  }
  const halves = bare.split('::');
  if (halves.length > 2) return undefined;
  const head = halves[0] === '' ? [] : halves[0].split(':');
  const tail = halves.length === 2 && halves[1] !== '' ? halves[1].split(':') : [];
  const zeros = 8 - head.length - tail.length;
  if (halves.length === 1 ? zeros !== 0 : zeros < 1) return undefined;
  const hex = [...head, ...new Array<string>(halves.length === 2 ? zeros : 0).fill('0'), ...tail];
  if (!hex.every((g) => /^[0-9a-fA-F]{1,4}$/.test(g))) return undefined;
  return hex.map((g) => parseInt(g, 16));
}

/**
 * The IPv4 address an IPv4-mapped (::ffff:0:0/96), NAT64 well-known-prefix
 * (64:ff9b::/96) or deprecated IPv4-compatible (::/96, but for :: and ::1)
 * address carries.
 */
function embeddedIpv4(g: number[]): string | undefined {
  const zeroHead = g[0] === 0 && g[1] === 0 && g[2] === 0 && g[3] === 0 && g[4] === 0;
  const mapped = zeroHead && g[5] === 0xffff;
  const compatible = zeroHead && g[5] === 0 && g[6] !== 0;
  const nat64 = g[0] === 0x64 && g[1] === 0xff9b && g[2] === 0 && g[3] === 0 && g[4] === 0 && g[5] === 0;
  if (!mapped && !compatible && !nat64) return undefined;
  return `${g[6] >> 8}.${g[6] & 255}.${g[7] >> 8}.${g[7] & 255}`;
}
