#!/usr/bin/env node
/**
 * The `tollgate` command: `run`, `budget`, `demo`. Thin: each subcommand parses its argv with
 * node:util parseArgs and calls the public API. A CliError is a message for the user (exit 2 unless
 * it says otherwise); anything else is a bug (exit 1, with the stack).
 */
import { isTollgateError } from '../index.js';
import { budgetCommand } from './budget-command.js';
import { CliError } from './cli-error.js';
import { demoCommand } from './demo/demo-command.js';
import { ExitCode, type ExitCodeValue, exitCodeHelp } from './exit-codes.js';
import { runCommand } from './run-command.js';

const help = `tollgate: throttle outbound calls to paid HTTP APIs

Usage:
  tollgate run <requests.jsonl> [options]   send a JSONL file of requests through a gate (resumable)
  tollgate budget [show|reset] [options]    show or reset the persistent budget ledger
  tollgate demo [options]                   offline demo: unthrottled vs tollgate against a simulated API
  tollgate <command> --help                 options of a command

${exitCodeHelp}`;

async function main(argv: readonly string[]): Promise<ExitCodeValue> {
  const [command, ...rest] = argv;
  switch (command) {
    case 'run':
      return runCommand(rest);
    case 'budget':
      return budgetCommand(rest);
    case 'demo':
      return demoCommand(rest);
    case undefined:
    case 'help':
    case '--help':
    case '-h':
      process.stdout.write(`${help}\n`);
      return command === undefined ? ExitCode.usage : ExitCode.ok;
    default:
      throw new CliError(`Unknown command \`${command}\`. Commands: run, budget, demo (see tollgate --help)`);
  }
}

main(process.argv.slice(2)).then(
  (code) => {
    process.exitCode = code;
  },
  (error: unknown) => {
    if (error instanceof CliError) {
      process.stderr.write(`tollgate: ${error.message}\n`);
      process.exitCode = error.exitCode;
    } else if (isTollgateError(error) && error.code === 'ERR_INVALID_OPTION') {
      process.stderr.write(`tollgate: ${error.message}\n`);
      process.exitCode = ExitCode.usage;
    } else {
      process.stderr.write(
        `tollgate: internal error: ${error instanceof Error ? (error.stack ?? error.message) : String(error)}\n`,
      );
      process.exitCode = ExitCode.internal;
    }
  },
);
