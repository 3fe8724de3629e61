/** The server's version, as sys/health, sys/seal-status and sys/ha-status report it. */
export const VERSION = '0.1.0';
