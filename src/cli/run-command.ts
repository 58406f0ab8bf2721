/**
 * `tollgate run`: parse, run, print the summary, return the exit code. Ctrl-C once stops taking new
 * requests and lets those in flight finish; twice aborts them too.
 */
import { ExitCode, type ExitCodeValue } from './exit-codes.js';
import { parseRunOptions, runHelp } from './run-options.js';
import { runBatch } from './runner.js';
import { formatSummary } from './summary.js';

export async function runCommand(args: readonly string[]): Promise<ExitCodeValue> {
  const parsed = parseRunOptions(args);
  if (parsed.help) {
    process.stdout.write(`${runHelp}\n`);
    return ExitCode.ok;
  }
  for (const warning of parsed.warnings) process.stderr.write(`warning: ${warning}\n`);

  const stop = new AbortController();
  const kill = new AbortController();
  const onSigint = () => {
    if (!stop.signal.aborted) {
      process.stderr.write(
        '\nStopping: no new requests; waiting for those in flight (Ctrl-C again to abort them)\n',
      );
      stop.abort();
    } else if (!kill.signal.aborted) {
      process.stderr.write('\nAborting the requests in flight\n');
      kill.abort();
    }
  };
  process.on('SIGINT', onSigint);
  process.on('SIGTERM', onSigint);
  try {
    const report = await runBatch(parsed.config, { stop: stop.signal, kill: kill.signal });
    process.stdout.write(`${formatSummary(report)}\n`);
    return report.exitCode;
  } finally {
    process.off('SIGINT', onSigint);
    process.off('SIGTERM', onSigint);
  }
}
