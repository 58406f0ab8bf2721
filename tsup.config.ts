import { defineConfig } from 'tsup';

export default defineConfig({
  entry: {
    index: 'src/index.ts',
    axios: 'src/adapters/axios.ts',
    undici: 'src/adapters/undici.ts',
    redis: 'src/redis/index.ts',
    testing: 'src/testing/index.ts',
    cli: 'src/cli/main.ts',
  },
  external: ['axios', 'undici', 'ioredis', 'better-sqlite3'],
  format: ['esm', 'cjs'],
  // Declarations for the library entries; the CLI is a program, not an API.
  dts: {
    entry: {
      index: 'src/index.ts',
      axios: 'src/adapters/axios.ts',
      undici: 'src/adapters/undici.ts',
      redis: 'src/redis/index.ts',
      testing: 'src/testing/index.ts',
    },
  },
  // No source maps: they held the sources (about 6 MB of an 8 MB package) that the package does not ship.
  sourcemap: false,
  clean: true,
  target: 'node20',
  // Shared code (the error classes, the core) in chunks both entries import: with a copy per entry,
  // an error thrown through \`tollgate/redis\` was no \`instanceof\` the class exported by \`tollgate\`.
  // For CommonJS too (esbuild's splitting is ESM-only; tsup's cjs splitting goes through ESM).
  splitting: true,
  // import.meta.url in the CommonJS build (src/optional-dependency.ts): split CommonJS keeps it as written.
  shims: true,
  // Split CommonJS goes through Rollup this way. Without it, tsup rewrote it with sucrase: classes
  // renamed \`_class\`, \`?.\` and \`??\` turned into helper calls on the hot path (review).
  treeshake: true,
});
