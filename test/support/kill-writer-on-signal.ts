/**
 * Preloaded (`node --import`) into a server process under test: SIGUSR2 terminates its SQLite writer thread,
 * which is how a writer crash looks from the request thread.
 */
import { captureSqliteWriters } from './writer-capture.ts';

const { writers } = captureSqliteWriters();
process.on('SIGUSR2', () => {
  for (const writer of writers) void writer.terminate();
});
