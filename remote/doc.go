// Package remote runs lanes in lane host processes, one per GPU, and
// routes tenants' work to them from a front in another process, so that a
// GPU's sticky fault (which poisons its whole process) costs only that
// GPU. Every message goes through protoactor-go's remote.
//
// A host ([Serve], cmd/lanehost) runs an actors.Scheduler over its
// devices, for up to [HostConfig.MaxFronts] fronts at once, and enforces
// its lanes' admission across them. A front ([StartFront]) joins hosts at
// addresses it is given, or launches host processes itself and restarts
// them. Registration agrees on
// a protocol version ([Protocol]; a mismatch is refused, not crashed on)
// and gives the host an epoch that every later message carries: what a
// lost host says late is dropped. Hosts send heartbeats; a host silent for
// [FrontConfig.LostAfter], whose address the remote reports terminated,
// whose process exited or whose device is poisoned is lost at once: its
// calls in flight end indeterminate exactly once ([HostLostError]), and its
// tenants' calls answer [DeviceStateLostError] until they Forget and set up
// again.
//
// Past one machine, hosts join a named cluster ([HostConfig.Cluster]:
// protoactor-go's cluster package, the automanaged provider or any other)
// and fronts find them there ([FrontConfig.Cluster]): a host that becomes
// a member is joined and takes new tenants at once, one that leaves the
// membership takes none. Membership only says who is there: the messages
// go by plain remote, and a member is routed to only while the front's own
// heartbeats say it serves.
//
// A round trip costs a fixed time through the remote (about a dozen
// goroutine hand-offs in two processes); [HostStatus.RoundTrip] says how
// much, beside the lane's own time, from one call in [SampleEvery]. Keep
// many calls in flight per host, and [Front.Encode] a repeated step.
//
// The wire form is the protobuf messages of remote/wirepb, generated from
// proto/lanes/remote/v1 by scripts/gen-proto.sh. Decoding is a boundary: a
// batch that arrives from another process is checked for the wire's limits
// here (entry, argument and byte counts, enum ranges, sizes that fit)
// before it becomes a lanes.Batch, which the receiving lane then validates
// against its device as any other batch. Library calls and program
// invocations are code and references of the sending process: they have no
// wire form and are refused on encoding.
package remote
