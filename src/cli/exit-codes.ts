/**
 * Exit codes of the `tollgate` command. Stable: scripts branch on them. When several apply, the
 * first in this order wins: interrupted, budget, usage/input, partial failure.
 */
export const ExitCode = {
  /** Every request read has a result and every result is a success (HTTP status below 400). */
  ok: 0,
  /** An unexpected internal error (a bug, or an I/O failure such as a full disk). */
  internal: 1,
  /** Bad usage or input: an unknown flag or flag value, an unreadable file, a bad config; or `--strict` found a malformed line. */
  usage: 2,
  /** A budget was exhausted: the run stopped; requests not sent have no result, and a re-run resumes them. */
  budget: 3,
  /**
   * Partial failure: some requests ended with an error or an HTTP status >= 400 (in this run, or
   * earlier: a resumed run without --retry-failed leaves those failures in the results), or
   * malformed lines were skipped.
   */
  partial: 4,
  /** Interrupted (Ctrl-C): results so far are written; a re-run resumes the rest. 128 + SIGINT (2). */
  interrupted: 130,
} as const;

export type ExitCodeValue = (typeof ExitCode)[keyof typeof ExitCode];

/** The table printed by `tollgate --help`. */
export const exitCodeHelp = `Exit codes:
  0    every request has a result and all are successes (HTTP status < 400)
  1    internal error (a bug, or an I/O failure such as a full disk)
  2    usage or input error: bad flag or value, unreadable file, bad config,
       or a malformed line with --strict (nothing is sent when --strict finds one)
  3    stopped by a budget: unsent requests have no result; a re-run resumes them
  4    partial failure: some requests ended with an error or HTTP status >= 400
       (in this run, or earlier and not retried: see --retry-failed),
       or malformed lines were skipped
  130  interrupted (Ctrl-C): finished results are written; a re-run resumes the rest`;
