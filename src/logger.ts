import pino, { type Logger } from 'pino';

/** Anything that could carry a credential is censored before a log line is written. */
export const REDACT_PATHS = [
  'token', 'client_token', 'password', 'bindpass', 'client_secret', 'secret', 'jwt', 'assertion',
  '*.token', '*.client_token', '*.password', '*.bindpass', '*.client_secret', '*.secret', '*.jwt', '*.assertion',
  'req.headers.authorization', 'req.headers["x-vault-token"]', 'req.headers["x-service-token"]',
];

export function createLogger(level: string, destination?: pino.DestinationStream): Logger {
  return pino({ level, redact: { paths: REDACT_PATHS, censor: '[redacted]' } }, destination);
}
