// Package remote is the wire between a front (the scheduler) and lane host
// processes, one per GPU: the protobuf messages of
// remote/wirepb, generated from proto/lanes/remote/v1 by
// scripts/gen-proto.sh, and their conversion from and to lanes' own types.
//
// Decoding is a boundary: a batch that arrives from another process is
// checked for the wire's limits here (entry, argument and byte counts, enum
// ranges, sizes that fit) before it becomes a lanes.Batch, which the
// receiving lane then validates against its device as any other batch.
// Library calls and program invocations are code and references of the
// sending process: they have no wire form and are refused on encoding.
package remote
