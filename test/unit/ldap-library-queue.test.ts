import { describe, expect, it } from 'vitest';
import { freeMembers, type Member } from '../../src/engines/ldap/library-queue.ts';
import { reservationHolds, type QueueView } from '../../src/engines/ldap/library-queue-store.ts';

const id = (ticket: number, node = 'n1') => `${String(ticket).padStart(15, '0')}.${node}`;
const view = (next: number, live: number[], onlyNode?: string): QueueView => {
  const waiters = live.map((t) => ({ id: id(t), ticket: t, node: 'n1' }));
  return { next, live: waiters, liveIds: new Set(waiters.map((w) => w.id)), onlyNode };
};
const available = (name: string, extra: { returned_at?: number; reserved_for?: string } = {}): Member => ({
  name, snapshot: { state: { state: 'available', name, dn: `cn=${name}`, password: 'p', ...extra }, raw: Buffer.from(name) },
});
const lent = (name: string): Member => ({
  name, snapshot: { state: { state: 'lent', name, dn: `cn=${name}`, password: 'p', borrower: { entity_id: '', accessor: 'a', lease_id: 'l', set: 's', checked_out_at: 0 } }, raw: Buffer.from(name) },
});

describe('reservationHolds', () => {
  it.each([
    ['a queued waiter', id(3), true],
    ['a waiter queued after the view was read', id(7), true],
    ['a waiter served or gone before the view', id(2), false],
    ['no reservation', undefined, false],
    ['a malformed reservation', 'x.n1', false],
  ])('"a reservation binds only while its waiter is queued": %s', (_label, reservedFor, holds) => {
    expect(reservationHolds(view(5, [3, 4]), reservedFor)).toBe(holds);
  });

  it.each([
    ['a queued waiter of this process', id(3), true],
    ['a waiter of this process queued after the view was read', id(7), true],
    ['a waiter of an earlier process, with a ticket past this one\'s counter', id(9, 'n0'), false],
    ['a waiter of an earlier process, with a ticket below it', id(1, 'n0'), false],
  ])('"in a queue kept in memory, a reservation named for another process\'s waiter never binds": %s', (_label, reservedFor, holds) => {
    expect(reservationHolds(view(5, [3, 4], 'n1'), reservedFor)).toBe(holds);
  });
});

describe('freeMembers', () => {
  it('"free accounts are the available ones no queued waiter holds, least recently returned first (never returned first, in set order)"', () => {
    const members = [
      available('a', { returned_at: 300 }),
      lent('b'),
      available('c', { returned_at: 100 }),
      available('d'),
      available('e', { reserved_for: id(3) }),
      available('f', { reserved_for: id(1), returned_at: 50 }),
      available('g'),
    ];
    expect(freeMembers(view(5, [3]), members).map((m) => m.name)).toEqual(['d', 'g', 'f', 'c', 'a']);
  });
});
