/**
 * Vitest global setup: one throwaway slapd per test run, stopped by pid when the run ends
 * (also when tests fail or the run is interrupted).
 */
// Importing the module (types only) is what lets tsc resolve the augmentation below under nodenext.
import type {} from 'vitest';
import type { TestProject } from 'vitest/node';
import { SLAPD_FACTS_ENV, startSlapd, stopSlapd, type SlapdFacts } from './slapd.ts';

declare module 'vitest' {
  export interface ProvidedContext {
    slapd: SlapdFacts;
  }
}

export default async function setup(project: TestProject): Promise<() => Promise<void>> {
  const facts = await startSlapd();
  project.provide('slapd', facts);
  // Forked workers inherit the environment, which serves code that cannot call inject().
  process.env[SLAPD_FACTS_ENV] = JSON.stringify(facts);

  let stopped = false;
  const stop = async () => {
    if (stopped) return;
    stopped = true;
    await stopSlapd(facts);
  };
  // An interrupted run (Ctrl-C) may exit without teardown; kill our slapd synchronously on the way out.
  const onExit = () => {
    try { process.kill(facts.pid, 'SIGKILL'); } catch { /* already gone */ }
  };
  process.once('exit', onExit);
  return async () => {
    process.removeListener('exit', onExit);
    await stop();
  };
}
