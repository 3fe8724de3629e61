// Events of the leader's background work (docs/events.md): drift (a password changed behind the server's back is
// announced once when the leader's verification finds it, and again when the held password binds once more) and a
// failed automated rotation of the bind password; each in the transaction of the record it reports.
import { afterEach, beforeEach, describe, expect, inject, it, vi } from 'vitest';
import { FakeClock } from '../../src/core/clock.ts';
import { createIsolatedOu, resetPassword, type IsolatedOu } from '../support/slapd.ts';
import { startTestServer, type TestServer } from '../support/server.ts';
import { configure, cred, ok } from '../support/ldap-engine.ts';
import { startTcpProxy } from '../support/tcp-proxy.ts';

const facts = inject('slapd');
let ou: IsolatedOu;
let s: TestServer;
beforeEach(async () => {
  ou = await createIsolatedOu(facts, { users: 1, serviceAccounts: 0 });
});
afterEach(async () => {
  await s.close();
  await ou.cleanup();
});

const logged = async (type: string) => (await s.core.events.feed.read(0, 1000)).filter((e) => e.data.event_type === type);

describe('ldap/drift-detected and ldap/drift-cleared', () => {
  it('"a drift is announced once, with the account and its path; its end is announced when the held password binds again"', async () => {
    const clock = new FakeClock(Date.now());
    s = await startTestServer({ clock });
    await configure(s, facts, ou, { verify_period: '1m' });
    await ok(s, 'POST', 'ldap/static-role/alice', { username: ou.users[0]!.name, rotation_period: '24h' });
    const held = (await cred(s, 'alice')).password as string;
    await resetPassword(facts, ou.users[0]!.dn, 'reset-by-the-helpdesk-1');
    const rounds = async (check: () => Promise<void>) => vi.waitFor(async () => {
      await clock.advance(60_000);
      await check();
    }, { timeout: 10_000, interval: 50 });
    await rounds(async () => expect(await logged('ldap/drift-detected')).toHaveLength(1));
    const [detected] = await logged('ldap/drift-detected');
    expect(detected!.data.metadata).toEqual({ modified: 'false', operation: 'verify', path: 'static-role/alice', kind: 'static_role', account: 'alice' });
    // Later rounds refresh the mark without a new event.
    for (let i = 0; i < 3; i++) await clock.advance(60_000);
    expect(await logged('ldap/drift-detected')).toHaveLength(1);
    await resetPassword(facts, ou.users[0]!.dn, held);
    await rounds(async () => expect(await logged('ldap/drift-cleared')).toHaveLength(1));
    expect(JSON.stringify(await s.core.events.feed.read(0, 1000))).not.toContain(held);
  });
});

describe('ldap/rotate-root-fail', () => {
  it('"a failed automated root rotation is announced with its scrubbed error and attempt; the one that then succeeds as ldap/rotate-root"', async () => {
    const clock = new FakeClock(Date.now());
    const proxy = await startTcpProxy(facts.host, facts.port);
    try {
      s = await startTestServer({ clock });
      await configure(s, facts, ou, { url: proxy.url, rotation_period: '1h' });
      await proxy.stop();
      await clock.advance(3_600_000);
      await vi.waitFor(async () => expect(await logged('ldap/rotate-root-fail')).toHaveLength(1), { timeout: 5000 });
      const [failed] = await logged('ldap/rotate-root-fail');
      expect(failed!.data.metadata).toMatchObject({ modified: 'false', operation: 'periodic', path: 'rotate-root', attempts: '1' });
      expect(failed!.data.metadata.error).toContain(proxy.url.replace('ldap://', ''));
      expect(JSON.stringify(failed)).not.toContain(ou.engine.password);
      await proxy.start();
      await vi.waitFor(async () => {
        await clock.advance(10_000);
        expect(await logged('ldap/rotate-root')).toHaveLength(1);
      }, { timeout: 5000, interval: 50 });
      expect((await logged('ldap/rotate-root'))[0]!.data.metadata.operation).toBe('periodic');
    } finally {
      await proxy.stop();
    }
  });
});
