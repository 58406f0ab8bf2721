/**
 * Loading an optional dependency (`ioredis`, `better-sqlite3`) on demand, in every build.
 */
import { createRequire } from 'node:module';

/**
 * `require(name)`, resolved from this module. Not a bare `require`: in the ESM build the bundler
 * turns it into a shim that throws "Dynamic require ... is not supported". The CommonJS build has
 * `__filename`; the ESM build, and the sources run by tsx or vitest, have `import.meta.url`.
 */
export function requireOptional(name: string): unknown {
  const from = typeof __filename === 'string' ? __filename : import.meta.url;
  return createRequire(from)(name);
}
