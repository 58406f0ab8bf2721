/** Running the `tollgate` command in a child process, as users do: `node --import tsx src/cli/main.ts`. */
import { type ChildProcess, spawn } from 'node:child_process';
import { readFileSync, writeFileSync } from 'node:fs';
import { createServer as createHttpServer } from 'node:http';
import { type AddressInfo, createServer } from 'node:net';
import { dirname, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';
import { expect } from 'vitest';
import { CliError } from '../../src/cli/cli-error.js';

export const repoRoot = resolve(dirname(fileURLToPath(import.meta.url)), '../..');
const main = resolve(repoRoot, 'src/cli/main.ts');

export interface CliResult {
  readonly code: number | null;
  readonly signal: NodeJS.Signals | null;
  readonly stdout: string;
  readonly stderr: string;
}

export interface CliProcess {
  readonly child: ChildProcess;
  /** Output so far. */
  stdout(): string;
  stderr(): string;
  readonly done: Promise<CliResult>;
}

export function spawnCli(args: readonly string[], options: { cwd?: string } = {}): CliProcess {
  const child = spawn(process.execPath, ['--import', 'tsx', main, ...args], {
    cwd: options.cwd ?? repoRoot,
    env: { ...process.env, NO_COLOR: '1', FORCE_COLOR: '0' },
    stdio: ['ignore', 'pipe', 'pipe'],
  });
  let stdout = '';
  let stderr = '';
  child.stdout!.setEncoding('utf8').on('data', (chunk: string) => {
    stdout += chunk;
  });
  child.stderr!.setEncoding('utf8').on('data', (chunk: string) => {
    stderr += chunk;
  });
  const done = new Promise<CliResult>((resolveDone) => {
    child.on('close', (code, signal) => resolveDone({ code, signal, stdout, stderr }));
  });
  return { child, stdout: () => stdout, stderr: () => stderr, done };
}

export function runCli(args: readonly string[], options: { cwd?: string } = {}): Promise<CliResult> {
  return spawnCli(args, options).done;
}

export function writeJsonl(path: string, lines: readonly (string | object)[]): void {
  writeFileSync(path, `${lines.map((l) => (typeof l === 'string' ? l : JSON.stringify(l))).join('\n')}\n`);
}

/** Every line of a results file, parsed (a line that does not parse fails the test). */
export function readResults(path: string): Record<string, unknown>[] {
  return readFileSync(path, 'utf8')
    .split('\n')
    .filter((line) => line.trim() !== '')
    .map((line) => JSON.parse(line) as Record<string, unknown>);
}

/** Lines in a file right now (0 if it does not exist yet). */
export function lineCount(path: string): number {
  try {
    return readFileSync(path, 'utf8')
      .split('\n')
      .filter((l) => l.trim() !== '').length;
  } catch {
    return 0;
  }
}

export const sleep = (ms: number) => new Promise<void>((r) => setTimeout(r, ms));

/** Poll until `predicate` holds (or fail after `timeoutMs`). */
export async function waitFor(predicate: () => boolean, timeoutMs: number, what: string): Promise<void> {
  const deadline = Date.now() + timeoutMs;
  while (!predicate()) {
    if (Date.now() > deadline) throw new Error(`timed out waiting for ${what}`);
    await sleep(20);
  }
}

/** A port on 127.0.0.1 nothing listens on (it was free a moment ago). */
export async function closedPort(): Promise<number> {
  const server = createServer();
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  const { port } = server.address() as AddressInfo;
  await new Promise<void>((resolve) => server.close(() => resolve()));
  return port;
}

/** The message of the CliError `fn` throws (fails the test when it throws anything else, or nothing). */
export function cliErrorMessage(fn: () => unknown): string {
  try {
    fn();
  } catch (error) {
    expect(error).toBeInstanceOf(CliError);
    return (error as Error).message;
  }
  throw new Error('expected a CliError');
}

/** A local API answering every request 200 `{"ok":true}`, counting what it received. */
export interface OkServer {
  /** `http://127.0.0.1:<port>` */
  readonly url: string;
  /** Requests received since it started (or since `received = 0`). */
  received: number;
  close(): Promise<void>;
}

export async function okServer(): Promise<OkServer> {
  const ok: { url: string; received: number; close(): Promise<void> } = {
    url: '',
    received: 0,
    close: () => new Promise<void>((resolve) => server.close(() => resolve())),
  };
  const server = createHttpServer((req, res) => {
    ok.received++;
    req.resume();
    res.setHeader('content-type', 'application/json');
    res.end('{"ok":true}');
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  ok.url = `http://127.0.0.1:${(server.address() as AddressInfo).port}`;
  return ok;
}
