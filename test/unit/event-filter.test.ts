// Subscription filters (Vault's expression operators), event type globs, and the subscribe rule of the ACL.
import { describe, expect, it } from 'vitest';
import { buildEvent } from '../../src/core/events/envelope.ts';
import { parseFilter } from '../../src/core/events/filter.ts';
import { globMatches } from '../../src/core/events/glob.ts';
import { Acl } from '../../src/core/policy/acl.ts';
import { parseAclPolicy } from '../../src/core/policy/parse.ts';
import { BadRequestError } from '../../src/core/errors.ts';

const plugin = { mount_class: 'secret', mount_accessor: 'ldap_1', mount_path: 'ldap/', plugin: 'ldap' };
const rotate = buildEvent('ldap/rotate', { modified: 'true', operation: 'update', path: 'rotate-role/app', name: 'app' }, plugin, 0);

describe('filter expressions', () => {
  it.each([
    ['event_type == "ldap/rotate"', true],
    ['event_type == ldap/rotate', true],
    ['operation != "update"', false],
    ['name == "app" and operation == "update"', true],
    ['name == "other" or operation == "update"', true],
    ['not (name == "app")', false],
    ['source_plugin_mount == "ldap/"', true],
    ['source_plugin_subtype == "ldap"', true],
    ['data_path == "ldap/rotate-role/app"', true],
    ['name is empty', false],
    ['missing is empty', true],
    ['name is not empty', true],
    ['"pp" in name', true],
    ['"zz" not in name', true],
    ['path contains "rotate-role"', true],
    ['path not contains "static"', true],
    ['name matches "^a.p$"', true],
    ['name not matches "^b"', true],
    ['/data/plugin_info/mount_accessor == "ldap_1"', true],
    ['', true],
  ])('"%s" selects the rotation: %s', (source, expected) => {
    expect(parseFilter(source)(rotate)).toBe(expected);
  });

  it.each([
    ['name === "a"'],
    ['name =='],
    ['(name == "a"'],
    ['name like "a"'],
    ['name matches "("'],
    ['name == "a" junk'],
    ['x'.repeat(3000)],
    ['('.repeat(40) + 'a == b' + ')'.repeat(40)],
  ])('"a malformed or unbounded filter is a 400 naming the filter": %s', (source) => {
    expect(() => parseFilter(source)).toThrow(BadRequestError);
    expect(() => parseFilter(source)).toThrow(/filter/);
  });
});

describe('event type globs', () => {
  it.each([
    ['*', 'ldap/rotate', true], ['ldap/*', 'ldap/rotate', true], ['ldap/rotate*', 'ldap/rotate-fail', true],
    ['ldap/rotate', 'ldap/rotate-fail', false], ['lease/*', 'ldap/rotate', false], ['ldap.rotate', 'ldapxrotate', false],
  ])('"%s" matches "%s": %s', (pattern, type, expected) => {
    expect(globMatches(pattern, type)).toBe(expected);
  });
});

describe('the subscribe capability', () => {
  const acl = (hcl: string) => new Acl([parseAclPolicy('p', hcl)]);
  it.each([
    ['subscribe with a matching type', 'path "ldap/*" { capabilities = ["subscribe"]\n subscribe_event_types = ["ldap/*"] }', true],
    ['subscribe without subscribe_event_types', 'path "ldap/*" { capabilities = ["subscribe"] }', false],
    ['subscribe_event_types for other types', 'path "ldap/*" { capabilities = ["subscribe"]\n subscribe_event_types = ["lease/*"] }', false],
    ['read but not subscribe', 'path "ldap/*" { capabilities = ["read"]\n subscribe_event_types = ["*"] }', false],
    ['subscribe on another path', 'path "ldap/static-role/*" { capabilities = ["subscribe"]\n subscribe_event_types = ["*"] }', false],
    ['deny on the path', 'path "ldap/*" { capabilities = ["deny"]\n subscribe_event_types = ["*"] }', false],
  ])('"%s" → %s', (_name, hcl, expected) => {
    expect(acl(hcl).allowSubscribe('ldap/rotate-role/app', 'ldap/rotate')).toBe(expected);
  });
});
