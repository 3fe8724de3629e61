// Audit devices through the API (docs/audit.md): sys/audit and sys/audit-hash, the options a device is checked
// against, and the entries a file device writes: Vault's schema, what is hashed and what is not, failed and
// unauthenticated requests, and the device table as cluster configuration.
import { randomBytes } from 'node:crypto';
import { readFileSync } from 'node:fs';
import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest';
import { TOO_DEEP, TOO_MANY } from '../../src/core/audit/entry.ts';
import { definePath, type BackendFactory } from '../../src/core/framework.ts';
import { MemoryStorage } from '../../src/core/storage/memory.ts';
import { auditDir, auditHash, enableFile, entriesAt, entriesOf, readEntries } from '../support/audit.ts';
import { freePort } from '../support/ports.ts';
import { startTestServer, type TestServer } from '../support/server.ts';
import { testBackend } from '../support/test-backend.ts';

/** An engine whose handler fails as a bug would: the client gets a 500. */
const failingBackend: BackendFactory = () => ({
  paths: [definePath({ pattern: 'boom', description: 'Fails.', operations: { read: async () => { throw new Error('a bug'); } } })],
});
const backends = { secret: { test: testBackend(new Map()), failing: failingBackend }, auth: {} };
const HMAC = /^hmac-sha256:[0-9a-f]{64}$/;
const logs = auditDir();
let s: TestServer;

beforeAll(async () => {
  s = await startTestServer({ backends });
  expect((await s.request('POST', 'sys/mounts/kv', { body: { type: 'test' } })).status).toBe(204);
  expect((await s.request('POST', 'sys/mounts/failing', { body: { type: 'failing' } })).status).toBe(204);
});
afterEach(async () => {
  for (const path of Object.keys((await s.request('GET', 'sys/audit')).body.data)) await s.request('DELETE', `sys/audit/${path}`);
});
afterAll(async () => {
  await s?.close();
  logs.cleanup();
});

/** A token whose only policy is `policy`. */
async function tokenWith(policy: string): Promise<string> {
  const name = `p${Math.random().toString(36).slice(2, 8)}`;
  expect((await s.request('PUT', `sys/policies/acl/${name}`, { body: { policy } })).status).toBe(204);
  return (await s.request('POST', 'auth/token/create', { body: { policies: [name] } })).body.auth.client_token;
}

describe('sys/audit', () => {
  it('"enable, list, disable": a device is listed under its path with type, description, options and local, and is gone once disabled', async () => {
    const file = logs.file('listed.log');
    const r = await s.request('PUT', 'sys/audit/listed', { body: { type: 'file', description: 'for the auditors', options: { file_path: file, hmac_accessor: false }, local: true } });
    expect(r.status).toBe(204);
    const listed = await s.request('GET', 'sys/audit');
    expect(listed.body.data).toEqual({ 'listed/': { type: 'file', description: 'for the auditors', options: { file_path: file, hmac_accessor: 'false' }, local: true, path: 'listed/' } });
    // Vault clients read the table at the top level too.
    expect(listed.body['listed/']).toMatchObject({ type: 'file' });
    expect((await s.request('DELETE', 'sys/audit/listed')).status).toBe(204);
    expect((await s.request('GET', 'sys/audit')).body.data).toEqual({});
    expect((await s.request('DELETE', 'sys/audit/listed')).status, 'disabling what is not enabled').toBe(204);
  });

  it('"every sys/audit path needs sudo": list, enable, disable and audit-hash are refused without it, allowed with it', async () => {
    await enableFile(s, 'sudo', logs.file('sudo.log'));
    const without = await tokenWith('path "sys/audit*" { capabilities = ["create", "read", "update", "delete", "list"] }');
    const withSudo = await tokenWith('path "sys/audit*" { capabilities = ["create", "read", "update", "delete", "list", "sudo"] }');
    const calls = [
      ['GET', 'sys/audit', undefined],
      ['PUT', 'sys/audit/other', { type: 'file', options: { file_path: 'discard' } }],
      ['POST', 'sys/audit-hash/sudo', { input: 'x' }],
      ['DELETE', 'sys/audit/other', undefined],
    ] as const;
    for (const [method, path, body] of calls) {
      expect((await s.request(method, path, { body, token: without })).status, `${method} ${path} without sudo`).toBe(403);
      expect((await s.request(method, path, { body, token: withSudo })).status, `${method} ${path} with sudo`).toBeLessThan(300);
    }
  });

  it.each([
    [{ type: 'syslog', options: {} }, /syslog audit device is not available: use a socket device/],
    [{ type: 'kafka', options: {} }, /invalid value for field "type": unknown audit device type/],
    [{ options: { file_path: 'discard' } }, /missing required field "type"/],
    [{ type: 'file', options: {} }, /missing required audit device option "file_path"/],
    [{ type: 'file', options: { file_path: 'relative/audit.log' } }, /"file_path": must be an absolute path/],
    [{ type: 'file', options: { file_path: 'discard', mode: '0700' } }, /"mode": an audit file may not be executable/],
    [{ type: 'file', options: { file_path: 'discard', mode: '0640', format: 'jsonx' } }, /"format": only "json"/],
    [{ type: 'file', options: { file_path: 'discard', mode: '4600' } }, /"mode": only permission bits/],
    [{ type: 'file', options: { file_path: 'discard', prefix: 'x' } }, /"prefix": refused unless the server is started with STRONGROOM_AUDIT_ALLOW_PREFIX=true/],
    [{ type: 'file', options: { file_path: 'discard', log_raw: true } }, /"log_raw": writing secrets in the clear is refused unless .*STRONGROOM_AUDIT_ALLOW_RAW=true/],
    [{ type: 'file', options: { file_path: 'discard', hmac_accessor: 'maybe' } }, /"hmac_accessor": expected a boolean/],
    [{ type: 'file', options: { file_path: 'discard', fallback: true } }, /unknown file audit device option "fallback"/],
    [{ type: 'socket', options: { address: 'nowhere' } }, /"address": expected host:port/],
    [{ type: 'socket', options: { address: '127.0.0.1:70000' } }, /"address": expected host:port/],
    [{ type: 'socket', options: { address: '127.0.0.1:9', socket_type: 'sctp' } }, /"socket_type": expected "tcp", "udp" or "unix"/],
    [{ type: 'socket', options: { address: '127.0.0.1:9', write_timeout: '10m' } }, /"write_timeout": expected from 1s to 60s/],
  ])('"options are checked before anything is stored": %j is a 400', async (body, message) => {
    const r = await s.request('PUT', 'sys/audit/checked', { body });
    expect(r.status).toBe(400);
    expect(r.body.errors.join()).toMatch(message);
    expect((await s.request('GET', 'sys/audit')).body.data).toEqual({});
  });

  it('"a device that cannot be opened is refused and nothing is stored": a missing directory, a socket nobody listens on', async () => {
    const file = await s.request('PUT', 'sys/audit/nodir', { body: { type: 'file', options: { file_path: logs.file('missing/dir/audit.log') } } });
    expect(file.status).toBe(400);
    expect(file.body.errors[0]).toMatch(/the file audit device cannot be opened: ENOENT/);
    const socket = await s.request('PUT', 'sys/audit/nolistener', { body: { type: 'socket', options: { address: `127.0.0.1:${await freePort()}` } } });
    expect(socket.status).toBe(400);
    expect(socket.body.errors[0]).toMatch(/the socket audit device cannot be opened: ECONNREFUSED$/);
    expect((await s.request('GET', 'sys/audit')).body.data).toEqual({});
  });

  it('"a path in use is refused", as is one nested in it or around it', async () => {
    await enableFile(s, 'team/a', 'discard');
    for (const path of ['team/a', 'team/a/b', 'team']) {
      const r = await s.request('PUT', `sys/audit/${path}`, { body: { type: 'file', options: { file_path: 'discard' } } });
      expect(r.status, path).toBe(400);
      expect(r.body.errors[0]).toBe('path already in use at "team/a/"');
    }
  });
});

describe('sys/audit-hash', () => {
  it('"the hash is what the device writes for the value": hmac-sha256 under the device\'s own salt, new when a path is enabled again', async () => {
    const file = logs.file('hash.log');
    await enableFile(s, 'hash', file);
    await enableFile(s, 'hash2', 'discard');
    const value = `value-${Math.random()}`;
    const { body } = await s.request('POST', 'kv/data/hashed', { body: { value } });
    const hash = await auditHash(s, 'hash', value);
    expect(hash).toMatch(HMAC);
    const [request] = entriesAt(readEntries(file), 'kv/data/hashed');
    expect(request.request.data!.value).toBe(hash);
    expect(body).toBeUndefined();
    expect(await auditHash(s, 'hash2', value), 'each device has its own salt').not.toBe(hash);
    expect(await auditHash(s, 'hash', value), 'the same input, the same hash').toBe(hash);
    await s.request('DELETE', 'sys/audit/hash');
    await enableFile(s, 'hash', file);
    expect(await auditHash(s, 'hash', value), 'a device enabled again has a new salt').not.toBe(hash);
  });

  it('"an unknown device is a 400"', async () => {
    const r = await s.request('POST', 'sys/audit-hash/nothing', { body: { input: 'x' } });
    expect(r.status).toBe(400);
    expect(r.body.errors).toEqual(['no audit device is enabled at "nothing/"']);
  });
});

describe('entries', () => {
  it('"one request entry before the handler and one response entry after", in Vault\'s schema, sharing the request id', async () => {
    const file = logs.file('schema.log');
    await enableFile(s, 'schema', file);
    const token = await tokenWith('path "kv/*" { capabilities = ["create", "read", "update"] }');
    const lookup = (await s.request('GET', 'auth/token/lookup-self', { token })).body.data;
    await s.request('PUT', 'kv/data/schema', { body: { value: 'v', count: 7 }, token });
    const read = await s.request('GET', 'kv/data/schema', { token });
    const [req, res] = entriesOf(readEntries(file), read.body.request_id);
    const h = (v: string) => auditHash(s, 'schema', v);
    const auth = {
      client_token: await h(token), accessor: await h(lookup.accessor), display_name: 'token', policies: lookup.policies, token_policies: lookup.policies,
      token_type: 'service', token_ttl: lookup.creation_ttl, token_issue_time: new Date(lookup.creation_time * 1000).toISOString().replace('.000', ''),
    };
    const mount = (await s.request('GET', 'sys/mounts/kv')).body.data;
    const request = {
      id: read.body.request_id, operation: 'read', mount_point: 'kv/', mount_type: 'test', mount_accessor: mount.accessor, mount_class: 'secret',
      client_token: await h(token), client_token_accessor: await h(lookup.accessor), namespace: { id: 'root' }, path: 'kv/data/schema', remote_address: '127.0.0.1',
    };
    expect(req).toEqual({ time: expect.stringMatching(/^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z$/), type: 'request', auth, request });
    expect(res).toEqual({
      time: expect.any(String), type: 'response', auth, request,
      response: { mount_point: 'kv/', mount_type: 'test', mount_accessor: mount.accessor, mount_class: 'secret', data: { value: await h('v'), count: 7 } },
    });
    expect(Date.parse(res.time)).toBeGreaterThanOrEqual(Date.parse(req.time));
  });

  it('"every string value is hashed, in lists and nested objects at any depth; keys, numbers, booleans and nulls are kept"', async () => {
    const file = logs.file('nested.log');
    await enableFile(s, 'nested', file);
    const meta = { owner: 'team-a', 'cost-center': '42' };
    const created = await s.request('POST', 'auth/token/create', { body: { policies: ['default', 'extra'], meta, num_uses: 3, renewable: true, ttl: '1h' } });
    const mounts = await s.request('GET', 'sys/mounts');
    const entries = readEntries(file);
    const h = (v: string) => auditHash(s, 'nested', v);
    const [createReq, createRes] = entriesOf(entries, created.body.request_id);
    expect(createReq.request.data).toEqual({
      policies: [await h('default'), await h('extra')], meta: { owner: await h('team-a'), 'cost-center': await h('42') }, num_uses: 3, renewable: true, ttl: await h('1h'),
    });
    expect(createRes.response!.auth).toEqual({
      client_token: await h(created.body.auth.client_token), accessor: await h(created.body.auth.accessor), policies: ['default', 'extra'], token_policies: ['default', 'extra'],
      metadata: meta, num_uses: 3, token_type: 'service', token_ttl: 3600,
    });
    const [, mountsRes] = entriesOf(entries, mounts.body.request_id);
    expect(mountsRes.response!.data!['kv/']).toMatchObject({
      type: await h('test'), accessor: await h(mounts.body.data['kv/'].accessor), local: false, options: {},
      config: { default_lease_ttl: 0, max_lease_ttl: 0, force_no_cache: false },
    });
  });

  it('"a hostile body is recorded without harm": past 64 levels of nesting (of 5,000) a marker, past 10,000 values a marker, a "__proto__" key stays a key', async () => {
    const file = logs.file('hostile.log');
    await enableFile(s, 'hostile', file);
    const many = await s.request('POST', 'kv/data/many', { body: { value: 'v', many: Array.from({ length: 20_000 }, (_, i) => `s${i}`) } });
    expect(many.status).toBe(200);
    const manyEntry = entriesAt(readEntries(file), 'kv/data/many')[0].request.data!;
    expect(manyEntry.value).toMatch(HMAC);
    expect(manyEntry.many.filter((v: string) => HMAC.test(v))).toHaveLength(9_997);
    expect(manyEntry.many.slice(9_997).every((v: string) => v === TOO_MANY)).toBe(true);
    const deep = `${'{"a":'.repeat(5000)}"bottom"${'}'.repeat(5000)}`;
    const r = await s.request('POST', 'kv/data/hostile', { body: `{"value":"v","deep":${deep},"__proto__":{"polluted":"yes"}}` });
    expect(r.status, JSON.stringify(r.body)).toBe(200);
    const [entry] = entriesAt(readEntries(file), 'kv/data/hostile');
    let level = entry.request.data!.deep;
    let depth = 1;
    for (; typeof level === 'object'; depth++) level = level.a;
    expect([depth, level]).toEqual([64, TOO_DEEP]);
    expect(Object.getOwnPropertyNames(entry.request.data!)).toContain('__proto__');
    expect(JSON.stringify(entry)).not.toContain('bottom');
    expect(({} as Record<string, unknown>).polluted).toBeUndefined();
  });

  it('"hmac_accessor=false writes accessors in the clear", client tokens still hashed', async () => {
    const file = logs.file('accessor.log');
    await enableFile(s, 'accessor', file, { hmac_accessor: false });
    const created = await s.request('POST', 'auth/token/create', { body: { policies: ['default'] } });
    const [req, res] = entriesOf(readEntries(file), created.body.request_id);
    const root = (await s.request('GET', 'auth/token/lookup-self')).body.data;
    expect(req.auth).toMatchObject({ client_token: expect.stringMatching(HMAC), accessor: root.accessor });
    expect(req.request.client_token_accessor).toBe(root.accessor);
    expect(res.response!.auth).toMatchObject({ client_token: await auditHash(s, 'accessor', created.body.auth.client_token), accessor: created.body.auth.accessor });
  });

  it('"audit_non_hmac_request_keys and _response_keys leave the named keys in the clear", never a credential name or a secret field', async () => {
    const file = logs.file('exempt.log');
    await enableFile(s, 'exempt', file);
    const tune = await s.request('POST', 'sys/mounts/kv/tune', { body: { audit_non_hmac_request_keys: 'value,password', audit_non_hmac_response_keys: ['value'] } });
    expect(tune.status).toBe(204);
    expect((await s.request('GET', 'sys/mounts/kv/tune')).body.data).toMatchObject({ audit_non_hmac_request_keys: ['value', 'password'], audit_non_hmac_response_keys: ['value'] });
    expect((await s.request('GET', 'sys/mounts')).body.data['kv/'].config).toMatchObject({ audit_non_hmac_request_keys: ['value', 'password'] });
    const write = await s.request('POST', 'kv/data/exempt', { body: { value: 'in the clear', password: 'never in the clear' } });
    const read = await s.request('GET', 'kv/data/exempt');
    // sys/audit-hash's input is a secret field: naming it on sys/ changes nothing.
    await s.request('POST', 'sys/mounts/sys/tune', { body: { audit_non_hmac_request_keys: 'input' } });
    const hashed = await s.request('POST', 'sys/audit-hash/exempt', { body: { input: 'a secret input' } });
    const entries = readEntries(file);
    expect(entriesOf(entries, write.body.request_id)[0].request.data).toEqual({ value: 'in the clear', password: await auditHash(s, 'exempt', 'never in the clear') });
    expect(entriesOf(entries, read.body.request_id)[1].response!.data).toEqual({ value: 'in the clear' });
    expect(entriesOf(entries, hashed.body.request_id)[0].request.data).toEqual({ input: hashed.body.data.hash });
    await s.request('POST', 'sys/mounts/sys/tune', { body: { audit_non_hmac_request_keys: '' } });
    await s.request('POST', 'sys/mounts/kv/tune', { body: { audit_non_hmac_request_keys: [], audit_non_hmac_response_keys: '' } });
    expect((await s.request('GET', 'sys/mounts/kv/tune')).body.data).not.toHaveProperty('audit_non_hmac_request_keys');
  });

  it('"elide_list_responses writes a list answer\'s keys as their count"', async () => {
    const file = logs.file('elide.log');
    await enableFile(s, 'elide', file, { elide_list_responses: true });
    for (const k of ['a', 'b', 'c']) await s.request('POST', `kv/data/listed/${k}`, { body: { value: k } });
    const listed = await s.request('LIST', 'kv/data/listed/');
    expect(listed.body.data.keys).toEqual(['a', 'b', 'c']);
    expect(entriesOf(readEntries(file), listed.body.request_id)[1].response!.data).toEqual({ keys: 3 });
  });

  it.each([
    ['403, a token the ACL refuses', 'GET', 'kv/data/x', 'nope', 'permission denied'],
    ['400, a field that does not decode', 'POST', 'kv/data/x', 'root', 'invalid value for field "count"'],
    ['404, no route', 'GET', 'nothing/here', 'root', 'no handler for route "nothing/here"'],
    ['405, an operation the path lacks', 'DELETE', 'sys/audit-hash/x', 'root', 'unsupported operation'],
  ])('"refused requests are on record": %s gets a request and a response entry, both with the error', async (what, method, path, token, error) => {
    const file = logs.file(`refused-${what.slice(0, 3)}.log`);
    await enableFile(s, 'refused', file);
    const r = await s.request(method, path, { token, body: method === 'POST' ? { count: 'many' } : undefined });
    expect(r.status).toBeGreaterThanOrEqual(400);
    const [req, res] = entriesAt(readEntries(file), path);
    expect(req).toMatchObject({ type: 'request', error: expect.stringContaining(error), request: { path, client_token: await auditHash(s, 'refused', token) } });
    expect(res).toMatchObject({ type: 'response', error: req.error, request: { id: req.request.id } });
  });

  it('"a handler\'s failure is on record": the request entry as it was before the handler, the response entry with the 500 the client got', async () => {
    const file = logs.file('failing.log');
    await enableFile(s, 'failing', file);
    const r = await s.request('GET', 'failing/boom');
    expect(r.status).toBe(500);
    const [req, res] = entriesAt(readEntries(file), 'failing/boom');
    expect(req).not.toHaveProperty('error');
    expect(res.error).toBe(r.body.errors[0]);
    expect(res.error).toMatch(/^internal error \(request [0-9a-f-]{36}\)$/);
  });

  it('"unauthenticated requests are on record": no auth block, and a raw answer (sys/health) without its body', async () => {
    const file = logs.file('anonymous.log');
    await enableFile(s, 'anonymous', file);
    expect((await s.request('GET', 'sys/health', { token: null })).status).toBe(200);
    const [req, res] = entriesAt(readEntries(file), 'sys/health');
    expect(req.auth).toEqual({});
    expect(req.request).not.toHaveProperty('client_token');
    expect(res.response).toEqual({ mount_point: 'sys/', mount_type: 'system', mount_accessor: expect.any(String), mount_class: 'secret' });
  });

  it('"prefix and log_raw only with the server\'s leave": a prefix before every line, every value in the clear', async () => {
    const allowed = await startTestServer({ backends, env: { STRONGROOM_AUDIT_ALLOW_PREFIX: 'true', STRONGROOM_AUDIT_ALLOW_RAW: 'true' } });
    try {
      const file = logs.file('raw.log');
      await allowed.request('POST', 'sys/mounts/kv', { body: { type: 'test' } });
      await enableFile(allowed, 'raw', file, { prefix: 'strongroom-audit: ', log_raw: true });
      await allowed.request('POST', 'kv/data/raw', { body: { value: 'plain' } });
      const lines = readFileSync(file, 'utf8').trim().split('\n');
      expect(lines.every((l) => l.startsWith('strongroom-audit: {'))).toBe(true);
      const entry = JSON.parse(lines.find((l) => l.includes('"kv/data/raw"'))!.slice('strongroom-audit: '.length));
      expect(entry).toMatchObject({ auth: { client_token: 'root' }, request: { client_token: 'root', data: { value: 'plain' } } });
      expect((await allowed.request('PUT', 'sys/audit/nl', { body: { type: 'file', options: { file_path: 'discard', prefix: 'a\nb' } } })).body.errors[0]).toMatch(/line break/);
    } finally {
      await allowed.close();
    }
  });
});

describe('the device table', () => {
  it('"devices are cluster configuration kept behind the barrier": another server on the same storage opens them on load(), with the same salt', async () => {
    const storage = new MemoryStorage();
    const unsealKey = randomBytes(32).toString('base64');
    const a = await startTestServer({ storageInstance: storage, unsealKey, backends });
    const b = await startTestServer({ storageInstance: storage, unsealKey, backends });
    try {
      const fileA = logs.file('node-a.log');
      await enableFile(a, 'shared', fileA);
      expect((await b.request('GET', 'sys/audit')).body.data, 'not yet noticed').toEqual({});
      await b.core.audit.load();
      expect(Object.keys((await b.request('GET', 'sys/audit')).body.data)).toEqual(['shared/']);
      expect(await auditHash(b, 'shared', 'same salt')).toBe(await auditHash(a, 'shared', 'same salt'));
      // Both nodes write their own log at the same file path; here it is one file, so both appear in it.
      const fromB = await b.request('GET', 'sys/mounts');
      expect(entriesOf(readEntries(fileA), fromB.body.request_id)).toHaveLength(2);
      expect((await a.request('DELETE', 'sys/audit/shared')).status).toBe(204);
      await b.core.audit.load();
      expect(b.core.audit.enabled).toBe(false);
      // Nothing in the stored table is readable without the unseal key.
      const raw = [...(await storage.list('sys/audit/'))];
      expect(raw).toEqual(['table']);
      expect((await storage.get('sys/audit/table'))!.toString('latin1')).not.toContain('node-a.log');
    } finally {
      await b.close();
      await a.close();
    }
  });

  it('"a restart opens the enabled devices again": entries go on into the same file', async () => {
    const file = logs.file('restart.log');
    const dir = auditDir();
    const unsealKey = randomBytes(32).toString('base64');
    try {
      const first = await startTestServer({ storage: 'sqlite', dataDir: dir.dir, unsealKey, backends });
      await enableFile(first, 'kept', file);
      const before = await auditHash(first, 'kept', 'x');
      await first.close();
      const second = await startTestServer({ storage: 'sqlite', dataDir: dir.dir, unsealKey, backends });
      try {
        const r = await second.request('GET', 'sys/mounts');
        expect(entriesOf(readEntries(file), r.body.request_id)).toHaveLength(2);
        expect(await auditHash(second, 'kept', 'x')).toBe(before);
      } finally {
        await second.close();
      }
    } finally {
      dir.cleanup();
    }
  });
});
