import { MemoryLedger } from '../../../src/budget/memory-ledger.js';
import { ledgerContract } from '../../helpers/budget-ledger-contract.js';

ledgerContract('memory', () => new MemoryLedger());
