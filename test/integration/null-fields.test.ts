// "null means unset": Vault's request framework treats a JSON null as a field that was not sent, and clients
// rely on it (hvac sends null for every option a caller left out). Each config and role path is written twice
// on a pair of fresh mounts (token roles: under two names): once with only the fields it needs, once with null
// for every other field it declares (read from the mounted path table, so a field added later is covered). Both
// reads must agree.
import { afterAll, beforeAll, describe, expect, inject, it } from 'vitest';
import { startFullServer, type FullServer } from '../support/full-server.ts';
import { ouConfig } from '../support/ldap-engine.ts';
import { createIsolatedOu, type IsolatedOu } from '../support/slapd.ts';

const facts = inject('slapd');
let full: FullServer;
let ou: IsolatedOu;

beforeAll(async () => {
  full = await startFullServer();
  ou = await createIsolatedOu(facts, { users: 2, serviceAccounts: 2 });
});
afterAll(async () => {
  await full?.server.core.leases.idle();
  await full?.close();
  await ou?.cleanup();
});

const request = (method: string, path: string, body?: unknown) => full.server.request(method, path, body === undefined ? {} : { body });

/** Which of the pair: 0 sends only the needed fields, 1 also sends null for every other declared field. */
type Variant = 0 | 1;

/** The fields of the path definition that answers writes to `path` below `mount`, matched as the core matches. */
function declaredFields(mount: string, path: string): string[] {
  const defs = full.server.core.mountedBackend(mount)?.paths ?? [];
  const def = defs.find((d) => (d.operations.update || d.operations.create) && new RegExp(`^(?:${d.pattern})$`).test(path));
  if (!def) throw new Error(`no path definition at ${mount}${path} takes writes`);
  return Object.keys(def.fields ?? {});
}

function withNulls(mount: string, path: string, needed: Record<string, unknown>, extra: string[] = []): Record<string, unknown> {
  const nulls = [...declaredFields(mount, path), ...extra].filter((f) => !(f in needed)).map((f) => [f, null]);
  expect(nulls.length, `${mount}${path} declares optional fields`).toBeGreaterThan(0);
  return { ...needed, ...Object.fromEntries(nulls) };
}

function without(data: Record<string, unknown>, keys: string[]): Record<string, unknown> {
  return Object.fromEntries(Object.entries(data).filter(([k]) => !keys.includes(k)));
}

interface MountedPathRow {
  /** Mount type; the pair is mounted at `<prefix>nulls-<n>-<variant>/`. */
  type: 'ldap' | 'cloud';
  auth?: boolean;
  path: string;
  /** Whether the mount is configured before the write (role paths). */
  configured: boolean;
  needed(v: Variant): Record<string, unknown>;
  /** Read fields that differ between two writes whatever they send (the account each variant manages). */
  differ?: string[];
}

const LDIF = (o: () => IsolatedOu) => ({
  creation_ldif: `dn: cn={{.Username}},${o().usersDn}\nobjectClass: inetOrgPerson\ncn: {{.Username}}\nsn: x\nuserPassword: {{.Password}}\n`,
  deletion_ldif: `dn: cn={{.Username}},${o().usersDn}\nchangetype: delete\n`,
});

const ROWS: MountedPathRow[] = [
  { type: 'ldap', path: 'config', configured: false, needed: () => ouConfig(facts, ou) },
  { type: 'ldap', path: 'static-role/app', configured: true, needed: (v) => ({ username: ou.users[v].name, rotation_period: '24h' }), differ: ['username', 'dn', 'last_service_rotation', 'next_rotation'] },
  { type: 'ldap', path: 'role/dyn', configured: true, needed: () => LDIF(() => ou) },
  { type: 'ldap', path: 'library/set', configured: true, needed: (v) => ({ service_account_names: ou.serviceAccounts[v].name }), differ: ['service_account_names'] },
  { type: 'cloud', path: 'config', configured: false, needed: () => full.cloudConfig() },
  { type: 'cloud', path: 'roles/reader', configured: true, needed: () => ({ cloud_roles: full.readerRoles() }) },
  { type: 'cloud', auth: true, path: 'config', configured: false, needed: () => full.authConfig() },
  { type: 'cloud', auth: true, path: 'role/ci', configured: true, needed: () => ({ bound_service_principal_ids: full.loginIdentity.principalId }) },
];

const configs: Record<string, () => Record<string, unknown>> = {
  ldap: () => ouConfig(facts, ou),
  cloud: () => full.cloudConfig(),
  'auth/cloud': () => full.authConfig(),
};

describe.each(ROWS.map((row, n) => ({ ...row, n, name: `${row.auth ? 'auth/' : ''}${row.type}/${row.path}` })))('$name', (row) => {
  it('"null means unset": a write with null for every optional field succeeds and reads back as one that left them out', async () => {
    const mounts = ([0, 1] as const).map((v) => `${row.auth ? 'auth/' : ''}nulls-${row.n}-${v}/`);
    for (const mount of mounts) {
      const enabled = await request('POST', `sys/${row.auth ? 'auth' : 'mounts'}/${mount.replace(/^auth\//, '')}`, { type: row.type });
      expect(enabled.status, JSON.stringify(enabled.body)).toBe(204);
      if (row.configured) expect((await request('POST', `${mount}config`, configs[`${row.auth ? 'auth/' : ''}${row.type}`]())).status).toBe(204);
    }
    const bodies = [row.needed(0), withNulls(mounts[1], row.path, row.needed(1))];
    const reads = [];
    for (const [v, mount] of mounts.entries()) {
      const written = await request('POST', `${mount}${row.path}`, bodies[v]);
      expect(written.status, `${mount}${row.path}: ${JSON.stringify(written.body)}`).toBeLessThan(300);
      const read = await request('GET', `${mount}${row.path}`);
      expect(read.status, JSON.stringify(read.body)).toBe(200);
      reads.push(without(read.body.data, row.differ ?? []));
    }
    expect(reads[1]).toEqual(reads[0]);
  });
});

describe.each(['mounts', 'auth'] as const)('sys/%s/:path', (kind) => {
  it('"null means unset": hvac\'s enable call (null description, config, options and plugin_name) mounts with the defaults', async () => {
    const mount = (v: Variant) => `hvac-style-${v}`;
    const type = kind === 'auth' ? 'cloud' : 'ldap';
    const hvac = { ...withNulls('sys/', `${kind}/${mount(1)}`, { type }, ['plugin_name']), local: false, seal_wrap: false };
    expect(hvac).toMatchObject({ options: null, plugin_name: null, config: null, description: null });
    const reads = [];
    for (const [v, body] of [{ type }, hvac].entries()) {
      const enabled = await request('POST', `sys/${kind}/${mount(v as Variant)}`, body);
      // 200 carries a warning naming seal_wrap, which this server does not declare (Vault warns the same way).
      expect(enabled.status, JSON.stringify(enabled.body)).toBeLessThan(300);
      const read = await request('GET', `sys/${kind}/${mount(v as Variant)}`);
      expect(read.status, JSON.stringify(read.body)).toBe(200);
      reads.push(without(read.body.data, ['accessor', 'uuid']));
    }
    expect(reads[1]).toEqual(reads[0]);
    expect(reads[1]).toMatchObject({ type, description: '', options: {}, config: { default_lease_ttl: 0, max_lease_ttl: 0 } });
  });
});

describe('auth/token/roles/:name', () => {
  it('"null means unset": a role written with null for every field reads back as one written with an empty body', async () => {
    const reads = [];
    for (const [name, body] of [['unsent', {}], ['nulls', withNulls('auth/token/', 'roles/nulls', {})]] as const) {
      const written = await request('POST', `auth/token/roles/${name}`, body);
      expect(written.status, JSON.stringify(written.body)).toBe(204);
      reads.push(without((await request('GET', `auth/token/roles/${name}`)).body.data, ['name']));
    }
    expect(reads[1]).toEqual(reads[0]);
  });
});

describe('auth/token/create', () => {
  it('"null means unset": id, meta, num_uses and every other field null creates the same token as an empty body', async () => {
    const body = withNulls('auth/token/', 'create', {});
    expect(body).toMatchObject({ id: null, meta: null, num_uses: null });
    const lookups = [];
    for (const sent of [{}, body]) {
      const created = await request('POST', 'auth/token/create', sent);
      expect(created.status, JSON.stringify(created.body)).toBe(200);
      const lookup = await request('POST', 'auth/token/lookup', { token: created.body.auth.client_token });
      expect(lookup.status).toBe(200);
      lookups.push(without(lookup.body.data, ['id', 'accessor', 'creation_time', 'expire_time', 'issue_time', 'ttl']));
    }
    expect(lookups[1]).toEqual(lookups[0]);
    expect(lookups[1]).toMatchObject({ num_uses: 0, meta: null, policies: ['root'], renewable: false });
  });
});
