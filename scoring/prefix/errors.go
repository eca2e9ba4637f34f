package prefix

import "errors"

// Error classes of the index. Callers test them with errors.Is; the returned errors wrap them with the
// worker and hash involved.
var (
	// ErrParentNotFound rejects a whole store: its parent engine hash is not held by that (worker, dp_rank).
	// Dynamo logs it as "skipping store operation"; the usual cause is a missed or reordered event.
	ErrParentNotFound = errors.New("prefix: parent block not found")

	// ErrBlockNotFound reports a removal of an engine hash the (worker, dp_rank) does not hold. The other
	// hashes of the same removal are still applied.
	ErrBlockNotFound = errors.New("prefix: block not found")

	// ErrInvalidBlockSequence stops a store at a block whose engine hash the worker already holds for a
	// different block, which includes a block that is its own parent. Blocks before it stay applied.
	ErrInvalidBlockSequence = errors.New("prefix: invalid block sequence")
)
