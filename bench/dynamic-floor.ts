/**
 * The floor of a dynamic credential over HTTP: a bare Fastify process doing the durable work of one and nothing else.
 * `GET /v1/creds` adds the account and its group membership in the directory and commits the lease; `POST
 * /v1/revoke` commits a revocation mark, removes the membership and the account, and commits the lease's removal:
 * the same four directory operations and three commits (SQLite in WAL mode with synchronous=FULL, commits of one
 * event-loop turn together, as the server's store does) as `ldap/creds/:role` plus `sys/leases/revoke`. No token, no
 * policy, no encryption, no templates, no audit.
 */
import Fastify from 'fastify';
import { Attribute, Change, Client } from 'ldapts';
import { randomBytes } from 'node:crypto';
import { DatabaseSync } from 'node:sqlite';

export interface FloorDirectory {
  url: string;
  binddn: string;
  bindpass: string;
  usersDn: string;
  groupDn: string;
}

/** One transaction per event-loop turn for every write asked for in it, acknowledged once committed. */
function groupCommitter(db: DatabaseSync) {
  const put = db.prepare('INSERT OR REPLACE INTO kv (key, value) VALUES (?, ?)');
  const del = db.prepare('DELETE FROM kv WHERE key = ?');
  let pending: Array<{ key: string; value?: string; done: () => void }> = [];
  const flush = () => {
    const batch = pending;
    pending = [];
    db.exec('BEGIN');
    for (const w of batch) {
      if (w.value === undefined) del.run(w.key);
      else put.run(w.key, w.value);
    }
    db.exec('COMMIT');
    for (const w of batch) w.done();
  };
  return (key: string, value?: string) => new Promise<void>((done) => {
    if (pending.length === 0) setImmediate(flush);
    pending.push({ key, value, done });
  });
}

export async function startDynamicFloor(file: string, dir: FloorDirectory): Promise<string> {
  const db = new DatabaseSync(file);
  db.exec('PRAGMA journal_mode=WAL; PRAGMA synchronous=FULL; CREATE TABLE IF NOT EXISTS kv (key TEXT PRIMARY KEY, value TEXT)');
  const write = groupCommitter(db);
  const ldap = new Client({ url: dir.url, timeout: 10_000, connectTimeout: 10_000 });
  await ldap.bind(dir.binddn, dir.bindpass);
  const member = (op: 'add' | 'delete', dn: string) => new Change({ operation: op, modification: new Attribute({ type: 'member', values: [dn] }) });
  let serial = 0;
  const app = Fastify();
  app.get('/v1/creds', async () => {
    const username = `floor_${process.pid}_${serial++}`;
    const dn = `cn=${username},${dir.usersDn}`;
    const password = randomBytes(48).toString('base64url').slice(0, 64);
    await ldap.add(dn, { objectClass: ['inetOrgPerson'], cn: [username], sn: ['floor'], description: [`until ${new Date(Date.now() + 3600_000).toISOString()}`], userPassword: [password] });
    await ldap.modify(dir.groupDn, [member('add', dn)]);
    const leaseId = `ldap/creds/bench/${randomBytes(12).toString('base64url')}`;
    await write(`lease/${leaseId}`, JSON.stringify({ dn, expire: Date.now() + 3600_000 }));
    return { lease_id: leaseId, data: { username, password, distinguished_names: [dn] } };
  });
  app.post('/v1/revoke', async (req) => {
    const leaseId = (req.body as { lease_id: string }).lease_id;
    const lease = JSON.parse(db.prepare('SELECT value FROM kv WHERE key = ?').get(`lease/${leaseId}`)!.value as string) as { dn: string };
    await write(`claim/${leaseId}`, String(process.pid));
    await ldap.modify(dir.groupDn, [member('delete', lease.dn)]);
    await ldap.del(lease.dn);
    await Promise.all([write(`lease/${leaseId}`), write(`claim/${leaseId}`)]);
    return {};
  });
  return app.listen({ host: '127.0.0.1', port: 0 });
}
