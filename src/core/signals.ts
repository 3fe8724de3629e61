/**
 * Wake-ups between the nodes of a cluster, per mount (SystemView.signal / onSignal), over the store's
 * SharedStorage.signal. Nothing on a store of its own: there every event is already local. Payloads are
 * `<mount uuid> <topic>`: never a secret (topics are names an operator created, such as a library set).
 */
import type { SharedStorage } from './storage/types.ts';

export class MountSignals {
  readonly #shared: SharedStorage | undefined;
  readonly #listeners = new Map<string, Set<(topic: string) => void>>();
  #subscribed = false;

  constructor(shared: SharedStorage | undefined) {
    this.#shared = shared;
  }

  send(mount: string, topic: string): void {
    void this.#shared?.signal(`${mount} ${topic}`).catch(() => undefined);
  }

  subscribe(mount: string, listener: (topic: string) => void): () => void {
    if (!this.#shared) return () => undefined;
    if (!this.#subscribed) {
      this.#subscribed = true;
      this.#shared.onSignal((payload) => {
        const space = payload.indexOf(' ');
        for (const heard of this.#listeners.get(payload.slice(0, space)) ?? []) heard(payload.slice(space + 1));
      });
    }
    let listeners = this.#listeners.get(mount);
    if (!listeners) this.#listeners.set(mount, (listeners = new Set()));
    listeners.add(listener);
    return () => {
      listeners.delete(listener);
      if (listeners.size === 0) this.#listeners.delete(mount);
    };
  }
}
