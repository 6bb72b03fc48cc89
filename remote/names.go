// What remote's users name that its rooms define: a host process's first
// line, library calls, the wire's limits.

package remote

import "github.com/lanesched/lanes/remote/internal/wire"

// ListeningLine begins a lane host process's first line on standard
// output, followed by the address fronts dial ("lanehost: listening on
// 127.0.0.1:7001"); [Listening] is the whole line, [ParseListening] reads
// it.
const ListeningLine = wire.ListeningLine

// Listening is what a lane host process's first line says: Address (where
// fronts reach the host: its advertised address, else where it listens),
// Bound (where it listens when it advertises another address; else "") and
// Membership (its cluster membership endpoint; "" outside a cluster). It
// lets whoever starts a host on port 0 (the default) learn its ports from
// the host itself; its String is the line.
type Listening = wire.Listening

// ParseListening reads a lane host process's first line (surrounding
// space ignored); its error says what the line should have been.
func ParseListening(line string) (Listening, error) { return wire.ParseListening(line) }

// CallBuilder builds a lane host's library call from what a front's
// cuda.LibraryCall carried: its regions (resolved to this host's buffers)
// and its Params. Build the front's command and the host's call from one
// function of yours, so that the two agree (docs/lane-hosts.md, "Library
// calls on a lane host"). An error refuses the batch before any of it runs
// (lanes.ErrInvalidBatch). It runs on the goroutine that decodes the
// host's messages: keep it short, and do not keep regions or params.
type CallBuilder = wire.CallBuilder

// LibraryCalls are the library calls a lane host serves, by the name a
// front's cuda.LibraryCall carries (HostConfig.Calls).
type LibraryCalls = wire.LibraryCalls

// MaxProgramName is the longest program name (programs.ID.Name) a batch
// may carry through a front, in bytes: a host scopes each name to its
// front's registration.
const MaxProgramName = wire.MaxProgramName

// MaxEntries is the most entries of one batch on the wire.
const MaxEntries = wire.MaxEntries

// MaxHostBytes is the most bytes one upload, or one read back, moves
// through a front.
const MaxHostBytes = wire.MaxHostBytes

// MaxModules and MaxModuleBytes bound a front's modules
// (FrontConfig.Modules): how many, and one image's bytes.
const (
	MaxModules     = wire.MaxModules
	MaxModuleBytes = wire.MaxModuleBytes
)

// Protocol is the wire protocol version fronts and hosts of this build
// speak; a host of another version is refused at registration.
const Protocol = wire.Protocol
