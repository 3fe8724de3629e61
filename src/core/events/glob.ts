/** Event type patterns, in subscriptions and in policies' `subscribe_event_types`. */

/** Whether `eventType` matches a subscription's glob (`*` matches any run of characters, `/` included, as in Vault). */
export function globMatches(pattern: string, eventType: string): boolean {
  const re = new RegExp(`^${pattern.split('*').map((p) => p.replace(/[.+?^${}()|[\]\\]/g, '\\$&')).join('.*')}$`);
  return re.test(eventType);
}
