import { ExitCode, type ExitCodeValue } from './exit-codes.js';

/**
 * A problem the user can fix (a bad flag, value, file or config): printed as one message, without a
 * stack trace, and the command exits with `exitCode` (2 unless said otherwise).
 */
export class CliError extends Error {
  readonly exitCode: ExitCodeValue;

  constructor(message: string, exitCode: ExitCodeValue = ExitCode.usage) {
    super(message);
    this.name = 'CliError';
    this.exitCode = exitCode;
  }
}
