// What remote's users name that its rooms define: a host process's first
// line, library calls, the wire's limits.

package remote

import (
	"github.com/lanesched/lanes/cuda"
	"github.com/lanesched/lanes/remote/internal/wire"
)

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
type CallBuilder func(regions []cuda.Touch, params []byte) (*cuda.LibraryCall, error)

// LibraryCalls are the library calls a lane host serves, by the name a
// front's cuda.LibraryCall carries (HostConfig.Calls).
type LibraryCalls map[string]CallBuilder

// room is calls as the host room takes them.
func (calls LibraryCalls) room() wire.LibraryCalls {
	if calls == nil {
		return nil
	}
	out := make(wire.LibraryCalls, len(calls))
	for name, build := range calls {
		out[name] = wire.CallBuilder(build)
	}
	return out
}
