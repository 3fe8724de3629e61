import { describe, expect, it } from 'vitest';
import pino from 'pino';
import { MAX_UNCONFIRMED_BIND_PASSWORDS, bindHistory } from '../../src/engines/ldap/bind-history.ts';
import { FakeClock } from '../../src/core/clock.ts';
import { BadRequestError } from '../../src/core/errors.ts';
import type { BackendContext } from '../../src/core/framework.ts';
import { KeyedLock } from '../../src/core/keyed-lock.ts';
import { MemoryStorage } from '../../src/core/storage/memory.ts';
import type { StorageCondition, StorageOp } from '../../src/core/storage/types.ts';
import { StorageView, jsonBytes } from '../../src/core/storage/view.ts';
import { ManagedAccounts, accountKeys, sameAccount } from '../../src/engines/ldap/accounts.ts';
import { ROOT_GRACE_MS, ROOT_WAL_KEY, bindFallbacks, configuredBindAccount, toConnectionConfig, validateConfig, writeConfig, type LdapConfig } from '../../src/engines/ldap/config-store.ts';
import { mergeConfig } from '../../src/engines/ldap/config.ts';
import { LdapConnections } from '../../src/engines/ldap/connections.ts';
import type { LdapEngine } from '../../src/engines/ldap/engine.ts';
import { UnrecordedPasswordError, changePasswordWithWal, readWal } from '../../src/engines/ldap/rotation.ts';
import { RotationScheduler, retryDelayMs } from '../../src/engines/ldap/scheduler.ts';
import type { LdapClient, LdapConnectionConfig } from '../../src/providers/ldap/client.ts';
import { LdapProviderError } from '../../src/providers/ldap/errors.ts';

const logger = pino({ level: 'silent' });
const base = (over: Partial<LdapConfig> = {}): LdapConfig => ({ ...mergeConfig(undefined, { binddn: 'cn=e,dc=x', bindpass: 'pw' }), ...over });

describe('validateConfig', () => {
  it.each<[Partial<LdapConfig>, string | null]>([
    [{}, null],
    [{ binddn: '' }, 'binddn'],
    [{ binddn: 'engine', upndomain: 'example.com' }, null],
    [{ binddn: 'engine' }, 'binddn'],
    [{ bindpass: '' }, 'bindpass'],
    [{ userdn: 'ou=x,,' }, 'userdn'],
    [{ userattr: 'a b' }, 'userattr'],
    [{ password_policy: 'p', length: 10 }, 'password_policy'],
    [{ password_policy: 'p' }, null],
    [{ length: 3 }, 'length'],
    [{ tls_min_version: 'tls13', tls_max_version: 'tls12' }, 'tls_max_version'],
    [{ client_tls_key: 'k' }, 'client_tls_cert'],
    [{ certificate: '-----BEGIN CERTIFICATE-----\nnope\n-----END CERTIFICATE-----' }, 'certificate'],
    [{ url: 'ldap://a,ldaps://b:636' }, null],
    [{ url: 'https://a' }, 'url'],
  ])('%j -> %s', (over, field) => {
    const run = () => validateConfig(base(over));
    if (field === null) expect(run).not.toThrow();
    else {
      expect(run).toThrow(BadRequestError);
      expect(run).toThrow(new RegExp(`^(${field}|invalid value for field "${field}")`));
    }
  });
});

describe('mergeConfig', () => {
  it('keeps unsent fields, defaults userattr by schema on create only, trims strings', () => {
    const created = mergeConfig(undefined, { binddn: ' cn=e,dc=x ', bindpass: 'pw', schema: 'AD' });
    expect(created).toMatchObject({ binddn: 'cn=e,dc=x', schema: 'ad', userattr: 'userPrincipalName', url: 'ldap://127.0.0.1', request_timeout: 90 });
    const updated = mergeConfig({ ...created, certificate: 'C', password_policy: 'p', length: 0 }, { schema: 'openldap' });
    expect(updated).toMatchObject({ bindpass: 'pw', certificate: 'C', password_policy: 'p', schema: 'openldap', userattr: 'userPrincipalName' });
  });

  it('refuses unknown enum values naming the field', () => {
    expect(() => mergeConfig(undefined, { schema: 'novell' })).toThrow(/^invalid value for field "schema"/);
    expect(() => mergeConfig(undefined, { credential_type: 'pin' })).toThrow(/^invalid value for field "credential_type"/);
    expect(() => mergeConfig(undefined, { tls_min_version: 'ssl3' })).toThrow(/^(tls_min_version|invalid value for field "tls_min_version")/);
  });
});

describe('connection config', () => {
  it('passes schema, credential type and TLS through; connection_timeout only when the operator set it', () => {
    const c = toConnectionConfig(base({ schema: 'racf', credential_type: 'phrase', userattr: '', starttls: true }));
    expect(c).toMatchObject({ schema: 'racf', credential_type: 'phrase', userattr: 'racfid', starttls: true, request_timeout: 90, connection_timeout: undefined });
    expect(toConnectionConfig(base({ connection_timeout: 10 })).connection_timeout).toBe(10);
  });

  it('bind fallbacks: an unfinished rotate-root password first, then every kept previous password, whatever the time (erased only after a verified bind)', () => {
    const cfg = base({ bindpass: 'new', last_bind_password: 'old', last_bind_password_rotation: 1000, unconfirmed_bind_passwords: ['older', 'new', 'old', 'oldest'] });
    expect(bindFallbacks(cfg, 'wal')).toEqual(['wal', 'old', 'older', 'oldest']);
    expect(bindFallbacks(cfg, 'new')).toEqual(['old', 'older', 'oldest']);
    expect(bindFallbacks(base({ bindpass: 'new' }), undefined)).toEqual([]);
  });

  it('the unconfirmed bind-password history is newest first, without blanks, repeats or the current one, and bounded', () => {
    const many = Array.from({ length: 12 }, (_, i) => `p${i}`);
    expect(bindHistory(['', 'a', undefined, 'cur', 'a', 'b'], 'cur')).toEqual(['a', 'b']);
    expect(bindHistory(many, 'cur')).toEqual(many.slice(0, MAX_UNCONFIRMED_BIND_PASSWORDS));
  });

  it('LdapConnections reuses one client until the effective connection settings change', async () => {
    const storage = new StorageView(new MemoryStorage(), '');
    const made: LdapConnectionConfig[] = [];
    const conns = new LdapConnections(storage, (cfg) => {
      made.push(cfg);
      return { close: async () => undefined } as unknown as LdapClient;
    });
    await expect(conns.get()).rejects.toThrow(/missing LDAP configuration/);
    await writeConfig(storage, base());
    const a = await conns.get();
    const b = await conns.get();
    expect(a.client).toBe(b.client);
    await writeConfig(storage, base({ bindpass: 'other' }));
    expect((await conns.get()).client).not.toBe(a.client);
    expect(made.map((m) => m.bindpass)).toEqual(['pw', 'other']);
  });

  it('LdapConnections parses the config again only when its bytes change, and keeps the previous bind password as long as it is stored', async () => {
    const storage = new StorageView(new MemoryStorage(), '');
    const clock = new FakeClock();
    const made: LdapConnectionConfig[] = [];
    const conns = new LdapConnections(storage, (cfg) => {
      made.push(cfg);
      return { close: async () => undefined } as unknown as LdapClient;
    });
    await writeConfig(storage, base({ bindpass: 'new', last_bind_password: 'old', last_bind_password_rotation: clock.now() }));
    const a = await conns.get();
    expect((await conns.get()).config).toBe(a.config);
    expect(Object.isFrozen(a.config)).toBe(true);
    expect(made.map((m) => m.fallback_bindpass)).toEqual([['old']]);
    await clock.advance(ROOT_GRACE_MS);
    await conns.get();
    expect(made.map((m) => m.fallback_bindpass)).toEqual([['old']]);
    await writeConfig(storage, { ...a.config, last_bind_password: '' });
    await conns.get();
    expect(made.map((m) => m.fallback_bindpass)).toEqual([['old'], []]);
    // A rewrite with the same content is the same config; a changed field is seen at once.
    await writeConfig(storage, { ...a.config, last_bind_password: '' });
    await conns.get();
    expect(made).toHaveLength(2);
    await writeConfig(storage, { ...a.config, last_bind_password: '', userdn: 'ou=people,dc=x' });
    expect((await conns.get()).config.userdn).toBe('ou=people,dc=x');
    await storage.put(ROOT_WAL_KEY, jsonBytes({ new_password: 'pending' }));
    await conns.get();
    expect(made.at(-1)?.fallback_bindpass).toEqual(['pending']);
  });
});

describe('the bind account (the engine never manages itself)', () => {
  const upnConfig = (over: Partial<LdapConfig> = {}) => base({ binddn: 'svc', upndomain: 'corp.example', schema: 'ad', userattr: 'userPrincipalName', ...over });

  it('configuredBindAccount: the DN, or a UPN bind\'s UPN where usernames are UPNs', () => {
    expect(configuredBindAccount(base())).toEqual({ dn: 'cn=e,dc=x' });
    expect(configuredBindAccount(upnConfig())).toEqual({ username: 'svc@corp.example' });
    expect(configuredBindAccount(upnConfig({ userattr: '' }))).toEqual({ username: 'svc@corp.example' });
    expect(configuredBindAccount(upnConfig({ userattr: 'sAMAccountName' }))).toEqual({});
  });

  it('sameAccount: by username case-insensitively, by DN as a DN', () => {
    expect(sameAccount({ username: 'svc@corp.example' }, { username: 'SVC@Corp.Example' })).toBe(true);
    expect(sameAccount({ dn: 'cn=e,dc=x' }, { dn: 'CN = E , DC = X' })).toBe(true);
    expect(sameAccount({ dn: 'cn=e,dc=x' }, { username: 'e' })).toBe(false);
    expect(sameAccount({}, { username: 'e', dn: 'cn=e,dc=x' })).toBe(false);
  });

  const connections = async (config: LdapConfig, findBindEntry: () => Promise<{ dn: string }>) => {
    const storage = new StorageView(new MemoryStorage(), '');
    await writeConfig(storage, config);
    return new LdapConnections(storage, () => ({ findBindEntry, close: async () => undefined }) as unknown as LdapClient);
  };

  it('a UPN bind\'s DN is asked of the directory once per client and then known by both names', async () => {
    let lookups = 0;
    const conns = await connections(upnConfig(), async () => (lookups++, { dn: 'CN=Svc,OU=Service,DC=corp' }));
    const { bindAccount } = await conns.get();
    expect(await bindAccount()).toEqual({ username: 'svc@corp.example', dn: 'CN=Svc,OU=Service,DC=corp' });
    expect(sameAccount(await (await conns.get()).bindAccount(), { dn: 'cn=svc,ou=service,dc=corp' })).toBe(true);
    expect(lookups).toBe(1);
  });

  it('a UPN bind whose entry is not under userdn is known by its UPN only; a failed lookup is asked again', async () => {
    const notFound = await connections(upnConfig(), async () => { throw new LdapProviderError('input', 'binddn: no entry', 32); });
    expect(await (await notFound.get()).bindAccount()).toEqual({ username: 'svc@corp.example' });
    let calls = 0;
    const flaky = await connections(upnConfig(), async () => {
      if (calls++ === 0) throw new LdapProviderError('connection', 'down');
      return { dn: 'cn=svc,dc=corp' };
    });
    const { bindAccount } = await flaky.get();
    await expect(bindAccount()).rejects.toThrow('down');
    expect((await bindAccount()).dn).toBe('cn=svc,dc=corp');
  });

  it('a DN bind never asks the directory', async () => {
    const conns = await connections(base(), async () => { throw new Error('not called'); });
    expect(await (await conns.get()).bindAccount()).toEqual({ dn: 'cn=e,dc=x' });
  });
});

describe('retryDelayMs', () => {
  it('doubles per attempt, is capped, and jitters within [half, full]', () => {
    expect(retryDelayMs(1, 10_000, 60_000, () => 0)).toBe(5_000);
    expect(retryDelayMs(1, 10_000, 60_000, () => 1)).toBe(10_000);
    expect(retryDelayMs(3, 10_000, 60_000, () => 1)).toBe(40_000);
    expect(retryDelayMs(10, 10_000, 60_000, () => 1)).toBe(60_000);
    expect(retryDelayMs(10, 10_000, 60_000, () => 0)).toBe(30_000);
  });
});

describe('RotationScheduler', () => {
  it('runs due items through a bounded pool, never the same item twice at once', async () => {
    const clock = new FakeClock(0);
    let active = 0;
    let peak = 0;
    const runs: string[] = [];
    const releases: Array<() => void> = [];
    const scheduler = new RotationScheduler({
      clock, logger, concurrency: 3,
      run: async (name) => {
        runs.push(name);
        active++;
        peak = Math.max(peak, active);
        await new Promise<void>((r) => releases.push(r));
        active--;
      },
    });
    scheduler.start();
    for (let i = 0; i < 10; i++) scheduler.schedule(`r${i}`, 1000 + i);
    scheduler.schedule('late', 5000);
    await clock.advance(999);
    expect(runs).toEqual([]);
    await clock.advance(100);
    expect(runs).toEqual(['r0', 'r1', 'r2']);
    // Re-scheduling a running item does not start it a second time.
    scheduler.schedule('r0', 0);
    await clock.advance(1);
    expect(runs).toEqual(['r0', 'r1', 'r2']);
    while (releases.length) {
      releases.shift()!();
      await clock.advance(0);
    }
    await scheduler.idle();
    expect(peak).toBe(3);
    expect(runs.filter((r) => r === 'r0')).toHaveLength(2);
    expect(runs).toHaveLength(11);
    expect(runs).not.toContain('late');
    await clock.advance(5000);
    expect(runs).toContain('late');
    releases.shift()?.();
    scheduler.stop();
  });

  it('unschedule and stop cancel pending items', async () => {
    const clock = new FakeClock(0);
    const runs: string[] = [];
    const scheduler = new RotationScheduler({ clock, logger, concurrency: 1, run: async (n) => void runs.push(n) });
    scheduler.start();
    scheduler.schedule('a', 10);
    scheduler.schedule('b', 10);
    scheduler.unschedule('a');
    await clock.advance(20);
    expect(runs).toEqual(['b']);
    scheduler.stop();
    scheduler.schedule('c', 30);
    await clock.advance(50);
    expect(runs).toEqual(['b']);
  });

  it('"a scheduler started again (a node leading again) arms what it is given then"', async () => {
    const clock = new FakeClock(0);
    const runs: string[] = [];
    const scheduler = new RotationScheduler({ clock, logger, concurrency: 1, run: async (n) => void runs.push(n) });
    scheduler.schedule('ignored', 10);
    scheduler.start();
    scheduler.schedule('a', 100);
    scheduler.stop();
    scheduler.start();
    scheduler.schedule('b', 200);
    await clock.advance(300);
    expect(runs).toEqual(['b']);
  });
});

describe('ManagedAccounts', () => {
  const accounts = () => new ManagedAccounts(new StorageView(new MemoryStorage(), 'm/'));

  it('keys by lower-cased username and normalised DN', () => {
    expect(accountKeys({ username: 'Bob', dn: 'CN=Bob, OU=Users,DC=x' })).toEqual(['user:bob', 'dn:cn=bob,ou=users,dc=x']);
  });

  it('one owner per account; re-claiming is idempotent; release frees only the owner\'s claims', async () => {
    const reg = accounts();
    const role = { kind: 'static-role', name: 'r' } as const;
    const set = { kind: 'library-set', name: 's' } as const;
    await reg.claim(role, [{ username: 'bob', dn: 'cn=bob,dc=x' }]);
    await reg.claim(role, [{ username: 'BOB' }]);
    await expect(reg.claim(set, [{ username: 'alice' }, { username: 'x', dn: 'CN=Bob,DC=X' }])).rejects.toThrow('"x" is already managed by the secrets engine (static role "r")');
    // All or nothing: alice was not claimed by the failed call.
    expect(await reg.ownerOf({ username: 'alice' })).toBeUndefined();
    await reg.release(set, [{ username: 'bob' }]);
    expect(await reg.ownerOf({ username: 'bob' })).toEqual(role);
    await reg.release(role, [{ username: 'bob', dn: 'cn=bob,dc=x' }]);
    await reg.claim(set, [{ username: 'bob' }]);
    expect(await reg.ownerOf({ dn: 'cn=bob,dc=x' })).toBeUndefined();
    expect(await reg.ownerOf({ username: 'Bob' })).toEqual(set);
  });

  it('concurrent claims of one account: exactly one wins', async () => {
    const reg = accounts();
    const results = await Promise.allSettled(['a', 'b', 'c', 'd'].map((name) => reg.claim({ kind: 'library-set', name }, [{ username: 'svc' }])));
    expect(results.filter((r) => r.status === 'fulfilled')).toHaveLength(1);
  });
});

/** A fake directory: records the password per DN and can be told to fail. */
class FakeDirectory {
  passwords = new Map<string, string>();
  fail: LdapProviderError | undefined;
  onSet: (() => Promise<void>) | undefined;
  /** DNs that answer noSuchObject (entries moved away). */
  gone = new Set<string>();
  searches = 0;
  client(): LdapClient {
    return {
      resolveAccount: async (ref: { dn?: string; username?: string }) => {
        if (!ref.dn) this.searches++;
        return { dn: ref.dn ?? `cn=${ref.username},dc=x`, attributes: {} };
      },
      setPassword: async (dn: string, password: string) => {
        await this.onSet?.();
        if (this.fail) throw this.fail;
        if (this.gone.has(dn)) throw new LdapProviderError('input', `no such object "${dn}"`, 32);
        this.passwords.set(dn, password);
      },
      writeGuard: async () => undefined,
      close: async () => undefined,
    } as unknown as LdapClient;
  }
}

class FailingCommits extends MemoryStorage {
  failing = false;
  override async transaction(ops: StorageOp[], conditions?: StorageCondition[]): Promise<boolean> {
    if (this.failing && ops.some((o) => o.type === 'delete' && o.key.startsWith('wal/'))) throw new Error('disk full');
    return super.transaction(ops, conditions);
  }
}

function walEngine() {
  const physical = new FailingCommits();
  const storage = new StorageView(physical, '');
  const clock = new FakeClock();
  const dir = new FakeDirectory();
  let n = 0;
  const ctx = { system: { generatePassword: async () => `generated-${++n}` } } as unknown as BackendContext;
  const engine = {
    ctx, storage, clock, locks: new KeyedLock(),
    connections: new LdapConnections(storage, () => dir.client()),
  } satisfies Pick<LdapEngine, 'storage' | 'connections' | 'locks' | 'clock' | 'ctx'>;
  return { engine, storage, physical, dir };
}

describe('changePasswordWithWal', () => {
  const commitTo = (_storage: StorageView) => (password: string): StorageOp[] => [{ type: 'put', key: 'record', value: jsonBytes({ password }) }];

  it('persists the WAL before the directory changes and removes it with the commit', async () => {
    const { engine, storage, dir } = walEngine();
    await writeConfig(storage, base());
    dir.onSet = async () => {
      expect((await readWal(storage, 't'))?.new_password).toBe('generated-1');
    };
    const result = await changePasswordWithWal(engine, { target: 't', account: { username: 'bob' }, commit: commitTo(storage) });
    expect(result).toEqual({ password: 'generated-1', dn: 'cn=bob,dc=x', reusedWal: false });
    expect(dir.passwords.get('cn=bob,dc=x')).toBe('generated-1');
    expect(await storage.getJson('record')).toEqual({ password: 'generated-1' });
    expect(await readWal(storage, 't')).toBeUndefined();
  });

  it('a failed commit keeps the WAL; the next attempt re-applies and records the same password', async () => {
    const { engine, storage, physical, dir } = walEngine();
    await writeConfig(storage, base());
    physical.failing = true;
    await expect(changePasswordWithWal(engine, { target: 't', account: { dn: 'cn=a,dc=x' }, commit: commitTo(storage) })).rejects.toThrow(UnrecordedPasswordError);
    expect(dir.passwords.get('cn=a,dc=x')).toBe('generated-1');
    expect(await storage.getJson('record')).toBeUndefined();
    physical.failing = false;
    const again = await changePasswordWithWal(engine, { target: 't', account: { dn: 'cn=a,dc=x' }, commit: commitTo(storage) });
    expect(again).toMatchObject({ password: 'generated-1', reusedWal: true });
    expect(await storage.getJson('record')).toEqual({ password: 'generated-1' });
  });

  it('a connection failure keeps the WAL; a refused value on a reused WAL drops it so the next attempt generates anew', async () => {
    const { engine, storage, dir } = walEngine();
    await writeConfig(storage, base());
    dir.fail = new LdapProviderError('connection', 'socket closed');
    await expect(changePasswordWithWal(engine, { target: 't', account: { dn: 'cn=a,dc=x' }, commit: commitTo(storage) })).rejects.toThrow('socket closed');
    expect((await readWal(storage, 't'))?.new_password).toBe('generated-1');
    dir.fail = new LdapProviderError('input', 'constraint violation', 19);
    await expect(changePasswordWithWal(engine, { target: 't', account: { dn: 'cn=a,dc=x' }, commit: commitTo(storage) })).rejects.toThrow('constraint');
    expect(await readWal(storage, 't')).toBeUndefined();
    dir.fail = undefined;
    expect((await changePasswordWithWal(engine, { target: 't', account: { dn: 'cn=a,dc=x' }, commit: commitTo(storage) }))?.password).toBe('generated-2');
  });

  it('a known DN is changed without a search; when it is gone the username is searched once and the entry found there changes', async () => {
    const { engine, storage, dir } = walEngine();
    await writeConfig(storage, base());
    const found: string[] = [];
    const req = { target: 't', account: { username: 'bob' }, knownDn: 'cn=bob,ou=old,dc=x', found: async (dn: string) => void found.push(dn), commit: commitTo(storage) };
    expect((await changePasswordWithWal(engine, req))?.dn).toBe('cn=bob,ou=old,dc=x');
    expect(dir.searches).toBe(0);
    expect(found).toEqual([]);

    dir.gone.add('cn=bob,ou=old,dc=x');
    const moved = await changePasswordWithWal(engine, req);
    expect(moved).toMatchObject({ dn: 'cn=bob,dc=x', password: 'generated-2' });
    expect(dir.searches).toBe(1);
    expect(found).toEqual(['cn=bob,dc=x']);
    expect(dir.passwords.get('cn=bob,dc=x')).toBe('generated-2');
  });

  it('a found hook that refuses stops the change before the directory is touched; the WAL stays for the retry', async () => {
    const { engine, storage, dir } = walEngine();
    await writeConfig(storage, base());
    const refuse = async () => {
      throw new BadRequestError('already managed');
    };
    await expect(changePasswordWithWal(engine, { target: 't', account: { username: 'bob' }, found: refuse, commit: commitTo(storage) })).rejects.toThrow('already managed');
    expect(dir.passwords.size).toBe(0);
    expect((await readWal(storage, 't'))?.new_password).toBe('generated-1');
  });

  it('an explicit DN is never re-resolved, even when it is gone', async () => {
    const { engine, storage, dir } = walEngine();
    await writeConfig(storage, base());
    dir.gone.add('cn=a,dc=x');
    await expect(changePasswordWithWal(engine, { target: 't', account: { dn: 'cn=a,dc=x', username: 'a' }, knownDn: 'cn=a,dc=x', commit: commitTo(storage) })).rejects.toThrow('no such object');
    expect(dir.searches).toBe(0);
  });

  it('prepare guards that no longer hold: nothing is written, the directory is untouched, the result is undefined', async () => {
    const { engine, storage, dir } = walEngine();
    await writeConfig(storage, base());
    await storage.put('claim', jsonBytes({ state: 'lent' }));
    const claim = { type: 'put' as const, key: 'claim', value: jsonBytes({ state: 'returning' }) };
    const stale = [{ key: 'claim', expected: jsonBytes({ state: 'something else' }) }];
    expect(await changePasswordWithWal(engine, { target: 't', account: { dn: 'cn=a,dc=x' }, prepare: [claim], prepareConditions: stale, commit: commitTo(storage) })).toBeUndefined();
    expect(await readWal(storage, 't')).toBeUndefined();
    expect(await storage.getJson('claim')).toEqual({ state: 'lent' });
    expect(dir.passwords.size).toBe(0);

    // Holding guards: the claim and the WAL land together, before the directory changes.
    dir.onSet = async () => {
      expect(await storage.getJson('claim')).toEqual({ state: 'returning' });
      expect(await readWal(storage, 't')).toBeDefined();
    };
    const current = [{ key: 'claim', expected: jsonBytes({ state: 'lent' }) }];
    expect(await changePasswordWithWal(engine, { target: 't', account: { dn: 'cn=a,dc=x' }, prepare: [claim], prepareConditions: current, commit: commitTo(storage) }))
      .toMatchObject({ password: 'generated-2', reusedWal: false });
  });

  it('prepare writes land with the fresh WAL (a role being created survives a crash with its WAL)', async () => {
    const { engine, storage, dir } = walEngine();
    await writeConfig(storage, base());
    dir.onSet = async () => {
      expect(await storage.getJson('pending')).toEqual({ ok: true });
      expect(await readWal(storage, 't')).toBeDefined();
    };
    await changePasswordWithWal(engine, { target: 't', account: { dn: 'cn=a,dc=x' }, prepare: [{ type: 'put', key: 'pending', value: jsonBytes({ ok: true }) }], commit: commitTo(storage) });
  });
});
