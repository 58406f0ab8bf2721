#!/usr/bin/env node
// tollgate CLI entry point (work in progress: `run`, `budget`, `demo`).
process.stderr.write('tollgate: the CLI is being built\n');
process.exitCode = 2;
