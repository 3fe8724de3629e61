// The operator's way back in, as Vault has it: sys/seal (sudo) stops a node serving until sys/unseal gets the unseal
// key; sys/generate-root makes a new root token from the unseal key alone (no token), handed over XORed with a
// one-time pad the server made. Driven over HTTP, then by hvac and node-vault as shipped.
import { afterAll, beforeAll, beforeEach, describe, expect, it } from 'vitest';
import { randomBytes } from 'node:crypto';
import nodeVault from 'node-vault';
import { findPython, pythonScripts } from '../support/python.ts';
import { startTestServer, type TestServer } from '../support/server.ts';

const python = await findPython('hvac');
const KEY = randomBytes(32);
const key = KEY.toString('base64');
let s: TestServer;

beforeAll(async () => {
  s = await startTestServer({ storage: 'sqlite', unsealKey: key, listen: true });
});
afterAll(async () => {
  await s?.close();
});
beforeEach(async () => {
  // Every test starts unsealed, with no root generation under way.
  await s.core.unseal(KEY);
  await s.request('DELETE', 'sys/generate-root/attempt', { token: null });
});

const SEAL_STATUS_KEYS = ['type', 'initialized', 'sealed', 't', 'n', 'progress', 'nonce', 'version', 'build_date', 'migration', 'recovery_seal', 'storage_type'];

/** The token the encoded answer carries, as `vault operator generate-root -decode` computes it. */
function decode(encoded: string, otp: string): string {
  const bytes = Buffer.from(encoded, 'base64');
  return Buffer.from(bytes.map((b, i) => b ^ otp.charCodeAt(i))).toString('utf8');
}

/** How many tokens the store holds (every token has an accessor). */
const tokenCount = async () => (await s.request('LIST', 'auth/token/accessors')).body.data.keys.length as number;

async function generateRoot(): Promise<string> {
  const started = await s.request('PUT', 'sys/generate-root/attempt', { token: null });
  const done = await s.request('PUT', 'sys/generate-root/update', { token: null, body: { key, nonce: started.body.nonce } });
  expect(done.status).toBe(200);
  return decode(done.body.encoded_token, started.body.otp);
}

describe('sys/seal-status', () => {
  it('"answers Vault\'s fields without a token: one key, threshold one, the cluster named only while unsealed"', async () => {
    const open = await s.request('GET', 'sys/seal-status', { token: null });
    expect(open.status).toBe(200);
    expect(Object.keys(open.body).sort()).toEqual([...SEAL_STATUS_KEYS, 'cluster_name', 'cluster_id'].sort());
    expect(open.body).toMatchObject({ type: 'shamir', initialized: true, sealed: false, t: 1, n: 1, progress: 0, nonce: '', storage_type: 'sqlite', cluster_name: 'strongroom' });
    await s.core.seal();
    const sealed = await s.request('GET', 'sys/seal-status', { token: null });
    expect(Object.keys(sealed.body).sort()).toEqual([...SEAL_STATUS_KEYS].sort());
    expect(sealed.body.sealed).toBe(true);
  });
});

describe('sys/seal', () => {
  it('"needs sudo: a token allowed update on sys/seal without sudo, and the default policy, are refused"', async () => {
    await s.request('PUT', 'sys/policies/acl/sealer', { body: { policy: 'path "sys/seal" { capabilities = ["update"] }' } });
    const sealer = (await s.request('POST', 'auth/token/create', { body: { policies: ['sealer'] } })).body.auth.client_token;
    const plain = (await s.request('POST', 'auth/token/create', { body: { policies: ['default'] } })).body.auth.client_token;
    for (const token of [sealer, plain, null]) expect((await s.request('PUT', 'sys/seal', { token })).status).toBe(403);
    expect(s.core.sealed).toBe(false);
  });

  it('"a sealed node answers 503 to everything but sys/seal-status, sys/health (503 unless sealedcode) and sys/unseal"', async () => {
    expect((await s.request('PUT', 'sys/seal')).status).toBe(204);
    expect(s.core.sealed).toBe(true);
    for (const [method, path] of [
      ['GET', 'sys/mounts'], ['GET', 'auth/token/lookup-self'], ['PUT', 'sys/seal'], ['GET', 'sys/generate-root/attempt'],
      ['PUT', 'sys/generate-root/attempt'], ['GET', 'sys/policies/acl/default'], ['LIST', 'sys/leases/lookup/'], ['GET', 'sys/key-status'],
    ]) {
      const r = await s.request(method, path);
      expect(r.status, `${method} ${path}`).toBe(503);
      expect(r.body.errors).toEqual(['Strongroom is sealed']);
    }
    expect((await s.request('GET', 'sys/health', { token: null })).status).toBe(503);
    expect((await s.request('GET', 'sys/health?sealedcode=200', { token: null })).status).toBe(200);
    expect((await s.request('GET', 'sys/seal-status', { token: null })).status).toBe(200);
  });

  it('"sealing forgets the keys and stops the background work: nothing is read or written until unsealed"', async () => {
    await s.request('PUT', 'sys/seal');
    expect(s.core.barrier.sealed).toBe(true);
    expect(s.core.cluster.leading).toBe(false);
    await expect(s.core.barrier.get('sys/token/salt')).rejects.toThrow(/sealed/);
    await expect(s.core.barrier.put('sys/x', Buffer.from('x'))).rejects.toThrow(/sealed/);
  });
});

describe('sys/unseal', () => {
  it.each([
    ['no key', {}, /missing required field "key"/],
    ['not a key at all', { key: 'not-a-key!' }, /expected the 32-byte unseal key/],
    ['16 bytes', { key: randomBytes(16).toString('base64') }, /expected the 32-byte unseal key/],
    ['33 bytes', { key: randomBytes(33).toString('base64') }, /expected the 32-byte unseal key/],
    ['another key (base64)', { key: randomBytes(32).toString('base64') }, /does not unseal this store/],
    ['another key (hex)', { key: randomBytes(32).toString('hex') }, /does not unseal this store/],
    ['the key, one byte changed', { key: Buffer.from(KEY.map((b, i) => (i === 0 ? b ^ 1 : b))).toString('base64') }, /does not unseal this store/],
    ['a number', { key: 12345 }, /expected the 32-byte unseal key/],
    ['migrate', { key, migrate: true }, /no seal migration/],
  ])('"a wrong key is refused (400) and the node stays sealed": %s', async (_name, body, message) => {
    await s.core.seal();
    const r = await s.request('PUT', 'sys/unseal', { token: null, body });
    expect(r.status).toBe(400);
    expect(r.body.errors.join(' ')).toMatch(message);
    expect(JSON.stringify(r.body)).not.toContain(key);
    expect(s.core.sealed).toBe(true);
  });

  it.each([['base64', key], ['hex', KEY.toString('hex')]])('"the unseal key (%s) unseals without a token, and everything stored is served again"', async (_form, text) => {
    await s.request('PUT', 'sys/policies/acl/kept', { body: { policy: 'path "x/*" { capabilities = ["read"] }' } });
    const token = (await s.request('POST', 'auth/token/create', { body: { policies: ['kept'] } })).body.auth.client_token;
    await s.request('PUT', 'sys/seal');
    const r = await s.request('PUT', 'sys/unseal', { token: null, body: { key: text } });
    expect(r.status).toBe(200);
    expect(r.body).toMatchObject({ sealed: false, t: 1, n: 1, progress: 0 });
    expect(s.core.cluster.leading).toBe(true);
    expect((await s.request('GET', 'auth/token/lookup-self', { token })).body.data.policies).toEqual(['default', 'kept']);
    expect((await s.request('GET', 'sys/policies/acl/kept')).body.data.policy).toMatch(/x\/\*/);
  });

  it('"reset discards nothing (there is never progress) and wins over a key sent with it; on an unsealed node the answer is its status"', async () => {
    await s.core.seal();
    const reset = await s.request('PUT', 'sys/unseal', { token: null, body: { key, reset: true } });
    expect(reset.body).toMatchObject({ sealed: true, progress: 0 });
    await s.request('PUT', 'sys/unseal', { token: null, body: { key } });
    const again = await s.request('PUT', 'sys/unseal', { token: null, body: { key } });
    expect(again.body).toMatchObject({ sealed: false });
  });
});

describe('sys/generate-root/attempt', () => {
  it('"reads the status without a token: none started, one required, the OTP as long as a token"', async () => {
    const r = await s.request('GET', 'sys/generate-root/attempt', { token: null });
    expect(r.body).toEqual({ started: false, nonce: '', progress: 0, required: 1, complete: false, encoded_token: '', encoded_root_token: '', pgp_fingerprint: '', otp_length: 28, otp: '' });
  });

  it('"a start returns a nonce and the server\'s OTP once; the status shows the nonce, never the OTP; a second start is refused"', async () => {
    const started = await s.request('PUT', 'sys/generate-root/attempt', { token: null });
    expect(started.body).toMatchObject({ started: true, progress: 0, required: 1, complete: false, otp_length: 28 });
    expect(started.body.otp).toMatch(/^[0-9A-Za-z]{28}$/);
    const status = (await s.request('GET', 'sys/generate-root/attempt', { token: null })).body;
    expect(status).toMatchObject({ started: true, nonce: started.body.nonce, otp: '' });
    const second = await s.request('PUT', 'sys/generate-root/attempt', { token: null });
    expect(second.status).toBe(400);
    expect(second.body.errors).toEqual(['root generation already in progress']);
  });

  it.each([
    ['an OTP of the client\'s (Vault before 1.10)', { otp: randomBytes(16).toString('base64') }, /otp/],
    ['a PGP key', { pgp_key: 'mQENBFXbjPUBCADjNjCUQwfxKL+RR2GA6pv/1K+zJZ8UWIF9S0lk7cVIEfJiprzzwiMwBS5cD0da' }, /PGP-encrypted root tokens are not supported/],
  ])('"a start with %s is refused as unsupported, and starts nothing"', async (_name, body, message) => {
    const r = await s.request('PUT', 'sys/generate-root/attempt', { token: null, body });
    expect(r.status).toBe(400);
    expect(r.body.errors.join(' ')).toMatch(message);
    expect((await s.request('GET', 'sys/generate-root/attempt', { token: null })).body.started).toBe(false);
  });

  it('"DELETE cancels the attempt: its nonce completes nothing"', async () => {
    const started = await s.request('PUT', 'sys/generate-root/attempt', { token: null });
    expect((await s.request('DELETE', 'sys/generate-root/attempt', { token: null })).status).toBe(204);
    expect((await s.request('GET', 'sys/generate-root/attempt', { token: null })).body.started).toBe(false);
    const r = await s.request('PUT', 'sys/generate-root/update', { token: null, body: { key, nonce: started.body.nonce } });
    expect(r.status).toBe(400);
    expect(r.body.errors).toEqual(['no root generation in progress']);
  });
});

describe('sys/generate-root/update', () => {
  it('"the unseal key completes the attempt (threshold one) without a token: the decoded token is a new root token"', async () => {
    const started = await s.request('PUT', 'sys/generate-root/attempt', { token: null });
    const done = await s.request('PUT', 'sys/generate-root/update', { token: null, body: { key, nonce: started.body.nonce } });
    expect(done.body).toMatchObject({ started: true, nonce: started.body.nonce, progress: 1, required: 1, complete: true, otp: '' });
    expect(done.body.encoded_root_token).toBe(done.body.encoded_token);
    // Base64 without padding, as Vault's roottoken package writes it.
    expect(done.body.encoded_token).toMatch(/^[A-Za-z0-9+/]+$/);
    const token = decode(done.body.encoded_token, started.body.otp);
    expect(token).toMatch(/^hvs\.[0-9A-Za-z]{24}$/);
    expect(token).not.toBe('root');
    const self = (await s.request('GET', 'auth/token/lookup-self', { token })).body.data;
    expect(self).toMatchObject({ policies: ['root'], ttl: 0, display_name: 'root' });
    // A root token indeed: sudo paths answer it.
    expect((await s.request('GET', 'sys/audit', { token })).status).toBe(200);
    expect((await s.request('GET', 'sys/generate-root/attempt', { token: null })).body.started).toBe(false);
  });

  it.each([
    ['no nonce', () => ({ key }), /missing required field "nonce"/],
    ['another nonce', () => ({ key, nonce: '00000000-0000-0000-0000-000000000000' }), /another nonce/],
    ['no key', (nonce: string) => ({ nonce }), /missing required field "key"/],
    ['a malformed key', (nonce: string) => ({ nonce, key: 'AAAA' }), /expected the 32-byte unseal key/],
    ['another key', (nonce: string) => ({ nonce, key: randomBytes(32).toString('base64') }), /does not unseal this store/],
    ['the key, one byte changed', (nonce: string) => ({ nonce, key: Buffer.from(KEY.map((b, i) => (i === 31 ? b ^ 0x80 : b))).toString('hex') }), /does not unseal this store/],
  ])('"an update with %s is refused (400), no token is made, and the attempt goes on"', async (_name, body, message) => {
    const started = await s.request('PUT', 'sys/generate-root/attempt', { token: null });
    const tokens = await tokenCount();
    const r = await s.request('PUT', 'sys/generate-root/update', { token: null, body: body(started.body.nonce) });
    expect(r.status).toBe(400);
    expect(r.body.errors.join(' ')).toMatch(message);
    expect(r.body).not.toHaveProperty('encoded_token');
    expect(await tokenCount()).toBe(tokens);
    expect((await s.request('GET', 'sys/generate-root/attempt', { token: null })).body).toMatchObject({ started: true, nonce: started.body.nonce, progress: 0 });
  });

  it('"an update with no attempt started is refused"', async () => {
    const r = await s.request('PUT', 'sys/generate-root/update', { token: null, body: { key, nonce: 'x' } });
    expect(r.status).toBe(400);
    expect(r.body.errors).toEqual(['no root generation in progress']);
  });

  it('"two updates with the key at once: one completes, the other is refused, so one token is made"', async () => {
    const started = await s.request('PUT', 'sys/generate-root/attempt', { token: null });
    const tokens = await tokenCount();
    const both = await Promise.all([1, 2].map(() => s.request('PUT', 'sys/generate-root/update', { token: null, body: { key, nonce: started.body.nonce } })));
    expect(both.map((r) => r.status).sort()).toEqual([200, 400]);
    expect(await tokenCount()).toBe(tokens + 1);
  });

  it('"a sealed node generates nothing (503)"', async () => {
    await s.core.seal();
    expect((await s.request('PUT', 'sys/generate-root/attempt', { token: null })).status).toBe(503);
    expect((await s.request('PUT', 'sys/generate-root/update', { token: null, body: { key, nonce: 'x' } })).status).toBe(503);
  });

  it('"the way back in: seal, unseal and a new root token with nothing but the unseal key"', async () => {
    await s.request('PUT', 'sys/seal');
    await s.request('PUT', 'sys/unseal', { token: null, body: { key } });
    const token = await generateRoot();
    expect((await s.request('POST', 'auth/token/create', { token, body: { policies: ['root'] } })).status).toBe(200);
  });
});

describe('Vault clients', () => {
  it('"node-vault: status, seal, unseal, generateRootInit / Update / Cancel"', async () => {
    const vault = nodeVault({ endpoint: s.url, token: 'root', apiVersion: 'v1' });
    expect(await vault.status()).toMatchObject({ sealed: false, t: 1, n: 1 });
    await vault.seal();
    expect((await vault.status()).sealed).toBe(true);
    expect(await vault.unseal({ key })).toMatchObject({ sealed: false });
    const started = await vault.generateRootInit();
    await vault.generateRootCancel();
    const again = await vault.generateRootInit();
    expect(again.nonce).not.toBe(started.nonce);
    const done = await vault.generateRootUpdate({ key, nonce: again.nonce });
    expect(done.complete).toBe(true);
    const token = decode(done.encoded_token, again.otp);
    expect((await nodeVault({ endpoint: s.url, token, apiVersion: 'v1' }).tokenLookupSelf()).data.policies).toEqual(['root']);
  });

  it.skipIf(!python)('"hvac: read_seal_status, seal, submit_unseal_key, start_root_token_generation, generate_root"', async () => {
    const py = await pythonScripts(python!, 'import json, sys\nimport hvac\nfrom hvac import exceptions\nctx = json.load(sys.stdin)\nclient = hvac.Client(url=ctx["url"], token="root")\n');
    try {
      const out = await py.run(String.raw`
import base64
before = client.sys.read_seal_status()
client.sys.seal()
sealed = client.sys.is_sealed()
unsealed = client.sys.submit_unseal_key(key=ctx["key"])
try:
    client.sys.start_root_token_generation(otp=base64.b64encode(b"0123456789abcdef").decode())
    refused = None
except exceptions.InvalidRequest as err:
    refused = str(err)
started = client.sys.start_root_token_generation()
progress = client.sys.read_root_generation_progress()
done = client.sys.generate_root(key=ctx["key"], nonce=started["nonce"])
encoded = base64.b64decode(done["encoded_token"] + "=" * (-len(done["encoded_token"]) % 4))
token = bytes(a ^ b for a, b in zip(encoded, started["otp"].encode())).decode()
me = hvac.Client(url=ctx["url"], token=token).lookup_token()
print(json.dumps({"before": before, "sealed": sealed, "unsealed": unsealed, "refused": refused, "progress": progress, "done": done["complete"], "policies": me["data"]["policies"]}))
`, { url: s.url, key });
      expect(out.before).toMatchObject({ type: 'shamir', sealed: false });
      expect(out.sealed).toBe(true);
      expect(out.unsealed).toMatchObject({ sealed: false });
      expect(out.refused).toMatch(/otp/);
      expect(out.progress).toMatchObject({ started: true, required: 1, otp: '' });
      expect(out.done).toBe(true);
      expect(out.policies).toEqual(['root']);
    } finally {
      await py.close();
    }
  });
});
