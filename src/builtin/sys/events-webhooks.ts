import type { Core } from '../../core/core.ts';
import { BadRequestError } from '../../core/errors.ts';
import { field } from '../../core/fields.ts';
import { definePath, type PathDefinition } from '../../core/framework.ts';

const NAME = '[A-Za-z0-9][A-Za-z0-9_.-]{0,127}';

/** sys/events/webhooks: webhooks that receive events, signed, at least once (docs/events.md). */
export function eventWebhookPaths(core: Core): PathDefinition[] {
  const hooks = core.events.webhooks;
  return [
    definePath({
      pattern: 'events/webhooks/?',
      description: 'List the webhooks.',
      operations: { list: async () => ({ data: { keys: await hooks.list() } }) },
    }),
    definePath({
      pattern: `events/webhooks/(?<name>${NAME})`,
      description: 'A webhook: where events of the given types (and filter) are POSTed, signed with its secret.',
      fields: {
        url: field.string('Where events are POSTed: https://, or http:// to loopback only unless the server allows it.', { maxLength: 2048 }),
        event_types: field.commaList('Event type globs to deliver (e.g. "ldap/rotate*", "lease/*").', { maxItems: 64 }),
        filter: field.string('A filter expression over each event, as for subscriptions.', { default: '', maxLength: 2048 }),
        secret: field.string('The HMAC-SHA256 key of X-Strongroom-Signature (at least 16 characters); never returned.', { secret: true, maxLength: 1024 }),
        headers: field.kvPairs('Extra headers sent with every delivery (e.g. Authorization); their values are never returned.', { maxKeys: 32, secret: true }),
      },
      existenceCheck: async (req) => (await hooks.get(req.params.name!)) !== undefined,
      operations: {
        read: async (req) => {
          const hook = await hooks.get(req.params.name!);
          if (!hook) return;
          return { data: { url: hook.url, event_types: hook.event_types, filter: hook.filter, headers: Object.keys(hook.headers) } };
        },
        create: async (req) => {
          if (!req.data.url || !req.data.secret || !req.data.event_types) throw new BadRequestError('url, event_types and secret are required');
          await hooks.put(req.params.name!, { url: req.data.url, event_types: req.data.event_types, filter: req.data.filter ?? '', secret: req.data.secret, headers: req.data.headers ?? {} });
        },
        update: async (req) => {
          const current = await hooks.get(req.params.name!);
          if (!current) throw new BadRequestError(`no webhook named "${req.params.name}"`);
          await hooks.put(req.params.name!, {
            url: req.data.url ?? current.url, event_types: req.data.event_types ?? current.event_types, filter: req.data.filter ?? current.filter,
            secret: req.data.secret ?? current.secret, headers: req.data.headers ?? current.headers,
          });
        },
        delete: async (req) => hooks.delete(req.params.name!),
      },
    }),
    definePath({
      pattern: `events/webhooks/(?<name>${NAME})/failures`,
      description: 'The dead-letter list: events the webhook did not accept after its last attempt.',
      operations: {
        read: async (req) => ({ data: { failures: (await hooks.failures(req.params.name!)).map((f) => ({ sequence: f.event.sequence, id: f.event.id, event_type: f.event.data.event_type, attempts: f.attempts, last_error: f.last_error, failed_at: f.failed_at })) } }),
      },
    }),
    definePath({
      pattern: `events/webhooks/(?<name>${NAME})/failures/replay`,
      description: 'Delivers every dead letter once more; those accepted leave the list.',
      operations: { update: async (req) => ({ data: await hooks.replay(req.params.name!) }) },
    }),
  ];
}
