import { describe, expect, it } from 'vitest';
import { MemoryStorage } from '../../src/core/storage/memory.ts';
import { StorageView } from '../../src/core/storage/view.ts';
import { DynamicRoleCache } from '../../src/engines/ldap/dynamic-role-cache.ts';
import { sampleLdifData } from '../../src/engines/ldap/dynamic-roles.ts';
import { DynamicTemplates } from '../../src/engines/ldap/dynamic-templates.ts';

const T0 = Date.parse('2030-01-04T12:00:00Z');
const creation = (attr: string) => `dn: cn={{.Username}},ou=users,dc=example\nobjectClass: inetOrgPerson\ncn: {{.Username}}\nsn: ${attr}\n`;
const role = (over: Record<string, unknown> = {}) => ({ creation_ldif: creation('one'), deletion_ldif: 'dn: cn={{.Username}},ou=users,dc=example\nchangetype: delete\n', ...over });

async function store(storage: StorageView, name: string, body: Record<string, unknown>): Promise<void> {
  await storage.putJson(`role/${name}`, body);
}

function setup() {
  const storage = new StorageView(new MemoryStorage(), 'ldap/');
  return { storage, cache: new DynamicRoleCache(new DynamicTemplates(() => T0)) };
}

const rendered = (t: { execute(data: unknown): string }) => t.execute(sampleLdifData('app', T0));

describe('DynamicRoleCache (creds/:role)', () => {
  it('"a request sees the role as stored now": a rewrite by anyone (another node) is used at once, a deletion is no role', async () => {
    const { storage, cache } = setup();
    await store(storage, 'app', role());
    const first = (await cache.read(storage, 'app'))!;
    expect(rendered(first.creation)).toContain('sn: one');
    expect(await cache.read(storage, 'app')).toBe(first);
    await store(storage, 'app', role({ creation_ldif: creation('two'), username_template: 'u_{{.RoleName}}', default_ttl: 60 }));
    const second = (await cache.read(storage, 'app'))!;
    expect(rendered(second.creation)).toContain('sn: two');
    expect(second.username.execute({ DisplayName: 'd', RoleName: 'app' })).toBe('u_app');
    expect(second.role.default_ttl).toBe(60);
    await storage.delete('role/app');
    expect(await cache.read(storage, 'app')).toBeUndefined();
    await store(storage, 'app', role({ creation_ldif: creation('three') }));
    expect(rendered((await cache.read(storage, 'app'))!.creation)).toContain('sn: three');
  });

  it('"each mount has its own roles": the same name on two mounts never answers the other mount\'s role', async () => {
    const backing = new MemoryStorage();
    const a = new StorageView(backing, 'mounts/a/');
    const b = new StorageView(backing, 'mounts/b/');
    await store(a, 'app', role({ creation_ldif: creation('mount-a') }));
    await store(b, 'app', role({ creation_ldif: creation('mount-b') }));
    const templates = new DynamicTemplates(() => T0);
    const cacheA = new DynamicRoleCache(templates);
    const cacheB = new DynamicRoleCache(templates);
    expect(rendered((await cacheA.read(a, 'app'))!.creation)).toContain('sn: mount-a');
    expect(rendered((await cacheB.read(b, 'app'))!.creation)).toContain('sn: mount-b');
    expect(rendered((await cacheA.read(a, 'app'))!.creation)).toContain('sn: mount-a');
  });

  it('"a role without rollback_ldif has none; one with it gets it compiled"', async () => {
    const { storage, cache } = setup();
    await store(storage, 'app', role());
    expect((await cache.read(storage, 'app'))!.rollback).toBeUndefined();
    await store(storage, 'app', role({ rollback_ldif: 'dn: cn={{.Username}},ou=users,dc=example\nchangetype: delete\n' }));
    expect(rendered((await cache.read(storage, 'app'))!.rollback!)).toContain('changetype: delete');
  });

  it('"a stored template that does not compile is a 400 on every request, never remembered"', async () => {
    const { storage, cache } = setup();
    await store(storage, 'app', role({ creation_ldif: 'dn: {{.Username' }));
    for (let i = 0; i < 2; i++) await expect(cache.read(storage, 'app')).rejects.toMatchObject({ status: 400 });
    await store(storage, 'app', role());
    expect(rendered((await cache.read(storage, 'app'))!.creation)).toContain('sn: one');
  });
});
