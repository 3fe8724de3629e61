// Response wrapping as Vault's own clients ask for it: hvac 0.11 (wrap_ttl on its calls, sys.unwrap, auth_cubbyhole)
// and node-vault (the X-Vault-Wrap-TTL header through requestOptions, vault.unwrap), against a listening server.
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import nodeVault from 'node-vault';
import { HVAC_PRELUDE, findPython, pythonScripts, type PythonScripts } from '../support/python.ts';
import { startTestServer, type TestServer } from '../support/server.ts';

const python = await findPython('hvac');
if (!python) console.warn('hvac wrapping tests skipped: python3-hvac is not installed');

let s: TestServer;
beforeAll(async () => {
  s = await startTestServer({ listen: true });
});
afterAll(async () => {
  await s?.close();
});

describe.skipIf(!python)('hvac 0.11', () => {
  let py: PythonScripts;
  beforeAll(async () => {
    py = await pythonScripts(python!, HVAC_PRELUDE);
  });
  afterAll(async () => {
    await py?.close();
  });
  const run = <T = any>(script: string) => py.run<T>(script, { url: s.url, token: 'root' });

  it('"auth.token.create(wrap_ttl=...)" is wrapped; sys.unwrap returns the token once, and auth_cubbyhole logs in with another', async () => {
    const out = await run(`
wrapped = client.auth.token.create(policies=["default"], ttl="1h", wrap_ttl="60s")
info = wrapped["wrap_info"]
unwrapped = client.sys.unwrap(info["token"])
second = refusal(lambda: client.sys.unwrap(info["token"]))
other = client.auth.token.create(policies=["default"], ttl="1h", wrap_ttl="2m")["wrap_info"]
fresh = hvac.Client(url=ctx["url"])
fresh.auth_cubbyhole(other["token"])
emit({"auth": wrapped["auth"], "ttl": info["ttl"], "path": info["creation_path"], "same": unwrapped["auth"]["accessor"] == info["wrapped_accessor"],
      "second": second, "logged_in": fresh.is_authenticated(), "cubby_token": fresh.token != other["token"]})
`);
    expect(out).toEqual({ auth: null, ttl: 60, path: 'auth/token/create', same: true, second: 'InvalidRequest', logged_in: true, cubby_token: true });
  });

  it('"read(path, wrap_ttl=...)", then lookup and rewrap through write(): the rewrapped token unwraps, the old one does not', async () => {
    const out = await run(`
info = client.read("sys/mounts/sys", wrap_ttl="90s")["wrap_info"]
looked = client.write("sys/wrapping/lookup", token=info["token"])["data"]
rewrapped = client.write("sys/wrapping/rewrap", token=info["token"])["wrap_info"]
old = refusal(lambda: client.sys.unwrap(info["token"]))
data = hvac.Client(url=ctx["url"], token=rewrapped["token"]).sys.unwrap()["data"]
emit({"looked": [looked["creation_path"], looked["creation_ttl"]], "rewrapped_ttl": rewrapped["ttl"], "old": old, "type": data["type"]})
`);
    expect(out).toEqual({ looked: ['sys/mounts/sys', 90], rewrapped_ttl: 90, old: 'InvalidRequest', type: 'system' });
  });
});

describe('node-vault', () => {
  const client = (token = 'root') => nodeVault({ endpoint: s.url, token, apiVersion: 'v1' });

  it('"the X-Vault-Wrap-TTL header through requestOptions" wraps a write to sys/wrapping/wrap; vault.unwrap returns it once', async () => {
    const vault = client();
    const wrapped = await vault.write('sys/wrapping/wrap', { api_key: 'k-123' }, { headers: { 'X-Vault-Wrap-TTL': '60s' } });
    expect(wrapped.data).toBeNull();
    const token = wrapped.wrap_info.token as string;
    const out = await vault.unwrap({ token });
    expect(out.data).toEqual({ api_key: 'k-123' });
    await expect(vault.unwrap({ token })).rejects.toMatchObject({ response: { statusCode: 400 } });
  });

  it('"on any request": vault.list (the LIST method itself, on its own code path) is wrapped too', async () => {
    const wrapped = await client().list('sys/policies/acl', { headers: { 'X-Vault-Wrap-TTL': '30s' } });
    expect(wrapped.data).toBeNull();
    const out = await client().unwrap({ token: wrapped.wrap_info.token });
    expect(out.data.keys).toContain('default');
  });

  it('"anyone holding the wrapping token": a client made with it unwraps a wrapped read', async () => {
    const wrapped = await client().read('sys/mounts/sys', { headers: { 'X-Vault-Wrap-TTL': '30s' } });
    const out = await client(wrapped.wrap_info.token).unwrap({});
    expect(out.data.type).toBe('system');
  });
});
