/** Event subscribers for tests: a real WebSocket client (the `ws` package) on Vault's subscribe endpoint. */
import WebSocket from 'ws';

export interface Received {
  events: any[];
  raw: string[];
  closed: Promise<{ code: number; reason: string }>;
  ws: WebSocket;
}

/**
 * Subscribes with a real WebSocket client (resolving once the server accepted the upgrade, or rejecting with its HTTP
 * status and body); each socket is added to `sockets`, for the test to terminate.
 */
export const subscriber = (baseUrl: string, sockets: WebSocket[]) => (eventType: string, token: string, query: Record<string, string> = {}): Promise<Received> => {
  const params = new URLSearchParams({ json: 'true', ...query });
  const ws = new WebSocket(`${baseUrl.replace(/^http/, 'ws')}/v1/sys/events/subscribe/${eventType}?${params}`, { headers: { 'X-Vault-Token': token } });
  sockets.push(ws);
  const received: Received = { events: [], raw: [], ws, closed: new Promise((resolve) => ws.on('close', (code, reason) => resolve({ code, reason: reason.toString() }))) };
  ws.on('message', (data) => {
    received.raw.push(data.toString());
    received.events.push(JSON.parse(data.toString()));
  });
  return new Promise((resolve, reject) => {
    ws.on('open', () => resolve(received));
    ws.on('unexpected-response', (_req, res) => {
      let body = '';
      res.on('data', (c) => (body += c));
      res.on('end', () => reject(Object.assign(new Error(`HTTP ${res.statusCode}`), { status: res.statusCode, body })));
    });
    ws.on('error', reject);
  });
};

/** Waits (bounded) until `check` holds. */
export async function until(check: () => boolean, what: string, ms = 15_000): Promise<void> {
  for (const end = Date.now() + ms; !check(); ) {
    if (Date.now() > end) throw new Error(`timed out waiting for ${what}`);
    await new Promise((r) => setTimeout(r, 50));
  }
}

