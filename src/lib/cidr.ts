import { BlockList, isIP } from 'node:net';

export interface Cidr {
  address: string;
  prefix: number;
  family: 'ipv4' | 'ipv6';
}

/** An address or CIDR block (`10.0.0.0/8`, `::1`, `2001:db8::/32`); undefined when it is neither. */
export function parseCidr(cidr: string): Cidr | undefined {
  const [address, prefixText, ...rest] = cidr.split('/');
  const version = isIP(address);
  if (version === 0 || rest.length > 0) return undefined;
  const maxPrefix = version === 4 ? 32 : 128;
  const prefix = prefixText === undefined ? maxPrefix : /^\d{1,3}$/.test(prefixText) ? Number(prefixText) : NaN;
  if (!(prefix >= 0 && prefix <= maxPrefix)) return undefined;
  return { address, prefix, family: version === 4 ? 'ipv4' : 'ipv6' };
}

/**
 * Whether `remoteAddress` lies in one of `cidrs`. An IPv4 client seen through a dual-stack socket
 * (`::ffff:10.1.2.3`) is compared as IPv4; an address that is not an IP, or a list of which nothing
 * parses, never matches (fail closed).
 */
export function addressInCidrs(remoteAddress: string, cidrs: readonly string[]): boolean {
  const list = new BlockList();
  for (const cidr of cidrs) {
    const c = parseCidr(cidr);
    if (c) list.addSubnet(c.address, c.prefix, c.family);
  }
  const address = remoteAddress.replace(/^::ffff:(?=\d+\.\d+\.\d+\.\d+$)/i, '');
  const family = isIP(address);
  return family !== 0 && list.check(address, family === 4 ? 'ipv4' : 'ipv6');
}
