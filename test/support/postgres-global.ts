/**
 * Vitest global setup: one throwaway PostgreSQL per test run, stopped when the run ends (also when tests fail or
 * the run is interrupted). Test files reach it with `inject('postgres')` and make their own database in it.
 */
// Importing the module (types only) is what lets tsc resolve the augmentation below under nodenext.
import type {} from 'vitest';
import type { TestProject } from 'vitest/node';
import { startPostgres, stopPostgres, type PostgresFacts } from './postgres.ts';

declare module 'vitest' {
  export interface ProvidedContext {
    postgres: PostgresFacts;
  }
}

export default async function setup(project: TestProject): Promise<() => Promise<void>> {
  const facts = await startPostgres();
  project.provide('postgres', facts);
  // An interrupted run (Ctrl-C) may exit without teardown; SIGQUIT is the postmaster's immediate shutdown.
  const onExit = () => {
    try { process.kill(facts.pid, 'SIGQUIT'); } catch { /* already gone */ }
  };
  process.once('exit', onExit);
  return async () => {
    process.removeListener('exit', onExit);
    await stopPostgres(facts);
  };
}
