/** Time is injected so TTLs, rotations and expiry can be tested by advancing a fake clock. */
export interface Clock {
  now(): number;
  /** Like setTimeout, but driven by this clock; returns a cancel function. */
  setTimer(ms: number, fn: () => void): () => void;
}

export const systemClock: Clock = {
  now: () => Date.now(),
  setTimer(ms, fn) {
    // Node caps timers at 2^31-1 ms; longer waits re-arm themselves.
    const max = 2_147_483_647;
    let handle: NodeJS.Timeout;
    const arm = (left: number) => {
      handle = setTimeout(() => (left > max ? arm(left - max) : fn()), Math.min(left, max));
      handle.unref();
    };
    arm(Math.max(0, ms));
    return () => clearTimeout(handle);
  },
};

/** A clock for tests: time moves only when `advance` is called, firing due timers in order. */
export class FakeClock implements Clock {
  #now: number;
  #timers: Array<{ at: number; fn: () => void; id: number }> = [];
  #seq = 0;
  constructor(start = Date.UTC(2030, 0, 1)) {
    this.#now = start;
  }
  now(): number {
    return this.#now;
  }
  setTimer(ms: number, fn: () => void): () => void {
    const id = ++this.#seq;
    this.#timers.push({ at: this.#now + Math.max(0, ms), fn, id });
    return () => {
      this.#timers = this.#timers.filter((t) => t.id !== id);
    };
  }
  /** Moves time forward, running each timer that falls due; awaits between timers so async work settles. */
  async advance(ms: number): Promise<void> {
    const target = this.#now + ms;
    for (;;) {
      this.#timers.sort((a, b) => a.at - b.at || a.id - b.id);
      const next = this.#timers[0];
      if (!next || next.at > target) break;
      this.#timers.shift();
      this.#now = Math.max(this.#now, next.at);
      next.fn();
      await settle();
    }
    this.#now = target;
    await settle();
  }
}

async function settle(): Promise<void> {
  for (let i = 0; i < 20; i++) await new Promise((r) => setImmediate(r));
}
