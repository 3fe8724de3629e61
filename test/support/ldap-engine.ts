/** Helpers for LDAP engine tests: a server whose `ldap/` mount is configured against an isolated OU. */
import { expect } from 'vitest';
import { storagePrefix } from '../../src/core/mounts.ts';
import { StorageView } from '../../src/core/storage/view.ts';
import type { IsolatedOu, SlapdFacts } from './slapd.ts';
import type { TestServer } from './server.ts';

/** The mount's storage as the engine sees it (through the barrier), for set-up and checks of its records. */
export function mountStorage(s: TestServer, mount = 'ldap'): StorageView {
  return new StorageView(s.core.barrier, storagePrefix(s.core.mounts.get(`${mount}/`)!));
}

/** The smallest working config for an isolated OU: its own engine account, users searched under it. */
export function ouConfig(facts: SlapdFacts, ou: IsolatedOu, extra: Record<string, unknown> = {}): Record<string, unknown> {
  return { url: facts.url, binddn: ou.engine.dn, bindpass: ou.engine.password, userdn: ou.dn, request_timeout: 5, ...extra };
}

export async function configure(s: TestServer, facts: SlapdFacts, ou: IsolatedOu, extra: Record<string, unknown> = {}, mount = 'ldap'): Promise<void> {
  const r = await s.request('POST', `${mount}/config`, { body: ouConfig(facts, ou, extra) });
  expect(r.status, JSON.stringify(r.body)).toBe(204);
}

/** POST and expect success (204 or 200), reporting the body on failure. */
export async function ok(s: TestServer, method: string, path: string, body?: unknown): Promise<any> {
  const r = await s.request(method, path, body === undefined ? {} : { body });
  expect([200, 204], `${method} ${path}: ${r.status} ${JSON.stringify(r.body)}`).toContain(r.status);
  return r.body;
}

export async function cred(s: TestServer, name: string, mount = 'ldap'): Promise<Record<string, any>> {
  const r = await s.request('GET', `${mount}/static-cred/${name}`);
  expect(r.status, JSON.stringify(r.body)).toBe(200);
  return r.body.data;
}
