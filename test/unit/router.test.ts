import { describe, expect, it } from 'vitest';
import type { Backend, PathDefinition } from '../../src/core/framework.ts';
import { PathTable, isRootProtected, literalPrefix } from '../../src/core/router.ts';

const table = (...patterns: string[]) => new PathTable({ paths: patterns.map((pattern): PathDefinition => ({ pattern, description: '', operations: {} })) } as unknown as Backend);

describe('engine path table', () => {
  it('"patterns are tried in the order the engine declares them: the first that matches wins"', () => {
    const t = table('role/(?<prefix>(?:.+/)?)', 'role/(?<name>\\w+)', '(?:leases/)?revoke/(?<id>.+)', 'a|b/(?<x>\\w+)');
    expect(t.match('role/')?.def.pattern).toBe('role/(?<prefix>(?:.+/)?)');
    expect(t.match('role/web')).toEqual({ def: expect.objectContaining({ pattern: 'role/(?<name>\\w+)' }), params: { name: 'web' } });
    expect(t.match('revoke/x/y')?.params).toEqual({ id: 'x/y' });
    expect(t.match('leases/revoke/z')?.params).toEqual({ id: 'z' });
    expect(t.match('b/q')?.params).toEqual({ x: 'q' });
    expect(t.match('a')?.params).toEqual({});
    expect(t.match('rolex')).toBeUndefined();
  });

  it('"a pattern is skipped without running it only when the path cannot start as the pattern must"', () => {
    const cases: Array<[string, string]> = [
      ['config', 'config'],
      ['static-role/(?<name>\\w+)', 'static-role/'],
      ['static-role/?(?<prefix>(?:.+/)?)', 'static-role'],
      ['ab*c', 'a'],
      ['ab+c', 'ab'],
      ['ab{0,2}', 'a'],
      ['(?:leases/)?revoke', ''],
      ['a|b', ''],
      ['(?:a|b)c', ''],
      ['[|]x|y', ''],
      ['x[|]y', 'x'],
      ['creds\\/x', 'creds'],
    ];
    for (const [pattern, prefix] of cases) expect(literalPrefix(pattern), pattern).toBe(prefix);
  });
});

describe('isRootProtected', () => {
  it('"sys paths that need sudo on top of their capability (Vault\'s root-protected list)": each listed path, and nothing else', () => {
    const protectedPaths = [
      'sys/auth/ldap', 'sys/auth/a/b', 'sys/remount', 'sys/rotate', 'sys/seal', 'sys/raw', 'sys/raw/sys/policy', 'sys/leases/revoke-prefix/x',
      'sys/leases/revoke-force/x', 'sys/leases/lookup/', 'sys/leases/lookup/a', 'sys/revoke-prefix/x', 'sys/revoke-force/', 'sys/audit', 'sys/audit/file',
      'sys/audit-hash/file', 'auth/token/revoke-orphan', 'auth/token/revoke-orphan/x', 'auth/token/accessors', 'auth/token/accessors/',
    ];
    const open = [
      'sys/auth', 'sys/auth/', 'sys/remount/x', 'sys/sealx', 'sys/rawx', 'sys/leases/revoke-prefix', 'sys/leases/lookup', 'sys/auditx',
      'auth/token/accessors/x', 'auth/token/revoke', 'ldap/static-cred/x', 'kv/data/sys/seal', 'xsys/seal', 'Sys/seal', 'sys//seal',
      'auth/ldap/token/accessors', 'auth/tokens/accessors', '',
    ];
    for (const p of protectedPaths) expect(isRootProtected(p), p).toBe(true);
    for (const p of open) expect(isRootProtected(p), p).toBe(false);
  });
});
