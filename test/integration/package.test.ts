/**
 * The built package, as users load it: both module formats load the optional dependencies
 * (`better-sqlite3` for the file ledger, `ioredis` for a store made from a URL) and the CLI runs.
 * Until session 15 the ESM build failed both ("Dynamic require of ... is not supported"): the
 * tests and the demo ran the sources, never the build. Also what `npm pack` would ship.
 */
import { execFile } from 'node:child_process';
import { cpSync, existsSync, mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join, resolve } from 'node:path';
import { promisify } from 'node:util';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';

const run = promisify(execFile);
const root = resolve(import.meta.dirname, '../..');
// Inside the repository, so the build's imports of its dependencies resolve to node_modules.
const out = join(root, 'node_modules', '.tollgate-package-test');
const scratch = mkdtempSync(join(tmpdir(), 'tollgate-package-'));

beforeAll(async () => {
  rmSync(out, { recursive: true, force: true });
  await run('npx', ['tsup', '--out-dir', out], { cwd: root, timeout: 180_000 });
}, 200_000);

afterAll(() => {
  rmSync(out, { recursive: true, force: true });
  rmSync(scratch, { recursive: true, force: true });
});

/** Run `code` with node as an ES module (`.mjs`) or CommonJS (`.cjs`); answers its stdout. */
async function node(format: 'mjs' | 'cjs', code: string): Promise<string> {
  const { writeFileSync } = await import('node:fs');
  const file = join(scratch, `check-${format}-${Math.random().toString(36).slice(2)}.${format}`);
  writeFileSync(file, code);
  const { stdout } = await run(process.execPath, [file], { cwd: scratch, timeout: 60_000 });
  return stdout.trim();
}

const ledgerCheck = (load: string, ledgerPath: string) => `
${load}
const budget = { budgets: { name: 'day', limit: '$1', period: 'day' }, ledger: { path: ${JSON.stringify(ledgerPath)} } };
const gate = createGate({ limits: [], budget });
const answer = await gate.schedule(() => 'sent', { priceMicros: 250000 });
await gate.close();
// Another ledger on the same file (as after a restart) reads the spend.
const again = new FileLedger({ path: ${JSON.stringify(ledgerPath)} });
const spent = again.snapshot(Date.now()).map((w) => w.spentMicros);
again.close();
console.log(answer, JSON.stringify(spent));
`;

const redisCheck = (load: string) => `
${load}
// A URL nothing answers at: the store is made (ioredis loaded) and fails calls by its policy.
const gate = createSharedGate({ redis: 'redis://127.0.0.1:1', limits: [{ algorithm: 'token-bucket', limit: 10, intervalMs: 1000 }], failure: 'fail-open', commandTimeoutMs: 200 });
const answer = await gate.schedule(() => 'sent');
await gate.close();
console.log(answer);
`;

describe('the built package', () => {
  for (const format of ['mjs', 'cjs'] as const) {
    const load = (entry: string, names: string) =>
      format === 'mjs'
        ? `import { ${names} } from ${JSON.stringify(join(out, `${entry}.js`))};`
        : `const { ${names} } = require(${JSON.stringify(join(out, `${entry}.cjs`))});`;
    // CommonJS has no top-level await.
    const wrap = (code: string) => (format === 'mjs' ? code : `(async () => {${code}})();`);

    it(`${format}: a gate with a budget persists its spend in the file ledger (better-sqlite3 loads)`, async () => {
      const ledgerPath = join(scratch, `ledger-${format}.sqlite`);
      const output = await node(
        format,
        wrap(ledgerCheck(load('index', 'createGate, FileLedger'), ledgerPath)),
      );
      expect(existsSync(ledgerPath)).toBe(true);
      expect(output).toBe('sent [250000]');
    }, 60_000);

    it(`${format}: a shared gate made from a Redis URL loads ioredis`, async () => {
      const output = await node(format, wrap(redisCheck(load('redis', 'createSharedGate'))));
      expect(output).toBe('sent');
    }, 60_000);
  }

  // Found by review (session 16): each entry carried its own copy of the error classes, so an error
  // thrown through tollgate/redis was no instanceof the class a user imports from tollgate.
  for (const format of ['mjs', 'cjs'] as const) {
    it(`${format}: an error thrown through tollgate/redis is instanceof the classes tollgate exports`, async () => {
      const names = 'createSharedGate';
      const main = 'TollgateError, InvalidOptionError, StoreUnavailableError, QueueTimeoutError';
      const code =
        format === 'mjs'
          ? `import { ${names} } from ${JSON.stringify(join(out, 'redis.js'))};
import { ${main} } from ${JSON.stringify(join(out, 'index.js'))};`
          : `const { ${names} } = require(${JSON.stringify(join(out, 'redis.cjs'))});
const { ${main} } = require(${JSON.stringify(join(out, 'index.cjs'))});`;
      const files = ['index', 'redis'].map((e) =>
        JSON.stringify(join(out, `${e}.${format === 'mjs' ? 'js' : 'cjs'}`)),
      );
      const loadAll = files
        .map((f) => `...${format === 'mjs' ? `(await import(${f}))` : `require(${f})`}`)
        .join(', ');
      const body = `
const checks = [];
try { createSharedGate({ redis: 'redis://127.0.0.1:1', limits: [], localShare: 7 }); } catch (e) {
  checks.push(e instanceof InvalidOptionError, e instanceof TollgateError);
}
const gate = createSharedGate({ redis: 'redis://127.0.0.1:1', limits: [{ algorithm: 'token-bucket', limit: 10, intervalMs: 1000 }], failure: 'fail-closed', commandTimeoutMs: 200 });
try { await gate.schedule(() => 'sent'); } catch (e) {
  checks.push(e instanceof StoreUnavailableError, e instanceof TollgateError);
}
await gate.close();
// Every exported class keeps its name (split CommonJS once renamed them _class, _class7...).
const entries = { ${loadAll} };
checks.push(Object.entries(entries).filter(([k, v]) => typeof v === 'function' && /^[A-Z]/.test(k) && v.name !== k).map(([k]) => k).join() === '');
console.log(JSON.stringify(checks));
`;
      const output = await node(
        format,
        format === 'mjs' ? `${code}\n${body}` : `${code}\n(async () => {${body}})();`,
      );
      expect(output).toBe('[true,true,true,true,true]');
    }, 60_000);
  }

  it('the CLI reads a file ledger from the build', async () => {
    const ledgerPath = join(scratch, 'cli-ledger.sqlite');
    const load = `const { createGate, FileLedger } = require(${JSON.stringify(join(out, 'index.cjs'))});`;
    await node('cjs', `(async () => {${ledgerCheck(load, ledgerPath)}})();`);
    const { stdout } = await run(process.execPath, [join(out, 'cli.js'), 'budget', '--ledger', ledgerPath], {
      cwd: scratch,
      timeout: 60_000,
    });
    expect(stdout).toContain('day');
    expect(stdout).toContain('0.25');
  }, 60_000);

  it('npm pack ships the build, the README, the docs and the LICENSE, and nothing else', async () => {
    // The package's own files next to this build, as \`npm pack\` would see them after \`prepack\`.
    const pkg = join(scratch, 'pack');
    for (const file of ['package.json', 'README.md', 'LICENSE']) cpSync(join(root, file), join(pkg, file));
    // The README links to docs/*.md: they ship too (not docs/api, generated).
    cpSync(join(root, 'docs'), join(pkg, 'docs'), { recursive: true });
    cpSync(out, join(pkg, 'dist'), { recursive: true });
    const { stdout } = await run('npm', ['pack', '--dry-run', '--json', '--ignore-scripts'], {
      cwd: pkg,
      timeout: 60_000,
    });
    const [packed] = JSON.parse(stdout) as [{ files: { path: string }[]; unpackedSize: number }];
    const paths = packed.files.map((f) => f.path);
    expect(paths).toEqual(
      expect.arrayContaining([
        'LICENSE',
        'README.md',
        'package.json',
        'dist/index.js',
        'dist/index.cjs',
        'dist/index.d.ts',
        'dist/redis.js',
        'dist/cli.js',
      ]),
    );
    expect(paths).toEqual(
      expect.arrayContaining(['docs/decisions.md', 'docs/providers.md', 'docs/algorithms.md']),
    );
    expect(
      paths.filter(
        (p) =>
          !p.startsWith('dist/') &&
          !/^docs\/[^/]+\.md$/.test(p) &&
          !['LICENSE', 'README.md', 'package.json'].includes(p),
      ),
    ).toEqual([]);
    expect(paths.filter((p) => p.endsWith('.map'))).toEqual([]);
    expect(packed.unpackedSize).toBeLessThan(3_000_000);
  }, 60_000);

  it('package.json builds before packing (a package packed or installed from git is not empty)', async () => {
    const { readFileSync } = await import('node:fs');
    const manifest = JSON.parse(readFileSync(join(root, 'package.json'), 'utf8')) as {
      scripts: Record<string, string>;
    };
    expect(manifest.scripts['prepack']).toBe('npm run build');
  });
});
