import type { Logger } from 'pino';
import type { NodeRecord } from '../cluster.ts';
import { BadRequestError } from '../errors.ts';
import type { StorageView } from '../storage/view.ts';
import { deviceConfig, type AuditSettings } from './options.ts';

/** The cluster as the broker needs it: who this node is, and which nodes may be serving requests now. */
export interface AuditPeers {
  readonly nodeId: string;
  liveNodes(): Promise<NodeRecord[]>;
}

/** A probe: a device another node is about to enable. Writes here move the change version (core.ts `#cached`). */
export const PROBE_PREFIX = 'probe/';
/** Each node's answer to a probe, under the probe's id; not followed, the asking node polls them. */
const ANSWER_PREFIX = 'answer/';
/** Nodes follow a change within a poll interval (200 ms by default); this leaves room for a loaded node. */
export const PROBE_WAIT_MS = 10_000;
const POLL_MS = 50;

interface Answer {
  ok: boolean;
  reason?: string;
}

/**
 * A device is enabled cluster-wide only once every live node has opened it (audit 2026-11-28 N6): otherwise a
 * node that cannot (a path on a volume only one node mounts, a collector only one host reaches) would have a
 * device it can never write, and with only that device it would refuse every request. The enabling node asks
 * through the store and waits; one node that cannot, or does not answer in time, refuses the enable with its name.
 */
export class DeviceProbes {
  readonly #view: StorageView;
  readonly #peers: AuditPeers;
  readonly #settings: AuditSettings;
  readonly #logger: Logger;
  /** Probes this node made: it opened the device already. */
  readonly #mine = new Set<string>();
  #answered = new Set<string>();

  constructor(view: StorageView, peers: AuditPeers, settings: AuditSettings, logger: Logger) {
    this.#view = view;
    this.#peers = peers;
    this.#settings = settings;
    this.#logger = logger;
  }

  /** Resolves once every other live node opened the device; throws a 400 naming the first that could not. */
  async confirm(id: string, type: string, options: Record<string, string>): Promise<void> {
    const others = (await this.#peers.liveNodes()).filter((n) => n.node_id !== this.#peers.nodeId);
    if (others.length === 0) return;
    this.#mine.add(id);
    await this.#view.putJson(PROBE_PREFIX + id, { type, options });
    try {
      const until = performance.now() + PROBE_WAIT_MS;
      for (;;) {
        const answers = await Promise.all(others.map(async (node) => ({ node, answer: await this.#view.getJson<Answer>(`${ANSWER_PREFIX}${id}/${node.node_id}`) })));
        const refused = answers.find((a) => a.answer && !a.answer.ok);
        if (refused) throw new BadRequestError(`the ${type} audit device cannot be opened on node ${describeNode(refused.node)}: ${refused.answer!.reason}; it was enabled on no node`);
        const silent = answers.find((a) => !a.answer);
        if (!silent) return;
        if (performance.now() > until) throw new BadRequestError(`node ${describeNode(silent.node)} did not confirm within ${PROBE_WAIT_MS / 1000} s that it can open the ${type} audit device; it was enabled on no node`);
        await new Promise((resolve) => setTimeout(resolve, POLL_MS));
      }
    } finally {
      this.#mine.delete(id);
      await Promise.all([PROBE_PREFIX + id, ...others.map((n) => `${ANSWER_PREFIX}${id}/${n.node_id}`)].map((key) => this.#view.delete(key).catch(() => undefined)));
    }
  }

  /** Answers the probes other nodes made: opens each device once, closes it, and says whether it could. */
  async answer(): Promise<void> {
    const pending = await this.#view.list(PROBE_PREFIX);
    this.#answered = new Set([...this.#answered].filter((id) => pending.includes(id)));
    for (const id of pending) {
      if (this.#mine.has(id) || this.#answered.has(id)) continue;
      const probe = await this.#view.getJson<{ type: string; options: Record<string, string> }>(PROBE_PREFIX + id);
      if (!probe) continue;
      let answer: Answer = { ok: true };
      try {
        const config = deviceConfig(probe.type, probe.options, this.#settings);
        await config.sink.open();
        await config.sink.close();
      } catch (err) {
        answer = { ok: false, reason: (err as Error).message };
        this.#logger.warn({ type: probe.type, reason: answer.reason }, 'an audit device another node is enabling cannot be opened here; its enable is refused');
      }
      await this.#view.putJson(`${ANSWER_PREFIX}${id}/${this.#peers.nodeId}`, answer);
      this.#answered.add(id);
    }
  }
}

function describeNode(node: NodeRecord): string {
  return `${node.hostname} (${node.api_address || node.node_id})`;
}
