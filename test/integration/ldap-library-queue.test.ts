import { request as httpRequest } from 'node:http';
import { afterEach, beforeEach, describe, expect, inject, it } from 'vitest';
import { FakeClock } from '../../src/core/clock.ts';
import { canBind, createIsolatedOu, type IsolatedOu } from '../support/slapd.ts';
import { startTestServer, type TestServer, type TestServerOptions } from '../support/server.ts';
import { configure, ok } from '../support/ldap-engine.ts';

const facts = inject('slapd');

let s: TestServer;
let ou: IsolatedOu;
let clock: FakeClock;

beforeEach(async () => {
  ou = await createIsolatedOu(facts, { serviceAccounts: 4 });
});
afterEach(async () => {
  await s?.close();
  await ou.cleanup();
});

async function setUp(set: Record<string, unknown>, opts: TestServerOptions = {}): Promise<void> {
  clock = new FakeClock(Date.now());
  s = await startTestServer({ clock, storage: 'sqlite', ...opts });
  await configure(s, facts, ou);
  await ok(s, 'POST', 'ldap/library/team', set);
}

const dnOf = (name: string) => ou.serviceAccounts.find((a) => a.name === name)!.dn;
const checkOut = (body: Record<string, unknown> = {}, token = 'root') => s.request('POST', 'ldap/library/team/check-out', { token, body });
const waiters = async (): Promise<number> => (await s.request('GET', 'ldap/library/team/status')).body.data.waiters;
const queued = (n: number) => expect.poll(waiters, { timeout: 10_000 }).toBe(n);
const manageCheckIn = (name: string) => ok(s, 'POST', 'ldap/library/manage/team/check-in', { service_account_names: [name] });

describe('ldap/library/:set/check-out with wait', () => {
  it.each([
    [{ wait: -1 }, 'wait'],
    [{ wait: '100000h' }, 'wait'],
    [{ wait: 'soon' }, 'wait'],
    [{ wait: '1.5' }, 'wait'],
    [{ wait: 61 }, 'wait'],
  ])('"hostile wait values are a 400 naming the field": %j', async (body, name) => {
    await setUp({ service_account_names: ['svc0'] });
    const r = await checkOut(body);
    expect(r.status).toBe(400);
    expect(r.body.errors.join(' ')).toContain(`"${name}"`);
    expect(await waiters()).toBe(0);
  });

  it.each([
    [{ max_wait: '11m' }, 'max_wait'],
    [{ max_wait: -5 }, 'max_wait'],
    [{ max_wait: 'forever' }, 'max_wait'],
    [{ max_checkouts_per_entity: -1 }, 'max_checkouts_per_entity'],
    [{ max_checkouts_per_entity: 'many' }, 'max_checkouts_per_entity'],
  ])('"max_wait past 10m (or not a duration) and a bad max_checkouts_per_entity are a 400 naming the field": %j', async (body, name) => {
    await setUp({ service_account_names: ['svc0'] });
    const r = await s.request('POST', 'ldap/library/team', { body });
    expect(r.status).toBe(400);
    expect(r.body.errors.join(' ')).toContain(`"${name}"`);
  });

  it('"waiters are served first come, first served as accounts come back; each lent password binds"', async () => {
    await setUp({ service_account_names: ['svc0'] });
    const first = await checkOut();
    const order: string[] = [];
    const pending: Array<Promise<{ status: number; body: any }>> = [];
    for (const who of ['a', 'b', 'c']) {
      pending.push(checkOut({ wait: '30s' }).then((r) => (order.push(who), r)));
      await queued(pending.length);
    }
    // A newcomer without wait does not overtake them.
    expect((await checkOut()).status).toBe(400);
    for (let i = 0; i < 3; i++) {
      await manageCheckIn('svc0');
      await expect.poll(() => order.length, { timeout: 10_000 }).toBe(i + 1);
    }
    expect(order).toEqual(['a', 'b', 'c']);
    const answers = await Promise.all(pending);
    expect(answers.map((r) => r.status)).toEqual([200, 200, 200]);
    expect(await canBind(facts.url, dnOf('svc0'), answers[2]!.body.data.password)).toBe(true);
    expect(await canBind(facts.url, dnOf('svc0'), first.body.data.password)).toBe(false);
    expect(await waiters()).toBe(0);
  });

  it('"the check-in that frees an account lends it to the head waiter in the same commit: never available in between, the waiter holds its lease"', async () => {
    await setUp({ service_account_names: ['svc0'] });
    await checkOut();
    const waiting = checkOut({ wait: '30s' });
    await queued(1);
    await manageCheckIn('svc0');
    // Read right after the check-in answered: the account is already the waiter's.
    const status = (await s.request('GET', 'ldap/library/team/status')).body.data;
    expect(status.svc0.available).toBe(false);
    const lent = await waiting;
    expect(lent.status).toBe(200);
    expect(status.svc0.lease_id).toBe(lent.body.lease_id);
    expect(await canBind(facts.url, dnOf('svc0'), lent.body.data.password)).toBe(true);
    expect((await s.request('POST', 'sys/leases/lookup', { body: { lease_id: lent.body.lease_id } })).status).toBe(200);
    expect(await waiters()).toBe(0);
  });

  it('"24 waiting clients on 3 accounts, each checking in what it got: no refusal, no account lent twice, none left lent"', async () => {
    await setUp({ service_account_names: ['svc0', 'svc1', 'svc2'] });
    const held = new Set<string>();
    const failures: string[] = [];
    let cycles = 0;
    const until = Date.now() + 3000;
    await Promise.all(Array.from({ length: 24 }, async () => {
      while (Date.now() < until) {
        const out = await checkOut({ wait: '30s' });
        if (out.status !== 200) {
          failures.push(`check-out ${out.status}`);
          return;
        }
        const name = String(out.body.data.service_account_name);
        if (held.has(name)) failures.push(`${name} lent twice`);
        held.add(name);
        await new Promise((r) => setImmediate(r));
        held.delete(name);
        const back = await s.request('POST', 'ldap/library/team/check-in', { body: { service_account_names: [name] } });
        if (back.status !== 200) failures.push(`check-in ${back.status}`);
        cycles++;
      }
    }));
    expect(failures).toEqual([]);
    expect(cycles).toBeGreaterThan(24);
    const status = (await s.request('GET', 'ldap/library/team/status')).body.data;
    expect([status.svc0, status.svc1, status.svc2]).toEqual([{ available: true }, { available: true }, { available: true }]);
    expect(status.waiters).toBe(0);
  });

  it('"a wait that ends with no account is the same 400 plus Retry-After, and leaves the queue"', async () => {
    await setUp({ service_account_names: ['svc0'] });
    await checkOut();
    const r = await checkOut({ wait: '1s' });
    expect(r.status).toBe(400);
    expect(r.body.errors).toEqual(['No service accounts available for check-out.']);
    expect(r.headers['retry-after']).toBe('1');
    expect(await waiters()).toBe(0);
  });

  it('"past STRONGROOM_LIBRARY_MAX_WAITERS a check-out is 429 naming the set"', async () => {
    await setUp({ service_account_names: ['svc0'] }, { env: { STRONGROOM_LIBRARY_MAX_WAITERS: '2' } });
    await checkOut();
    const held = [checkOut({ wait: '3s' }), checkOut({ wait: '3s' })];
    await queued(2);
    const r = await checkOut({ wait: '3s' });
    expect(r.status).toBe(429);
    expect(r.body.errors[0]).toContain('library set "team"');
    expect((await Promise.all(held)).map((x) => x.status)).toEqual([400, 400]);
  });

  it('"a revoke and an expiry each hand the account to the head waiter"', async () => {
    await setUp({ service_account_names: ['svc0'], ttl: '60s', max_ttl: '60s' });
    const lent = await checkOut();
    const byRevoke = checkOut({ wait: '30s' });
    await queued(1);
    expect((await s.request('POST', 'sys/leases/revoke', { body: { lease_id: lent.body.lease_id } })).status).toBe(204);
    const second = await byRevoke;
    expect(second.status).toBe(200);

    const byExpiry = checkOut({ wait: '30s' });
    await queued(1);
    await clock.advance(61_000);
    await s.core.leases.idle();
    const third = await byExpiry;
    expect(third.status).toBe(200);
    expect(await canBind(facts.url, dnOf('svc0'), third.body.data.password)).toBe(true);
    expect(await canBind(facts.url, dnOf('svc0'), second.body.data.password)).toBe(false);
  });

  it('"max_checkouts_per_entity holds: a holder at its limit is refused naming the field, another is not"', async () => {
    await setUp({ service_account_names: ['svc0', 'svc1', 'svc2'], max_checkouts_per_entity: 1 });
    const tokens: string[] = [];
    for (let i = 0; i < 2; i++) {
      const r = await s.request('POST', 'auth/token/create', { body: { policies: ['root'], no_parent: true } });
      tokens.push(r.body.auth.client_token);
    }
    expect((await checkOut({}, tokens[0])).status).toBe(200);
    const again = await checkOut({ wait: '1s' }, tokens[0]);
    expect(again.status).toBe(400);
    expect(again.body.errors[0]).toContain('"max_checkouts_per_entity"');
    expect((await checkOut({}, tokens[1])).status).toBe(200);
  });
});

describe('waiting check-outs over real connections', () => {
  it('"a client that disconnects leaves the queue; the account it would have got goes to the next one or back to the set"', async () => {
    await setUp({ service_account_names: ['svc0'] }, { listen: true });
    await checkOut();
    const url = new URL('/v1/ldap/library/team/check-out', s.url);
    const gone = httpRequest(url, { method: 'POST', headers: { 'x-vault-token': 'root', 'content-type': 'application/json' } });
    gone.on('error', () => undefined);
    gone.end(JSON.stringify({ wait: '30s' }));
    await queued(1);
    gone.destroy();
    await queued(0);
    await manageCheckIn('svc0');
    const status = (await s.request('GET', 'ldap/library/team/status')).body.data;
    expect(status.svc0).toEqual({ available: true });
    const lent = await checkOut();
    expect(lent.status).toBe(200);
    expect(await canBind(facts.url, dnOf('svc0'), lent.body.data.password)).toBe(true);
  });
});
