/**
 * CLOUD_GO_SDK_LOG_LEVEL=DEBUG turns on the Azure SDKs' request/response logging (@azure/logger,
 * which @azure/identity, MSAL and core-rest-pipeline write to). @azure/logger is process-global, so
 * this module owns it: every line passes through `redact` with the secrets of every live credential.
 */
import { format } from 'node:util';
import { AzureLogger, setLogLevel } from '@azure/logger';
import { redact } from './errors.ts';

export const LOG_LEVEL_VAR = 'CLOUD_GO_SDK_LOG_LEVEL';

export type LogSink = (line: string) => void;

const knownSecrets = new Set<string>();

/** Secrets to scrub exactly (client secrets); pattern redaction covers tokens and assertions. */
export function registerSecret(secret: string | undefined): void {
  if (secret) knownSecrets.add(secret);
}

export function forgetSecret(secret: string | undefined): void {
  if (secret) knownSecrets.delete(secret);
}

export function redactLogLine(line: string): string {
  return redact(line, knownSecrets);
}

/** Applies the level from the environment; returns whether debug logging is on. */
export function configureAzureLogging(sink: LogSink, env: NodeJS.ProcessEnv = process.env): boolean {
  const level = (env[LOG_LEVEL_VAR] ?? '').trim().toUpperCase();
  if (level !== 'DEBUG') {
    setLogLevel(undefined);
    return false;
  }
  AzureLogger.log = (...args: unknown[]) => sink(redactLogLine(format(...args)));
  setLogLevel('verbose');
  return true;
}
