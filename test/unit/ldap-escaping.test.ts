import { describe, expect, it } from 'vitest';
import { DnSyntaxError, dnEquals, escapeDnValue, formatDn, isDnWithin, normalizeDn, parseDn } from '../../src/providers/ldap/dn.ts';
import { andFilter, equalityFilter, escapeFilterValue, isValidAttributeName } from '../../src/providers/ldap/filter.ts';
import { LdapProviderError, scrub, toProviderError } from '../../src/providers/ldap/errors.ts';
import { bindIdentity, effectiveTimeoutMs, parseUrlList } from '../../src/providers/ldap/ldapts-client.ts';

describe('RFC 4515 filter escaping', () => {
  it.each([
    ['alice', 'alice'],
    ['*', '\\2a'],
    ['*)(cn=*', '\\2a\\29\\28cn=\\2a'],
    ['a\\b', 'a\\5cb'],
    ['nul\u0000', 'nul\\00'],
    ['Smith, John', 'Smith, John'],
    ['josé', 'josé'],
  ])('%j -> %j', (input, expected) => {
    expect(escapeFilterValue(input)).toBe(expected);
  });

  it('builds equality and AND filters and refuses bad attribute names', () => {
    expect(equalityFilter('uid', 'x)(uid=*')).toBe('(uid=x\\29\\28uid=\\2a)');
    expect(andFilter('(objectClass=*)', '(cn=a)')).toBe('(&(objectClass=*)(cn=a))');
    expect(andFilter('(cn=a)')).toBe('(cn=a)');
    expect(() => equalityFilter('cn=*)(x', 'a')).toThrow(/invalid attribute name/);
    expect(isValidAttributeName('sAMAccountName')).toBe(true);
    expect(isValidAttributeName('userCertificate;binary')).toBe(true);
    expect(isValidAttributeName('2.5.4.3')).toBe(true);
    expect(isValidAttributeName('cn)')).toBe(false);
    expect(isValidAttributeName('')).toBe(false);
  });
});

describe('RFC 4514 DNs', () => {
  it.each([
    ['plain', 'plain'],
    ['Smith, John', 'Smith\\, John'],
    ['a+b', 'a\\+b'],
    ['back\\slash', 'back\\\\slash'],
    ['"quoted"', '\\"quoted\\"'],
    ['<x>;y', '\\<x\\>\\;y'],
    [' lead', '\\ lead'],
    ['trail ', 'trail\\ '],
    ['#hash', '\\#hash'],
    ['mid#dle', 'mid#dle'],
    ['nul\u0000', 'nul\\00'],
  ])('escapeDnValue(%j) = %j', (input, expected) => {
    expect(escapeDnValue(input)).toBe(expected);
  });

  it('parses escapes, hex pairs, multi-valued RDNs and spacing', () => {
    expect(parseDn('cn=Smith\\, John+uid=js,ou=users, dc=example,dc=com')).toEqual([
      [{ type: 'cn', value: 'Smith, John' }, { type: 'uid', value: 'js' }],
      [{ type: 'ou', value: 'users' }],
      [{ type: 'dc', value: 'example' }],
      [{ type: 'dc', value: 'com' }],
    ]);
    expect(parseDn('cn=Jos\\C3\\A9,dc=x')[0]![0]!.value).toBe('José');
    expect(parseDn('cn=a\\5cb,dc=x')[0]![0]!.value).toBe('a\\b');
    expect(parseDn('cn=trail\\ ,dc=x')[0]![0]!.value).toBe('trail ');
    expect(parseDn('cn=trail  ,dc=x')[0]![0]!.value).toBe('trail');
    expect(parseDn('1.3.6.1.4.1.1466.0=#04024869,dc=x')[0]![0]).toEqual({ type: '1.3.6.1.4.1.1466.0', value: '#04024869' });
    expect(parseDn('')).toEqual([]);
  });

  it.each(['cn', 'cn=a,', '=a', 'cn=a"b', 'cn=a\\', 'c n=a', 'cn=a;dc=b'])('rejects %j', (dn) => {
    expect(() => parseDn(dn)).toThrow(DnSyntaxError);
  });

  it('round-trips values with every special character', () => {
    const value = ' #a,b+c"d\\e<f>g;h ';
    const dn = formatDn([[{ type: 'cn', value }], [{ type: 'dc', value: 'test' }]]);
    expect(parseDn(dn)[0]![0]!.value).toBe(value);
  });

  it('compares DNs as DNs', () => {
    expect(dnEquals('CN=Alice,OU=Users,DC=Example', 'cn=alice, ou=users, dc=example')).toBe(true);
    expect(dnEquals('cn=a\\,b,dc=x', 'cn=a\\2cb,dc=x')).toBe(true);
    expect(dnEquals('cn=a+uid=b,dc=x', 'uid=b+cn=a,dc=x')).toBe(true);
    expect(dnEquals('cn=a,dc=x', 'cn=b,dc=x')).toBe(false);
    expect(normalizeDn('CN=A\\2cB,DC=X')).toBe('cn=a\\,b,dc=x');
    expect(isDnWithin('cn=a,ou=u,dc=x', 'OU=U,dc=x')).toBe(true);
    expect(isDnWithin('ou=u,dc=x', 'ou=u,dc=x')).toBe(true);
    expect(isDnWithin('cn=y,ou=a\\,dc=x', 'dc=x')).toBe(false);
    expect(isDnWithin('cn=a,dc=y', 'dc=x')).toBe(false);
    expect(isDnWithin('cn=a,dc=y', '')).toBe(true);
  });

  // What slapd takes for the entry cn=engine,ou=sys,dc=x (each checked against slapd, see ldap-bind-account.test.ts).
  it.each([
    ['upper case', 'CN=ENGINE,OU=SYS,DC=X'],
    ['spaces around "=" and ","', 'cn = engine , ou = sys , dc = x'],
    ['trailing spaces', 'cn=engine   ,ou=sys,dc=x  '],
    ['hex escapes', 'cn=\\65\\6E\\67\\69\\6E\\65,ou=sys,dc=x'],
    ['escaped spaces at the ends (insignificant, RFC 4518)', 'cn=\\ engine\\20,ou=sys,dc=x'],
    ['an OID type', '2.5.4.3=engine,2.5.4.11=sys,0.9.2342.19200300.100.1.25=x'],
    ['long type names', 'commonName=engine,organizationalUnitName=sys,domainComponent=x'],
    ['full-width letters (NFKC)', 'cn=ｅｎｇｉｎｅ,ou=sys,dc=x'],
    ['a dotted capital I (simple case mapping)', 'cn=ENGİNE,ou=sys,dc=x'],
  ])('normalizeDn: %s is the same entry', (_spelling, dn) => {
    expect(normalizeDn(dn)).toBe('cn=engine,ou=sys,dc=x');
  });

  it('normalizeDn: white space inside a value counts once, whatever space it is', () => {
    expect(normalizeDn('cn=Strong \u00a0 Room,dc=x')).toBe('cn=strong room,dc=x');
  });

  it.each([
    ['another attribute', 'uid=engine,ou=sys,dc=x'],
    ['a combining accent', 'cn=e\u0301ngine,ou=sys,dc=x'],
    ['an escaped comma inside the value', 'cn=engine\\,ou=sys,dc=x'],
    ['a dotless i', 'cn=engıne,ou=sys,dc=x'],
  ])('normalizeDn: %s is another entry', (_difference, dn) => {
    expect(normalizeDn(dn)).not.toBe('cn=engine,ou=sys,dc=x');
  });
});

describe('connection config helpers', () => {
  it('keeps the URL list order and refuses other schemes', () => {
    expect(parseUrlList('ldap://a:1, ldaps://b ,').map((u) => u.href)).toEqual(['ldap://a:1', 'ldaps://b']);
    expect(() => parseUrlList('http://a')).toThrow(/invalid LDAP scheme/);
    expect(() => parseUrlList(' , ')).toThrow(LdapProviderError);
  });

  it('uses the smaller of request_timeout and connection_timeout', () => {
    expect(effectiveTimeoutMs({})).toBe(90_000);
    expect(effectiveTimeoutMs({ request_timeout: 90, connection_timeout: 30 })).toBe(30_000);
    expect(effectiveTimeoutMs({ request_timeout: 5, connection_timeout: 30 })).toBe(5_000);
    expect(effectiveTimeoutMs({ connection_timeout: 7 })).toBe(7_000);
  });

  it('binds as binddn@upndomain with the binddn DN-escaped', () => {
    expect(bindIdentity({ binddn: 'cn=x,dc=y' })).toBe('cn=x,dc=y');
    expect(bindIdentity({ binddn: 'svc', upndomain: 'example.com' })).toBe('svc@example.com');
    expect(bindIdentity({ binddn: 'a,b', upndomain: 'example.com' })).toBe('a\\,b@example.com');
    expect(() => bindIdentity({ binddn: '' })).toThrow(/must provide binddn or upndomain/);
  });
});

describe('provider errors', () => {
  it('scrubs every secret, longest first', () => {
    expect(scrub('pw=abc and abcdef', ['abc', 'abcdef', undefined, ''])).toBe('pw=[redacted] and [redacted]');
  });

  it('classifies by LDAP result code and hides passwords', () => {
    const input = toProviderError(Object.assign(new Error('already exists'), { code: 68 }), 'add "cn=a"', []);
    expect(input.kind).toBe('input');
    expect(input.status).toBe(400);
    expect(input.message).toBe('add "cn=a": LDAP result code 68 "entryAlreadyExists": already exists');
    const bind = toProviderError(Object.assign(new Error('bad hunter2'), { code: 49 }), 'bind', ['hunter2']);
    expect(bind.kind).toBe('upstream');
    expect(bind.status).toBe(502);
    expect(bind.message).not.toContain('hunter2');
    const conn = toProviderError(Object.assign(new Error('connect ECONNREFUSED 127.0.0.1:1'), { code: 'ECONNREFUSED' }), 'x', []);
    expect(conn.kind).toBe('connection');
    expect(conn.status).toBe(502);
  });
});
