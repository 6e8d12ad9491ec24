/**
 * Run after each test file (jest `setupFilesAfterEnv`): stops the revocation-list
 * pollers the file's standalone verifiers started. Jest runs many files in one
 * worker process; a poller left running would go on asking its closed issuer's
 * port, which a later file's server may have taken.
 */
import { stopRevocationListPolling } from '../../lib/require-bearer';

afterAll(() => stopRevocationListPolling());
