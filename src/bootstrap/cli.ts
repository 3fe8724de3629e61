/**
 * `npm run bootstrap -- --check file.yaml`: validates a bootstrap file offline, where the server would run (its
 * environment variables and files are the ones references resolve against). Exit 0 when valid; 2 with every error
 * (file:line: path: message) when not, as the server itself exits on an invalid file at start.
 */
import { loadSettings, SettingsError } from '../settings.ts';
import { BootstrapInvalidError, loadBootstrapFile, type LoadOptions } from './load.ts';
import { describeSpec } from './plan.ts';
import { loadOptions } from './run.ts';

const USAGE = 'usage: npm run bootstrap -- --check <file.yaml|file.json>';

function main(argv: string[]): number {
  const check = argv.indexOf('--check');
  const file = argv.find((a) => !a.startsWith('--'));
  if (check < 0 || !file || argv.length !== 2) {
    process.stderr.write(`${USAGE}\n`);
    return 2;
  }
  let options: LoadOptions;
  try {
    options = loadOptions(loadSettings(process.env, []));
  } catch (err) {
    if (!(err instanceof SettingsError)) throw err;
    process.stderr.write(`strongroom: invalid settings: ${err.message}\n`);
    return 2;
  }
  try {
    const { spec } = loadBootstrapFile(file, options);
    process.stdout.write(`${file}: valid (${describeSpec(spec)})\n`);
    return 0;
  } catch (err) {
    if (!(err instanceof BootstrapInvalidError)) throw err;
    process.stderr.write(`${err.message}\n${err.lines().map((l) => `  ${l}\n`).join('')}`);
    return 2;
  }
}

process.exitCode = main(process.argv.slice(2));
