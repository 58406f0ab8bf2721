import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll } from 'vitest';
import { FileLedger } from '../../../src/budget/file-ledger.js';
import { ledgerContract } from '../../helpers/budget-ledger-contract.js';

const dir = mkdtempSync(join(tmpdir(), 'tollgate-ledger-'));
let n = 0;
afterAll(() => rmSync(dir, { recursive: true, force: true }));

ledgerContract('file', () => new FileLedger({ path: join(dir, `ledger-${n++}.sqlite`) }));
