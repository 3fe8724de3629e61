// The cloud static roles' timing rules (docs/cloud-static-roles.md), as pure functions of a stored role.
import { describe, expect, it } from 'vitest';
import { configSchema } from '../../src/engines/cloud/config.ts';
import { manualWindowEnd, nextAction, rotationDue, servedSecret, type StaticRole, type StaticSecret } from '../../src/engines/cloud/static-store.ts';

const H = 3_600_000;
const secret = (key: string, start: number, end: number): StaticSecret => ({ key_id: key, display_name: `strongroom-static-${key}`, client_secret: `s-${key}`, start, end });
const role = (over: Partial<StaticRole> = {}): StaticRole => ({
  application_object_id: 'a', application_id: 'b', rotation_period: 720 * 3600, metadata: {}, defer_initial_creds: false, seamless_rotation: null,
  rotation_grace_period: 3600, current: secret('c', 0, 720 * H), staged: null, removals: [], next_rotation: 718 * H, last_rotation: 0, failure: null, ...over,
});

describe('rotationDue', () => {
  it('"seamless: two overlaps before the expiry, so the staged secret starts one overlap before it"', () => {
    expect(rotationDue(secret('c', 0, 720 * H), role(), true)).toBe(718 * H);
  });
  it('"without seamless: one overlap before the expiry (the old secret is removed when it expires)"', () => {
    expect(rotationDue(secret('c', 0, 720 * H), role(), false)).toBe(719 * H);
  });
  it('"-1: no overlap": at the expiry itself', () => {
    expect(rotationDue(secret('c', 0, 720 * H), role({ rotation_grace_period: -1 }), true)).toBe(720 * H);
  });
});

describe('servedSecret', () => {
  const r = role({ staged: secret('s', 719 * H, 1439 * H) });
  it('"reads return the staged secret once its start has passed"', () => {
    expect(servedSecret(r, 719 * H - 1)?.key_id).toBe('c');
    expect(servedSecret(r, 719 * H)?.key_id).toBe('s');
  });
  it('a role with no secret serves none', () => {
    expect(servedSecret(role({ current: null }), 0)).toBeNull();
  });
});

describe('nextAction', () => {
  it('the scheduled rotation, or the promotion at the current secret\'s end while one is staged', () => {
    expect(nextAction(role())).toBe(718 * H);
    expect(nextAction(role({ staged: secret('s', 719 * H, 1439 * H), next_rotation: 0 }))).toBe(720 * H);
  });
  it('an earlier removal comes first', () => {
    expect(nextAction(role({ removals: [{ key_id: 'o', remove_at: 5 * H, reason: 'manual' }] }))).toBe(5 * H);
  });
  it('"a failing role waits for its retry, whatever step failed"', () => {
    const failure = { since: 1, time: 1, attempts: 1, message: 'x', retry_at: 9 * H };
    expect(nextAction(role({ failure, removals: [{ key_id: 'o', remove_at: 5 * H, reason: 'manual' }] }))).toBe(9 * H);
  });
  it('a deferred role with no secret has nothing planned', () => {
    expect(nextAction(role({ current: null, next_rotation: 0 }))).toBeUndefined();
  });
});

describe('manualWindowEnd', () => {
  it('"the latest manual removal still to come"; other removals do not open a window', () => {
    const removals = [{ key_id: 'a', remove_at: 10, reason: 'manual' as const }, { key_id: 'b', remove_at: 20, reason: 'manual' as const }, { key_id: 'c', remove_at: 30, reason: 'rotation' as const }];
    expect(manualWindowEnd({ removals }, 5)).toBe(20);
    expect(manualWindowEnd({ removals }, 20)).toBeUndefined();
  });
});

describe('config seamless_rotation', () => {
  it('"the config\'s default is true for mounts created by this version": a config stored before the field existed reads false', () => {
    const stored = {
      subscription_id: 's', tenant_id: 't', client_id: 'c', client_secret: 'x', environment: '', identity_token_audience: '', identity_token_ttl: 3600, root_password_ttl: 60,
    };
    expect(configSchema.parse(stored).seamless_rotation).toBe(false);
    expect(configSchema.parse({ ...stored, seamless_rotation: true }).seamless_rotation).toBe(true);
  });
});
