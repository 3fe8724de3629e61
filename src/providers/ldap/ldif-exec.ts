/**
 * Runs parsed LDIF records against a directory. Creation stops at the first failure (later records
 * usually depend on earlier ones); rollback and deletion keep going so one missing entry does not
 * strand the rest, and report every failure.
 */
import type { LdifRecord } from '../../lib/ldif/types.ts';
import type { LdapClient, LdifExecMode, LdifExecResult, LdifRecordResult } from './client.ts';
import { LdapProviderError } from './errors.ts';

export type LdifTarget = Pick<LdapClient, 'add' | 'modify' | 'delete'>;

const REQUEST_NAMES = { add: 'AddRequest', modify: 'ModifyRequest', delete: 'DelRequest' } as const;

async function apply(target: LdifTarget, record: LdifRecord): Promise<void> {
  switch (record.changetype) {
    case 'add': return target.add(record.dn, record.attributes);
    case 'modify': return target.modify(record.dn, record.changes);
    case 'delete': return target.delete(record.dn);
  }
}

/**
 * When cleaning up, the goal state is what matters: an entry that is already gone is deleted, and a
 * value already removed from a group (noSuchAttribute on a modify made only of deletes) is removed.
 */
function alreadyGone(record: LdifRecord, err: LdapProviderError): boolean {
  if (record.changetype === 'delete') return err.ldapCode === 32;
  if (record.changetype === 'modify') return err.ldapCode === 16 && record.changes.every((c) => c.operation === 'delete');
  return false;
}

export async function executeLdif(target: LdifTarget, records: readonly LdifRecord[], mode: LdifExecMode): Promise<LdifExecResult> {
  const results: LdifRecordResult[] = [];
  const errors: LdapProviderError[] = [];
  let stopped = false;
  for (const record of records) {
    const base = { dn: record.dn, changetype: record.changetype, line: record.line };
    if (stopped) {
      results.push({ ...base, status: 'not-run' });
      continue;
    }
    try {
      await apply(target, record);
      results.push({ ...base, status: 'ok' });
    } catch (err) {
      const inner = err instanceof LdapProviderError ? err : new LdapProviderError('upstream', String(err));
      if (mode === 'continue-past-errors' && alreadyGone(record, inner)) {
        results.push({ ...base, status: 'already-gone' });
        continue;
      }
      const wrapped = new LdapProviderError(
        inner.kind,
        `failed to run ${REQUEST_NAMES[record.changetype]} for "${record.dn}" (LDIF line ${record.line}): ${inner.detail}`,
        inner.ldapCode,
        inner.detail,
      );
      errors.push(wrapped);
      results.push({ ...base, status: 'failed', error: wrapped });
      if (mode === 'stop-at-first-error') stopped = true;
    }
  }
  return { ok: errors.length === 0, results, errors };
}
