/**
 * `npm run bootstrap -- --check file.yaml`: validates a bootstrap file offline, where the server would run (its
 * environment variables and files are the ones references resolve against). Exit 0 when valid; 2 with every error
 * (file:line: path: message) when not, as the server itself exits on an invalid file at start.
 */
import { loadSettings, SettingsError } from '../settings.ts';
import { BootstrapInvalidError, loadBootstrapFile } from './load.ts';
import { describeSpec } from './plan.ts';

const USAGE = 'usage: npm run bootstrap -- --check <file.yaml|file.json>';

function main(argv: string[]): number {
  const check = argv.indexOf('--check');
  const file = argv.find((a) => !a.startsWith('--'));
  if (check < 0 || !file || argv.length !== 2) {
    process.stderr.write(`${USAGE}\n`);
    return 2;
  }
  let allowTokenIds: boolean;
  try {
    const settings = loadSettings(process.env, []);
    allowTokenIds = settings.STRONGROOM_DEV || settings.STRONGROOM_BOOTSTRAP_ALLOW_TOKEN_IDS;
  } catch (err) {
    if (!(err instanceof SettingsError)) throw err;
    process.stderr.write(`strongroom: invalid settings: ${err.message}\n`);
    return 2;
  }
  try {
    const { spec } = loadBootstrapFile(file, { allowTokenIds });
    process.stdout.write(`${file}: valid (${describeSpec(spec)})\n`);
    return 0;
  } catch (err) {
    if (!(err instanceof BootstrapInvalidError)) throw err;
    process.stderr.write(`${err.message}\n${err.lines().map((l) => `  ${l}\n`).join('')}`);
    return 2;
  }
}

process.exitCode = main(process.argv.slice(2));
