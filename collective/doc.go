// Package collective reduces device buffers across a group of ranks, for
// vocabulary-parallel sampling: the interface [Comm], and [NewLocal], its in-process
// implementation. Package collective/nccl implements it over NVIDIA's NCCL.
//
// # Vocabulary-parallel sampling
//
// When a model's output layer is split by vocabulary over several devices (tensor
// parallelism), each rank holds a shard of every logits row. Rather than gathering the
// full rows on one device, each rank samples its own shard and the ranks agree on the
// winner with one small all-reduce:
//
//  1. Each rank scores the tokens of its shard as the sampling kernels do, with the
//     noise drawn for each token's global index (shard offset plus local index), and
//     keeps, per row, the best packed key: the score's order key in the high 32 bits
//     and the bitwise complement of the global index in the low 32. The largest key is
//     the largest score, ties to the lowest index.
//  2. Each rank writes its keys, one uint64 per row, into a device buffer.
//  3. One AllReduce with [OpMax] over [Uint64] leaves on every rank the largest key of
//     each row over all the shards: the token the unsharded row would give, since every
//     token's score is the same wherever it is computed. The low 32 bits, inverted,
//     are the token.
//
// The reduction moves 8 bytes per row, whatever the vocabulary.
//
// # Rules every implementation follows
//
//   - Every rank of a group makes the same sequence of calls; a rank's k-th AllReduce
//     reduces with the k-th of every other rank. Count, element type and operation must
//     agree; offsets, buffers and streams are each rank's own.
//   - AllReduce is ordered on the stream it is given: it reads the elements after the
//     work queued there before the call, and work queued after it sees the result.
//   - Floats are summed in a fixed order, so results are deterministic; a maximum of
//     Uint64 compares unsigned (the packed keys of positive scores exceed 2^63).
//   - Errors wrap [ErrArgument], [ErrMismatch] or [ErrClosed] where they apply, and name
//     the call and the rank that failed. Close is idempotent.
//
// # The implementations
//
// [NewLocal] makes n ranks in one process that meet in host memory: for tests, for the
// CPU device, for several shards on one GPU, or for devices of different kinds. Each call
// copies the rank's elements to the host and back and synchronises the rank's stream.
// A rank that joins a round with a bad argument still takes part, marked, so the round
// fails on every rank instead of leaving the others waiting; closing any rank closes
// the group and releases the ranks that wait.
//
// nccl.Open loads libnccl.so.2 at run time, without cgo, and gives a Comm per CUDA
// device: one process per rank (InitRank, with a UniqueID passed between the
// processes) or one process driving several GPUs (InitAll). Its AllReduce is one
// ncclAllReduce in place on the stream: it returns once the reduction is queued, with
// no copy to the host and no synchronisation.
package collective
