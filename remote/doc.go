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
// a protocol version (a mismatch is refused, not crashed on)
// and gives the host an epoch that every later message carries: what a
// lost host says late is dropped. It takes three messages: the host's
// Hello, the front's Welcome, and the host's first heartbeat under the
// epoch, which shows the host still holds it; only then is a call routed
// there. Hosts send heartbeats; a host silent for
// [FrontConfig.LostAfter], whose address the remote reports terminated,
// whose process exited or whose device is poisoned, or that answers a
// message with its word that it dropped the registration (the connection
// from the front ended, say), is lost at once: its
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
// much, beside the lane's own time, from one call in 64. Keep
// many calls in flight per host, and [Front.Encode] a repeated step.
//
// A submission's context counts on its host as it does in one process: a
// batch whose context ends while it waits for its lane is withdrawn (it
// never runs, and its Pending ends with an error that is errors.Is
// actors.ErrWithdrawn and the context's error, code withdrawn, not
// submitted); one its lane took already runs and ends as it does. The
// front tells the host after the submission, by the same way; a context
// that cannot end (context.Background, the serving loop's) costs nothing.
//
// # Security
//
// Every connection, both ways and on every address, is mutual TLS: by
// certificates of the user's CA ([LoadTLS], required off loopback), else
// rooted in a token of a file only the user can read ([DefaultTokenFile],
// [FrontConfig.TokenFile], [HostConfig.TokenFile]): every process derives
// the same authority from the token and shows a fresh certificate of its
// own, so the token is never sent, and a listener that does not hold it
// learns nothing. A connection that does not prove itself within 5 s is
// refused before any message of its is read (counted in
// [WireStats].Handshakes; [ErrUnauthenticated] at a front so refused, or
// facing something that does not speak TLS, which is also [ErrNoHost]). A
// peer speaks only for itself: the address it says it is must be where it
// listens with the same certificate. Then a guard checks
// every batch before protoactor-go's handlers see it: a malformed batch
// ends the connection; a system message about an actor not the sender's
// own, one no peer may send, one for no actor here, or one from a sender
// that is not the connection's is dropped; a panic in the remote's
// handler ends the connection alone ([WireStats] counts each). A host
// takes a registration's messages only from the front that registered
// it, and tenants belong to the front that set them up: the same name
// through another front is another tenant on the host, and another front's
// buffers are, to a front, buffers never handed out. A front that sends
// nothing for [HostConfig].SilentFront gives its place to a new front that
// finds the host full.
//
// # Same-host data plane
//
// A host offers each front on its machine a data plane: an anonymous,
// sealed shared-memory segment (a memfd) of two rings, one each way, named
// in its Hello (which only an authenticated front reads) by its /proc
// entry and a nonce. A front that can open it (the same machine and user)
// and finds the seals, size and nonce right maps it and says so in its
// Welcome; from then on every message of the registration but heartbeats
// and probes crosses the rings: submissions, receipts, operations and
// their results, leaving. A side whose ring is empty parks on a doorbell,
// a pipe the host makes with the segment and offers beside it (the front
// opens it through the same /proc, checked as a pipe of its user held by
// the segment's process, or declines the segment): the writer writes a
// byte only when it finds the reader parked, and a reader parked on a pipe
// waits in Go's poller, so its thread's P runs at once whatever the reader
// readied. Any process of the user can open the doorbells as it can the
// segment: one that steals their bytes slows the front to a wake per
// 10 ms, no worse. Nothing read from a ring is trusted: a record
// that makes no sense ends the registration; messages are checked as on
// the wire. A side that stops reading holds up no one (a backlog waits for
// room). An upload of 4 KiB or more skips the ring: the front writes its
// bytes once into the segment's upload area ([HostConfig].UploadAreaBytes)
// and the command names the span, which the host checks against the
// area's bounds; on a device that pins host memory (both backends do)
// the step's copy reads it there, in place, else the host copies it
// out as it decodes the batch. The span is the front's again when the call
// ends. One that finds no room, or a
// template's ([Front.Encode]), crosses in its message.
// [HostStatus].DataPlane says which path a host takes;
// [FrontConfig].NoDataPlane and [HostConfig].NoDataPlane keep to the
// remote.
//
// The wire form is the protobuf messages of internal/wirepb, generated from
// proto/lanes/remote/v1 by scripts/gen-proto.sh. Decoding is a boundary: a
// batch that arrives from another process is checked for the wire's limits
// here (entry, argument and byte counts, enum ranges, sizes that fit)
// before it becomes a lanes.Batch, which the receiving lane then validates
// against its device as any other batch. A library call crosses as its
// declaration (name, regions, parameters), and the host runs the call it
// serves under that name (HostConfig.Calls; a name it does not serve is
// ErrUnknownCall; package remote/hostcmd builds a lane host of your own
// with your calls). Program declarations, invocations of sealed program
// segments and binding patches cross as the plain data they are; a host
// scopes program names to the registration (MaxProgramName), and
// Front.Seal, Front.Preparation and Front.Catalog act on the lane a
// tenant's batches run on. Stage-ins and stage-outs name pinned memory of
// the sending process: they have no wire form and are refused on encoding
// (ErrWire); a staged program is declared by its slots' device regions
// instead (StagedSpec, Front.PrepareStaged), and its host makes the
// staging: it replays as in one process (Front.Replay, Front.ReplayInto,
// and Front.Repeat, which sends no inputs: the host's lane kept them). Modules of one's own kernels a front's batches
// launch cross as their images and declarations (FrontConfig.Modules),
// and the host loads them before it serves the front (HostConfig.Modules
// for a host of your own, with the Go references the simulated device
// runs).
//
// # What a front does not do that a scheduler does
//
// A front serves what actors.Scheduler serves, with these exceptions,
// each for a reason:
//   - stage-in and stage-out commands: pinned memory of the front's
//     process, which no host can reach (refused, ErrWire); upload, read
//     back with Front.Read, or declare a staged program (StagedSpec).
//   - Share and ShareHost (buffers every tenant reads): a front's tenants
//     may live on different hosts, and a buffer lives on one; each tenant
//     uploads its own copy for now.
//   - Configure, Trim and Synchronize of a lane: a host's lanes and their
//     cache capacity are its own (lanehost's flags), shared by every front
//     it serves; a front seals and reads a tenant's lane (Front.Seal,
//     Front.Preparation, Front.Catalog).
//   - Own and OwnHost: what a tenant allocates through the front
//     (Front.Alloc) is its own on its host; nothing else is.
//   - An encoded step (Front.Encode, Front.SubmitEncoded) is checked for
//     ownership once per host, as a lane host remembers it; in process a
//     batch is checked at every submit.
//   - SubmitNotify's callback: a front's Pending says when a call ended
//     (Pending.Done).
//   - FillShared, with Share; Lanes, TenantLane, Tenants and OpsHandler: a
//     host's lanes are seen on the host (Host.Scheduler); a front reports
//     its hosts (Front.Hosts) and where a tenant is (Front.Placement).
//   - A staged program's staging written in place: the staging is pinned
//     memory of the host's process; a front's inputs cross with each
//     Replay or ReplayInto, and Repeat replays them without crossing again.
//   - A staged replay's context: one that ends while the replay waits for
//     its lane does not withdraw it on the host (a batch's does).
package remote
