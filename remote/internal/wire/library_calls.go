// Library calls through a lane host: a call is Go code, which does not
// cross the wire; its declaration does (a name, the regions its work
// touches, its parameters), and the host runs the call it serves under
// that name.

package wire

import (
	"fmt"
	"math"
	"slices"
	"strings"

	"github.com/lanesched/lanes/cuda"
	"github.com/lanesched/lanes/internal/codes"
	"github.com/lanesched/lanes/internal/wirepb"
	"github.com/lanesched/lanes/lanes"
)

// A CallBuilder makes a lane host's library call from what a front's
// batch declared of it: the regions its work touches (with their
// access) and its parameters, as the front's cuda.LibraryCall had them.
// It returns the call's code: Enqueue for the real device, Reference for
// the simulated one (the host takes a copy and sets its Name, Regions and
// Params to the declaration's, so that the replay key the front computed
// still covers them: a builder may return one call every time). Build the front's command and the host's call from one function
// of yours, so that the two agree (see the README's "Library calls on a
// lane host"). An error refuses the batch before any of it runs
// (lanes.ErrInvalidBatch). It runs on the goroutine that decodes the
// host's messages: keep it short, and do not keep regions or params.
type CallBuilder func(regions []cuda.Touch, params []byte) (*cuda.LibraryCall, error)

// LibraryCalls are the library calls a lane host serves, by the name a front's
// cuda.LibraryCall carries (HostConfig.Calls).
type LibraryCalls map[string]CallBuilder

// ErrUnknownCall is a batch naming a library call its lane host does not
// serve (HostConfig.Calls): refused before any of it ran.
var ErrUnknownCall = codes.NewSentinel(codes.WireUnsupported, "remote: the lane host serves no library call of that name")

// MaxCallParams bounds a library call's parameters on the wire.
const MaxCallParams = 64 << 10

// CheckLibraryCalls refuses a name no front could send, or a nil builder.
func CheckLibraryCalls(c LibraryCalls) error {
	for name, b := range c {
		switch {
		case !cuda.ValidCallName(name):
			return fmt.Errorf("%w: HostConfig.Calls: name %.40q: a library call's name is 1 to %d bytes of printable UTF-8 characters without spaces", ErrConfig, name, cuda.MaxKernelName)
		case b == nil:
			return fmt.Errorf("%w: HostConfig.Calls: %q has a nil CallBuilder", ErrConfig, name)
		}
	}
	return nil
}

// callToWire is a library call's declaration.
func callToWire(lc *cuda.LibraryCall) *wirepb.LibraryCall {
	w := &wirepb.LibraryCall{Name: lc.Name, Params: lc.Params, Regions: make([]*wirepb.Touch, len(lc.Regions))}
	for i, t := range lc.Regions {
		w.Regions[i] = &wirepb.Touch{Region: RegionToWire(t.Region), Access: uint32(t.Access)}
	}
	return w
}

// callFromWire builds the host's call a command declares, from calls.
func callFromWire(w *wirepb.LibraryCall, calls LibraryCalls, host string) (cuda.Command, error) {
	switch {
	case w == nil:
		return cuda.Command{}, WireErr("a library call command without its declaration")
	case len(w.Name) > cuda.MaxKernelName:
		return cuda.Command{}, WireErr("library call name of %d bytes; at most %d", len(w.Name), cuda.MaxKernelName)
	case len(w.Regions) > 64:
		return cuda.Command{}, WireErr("library call %.40q declares %d regions; at most 64", w.Name, len(w.Regions))
	case len(w.Params) > MaxCallParams:
		return cuda.Command{}, WireErr("library call %.40q has %d parameter bytes; at most %d", w.Name, len(w.Params), MaxCallParams)
	}
	build, ok := calls[w.Name]
	if !ok {
		return cuda.Command{}, fmt.Errorf("%w: %w: %.40q (host %q serves %s; every host of a front must serve the calls its tenants' batches name)", lanes.ErrInvalidBatch, ErrUnknownCall, w.Name, host, calls.names())
	}
	regions := make([]cuda.Touch, len(w.Regions))
	for i, t := range w.Regions {
		if t == nil || t.Access > math.MaxUint8 {
			return cuda.Command{}, WireErr("library call %.40q: region %d: bad touch", w.Name, i)
		}
		r, err := RegionFromWire(t.Region)
		if err != nil {
			return cuda.Command{}, err
		}
		regions[i] = cuda.Touch{Region: r, Access: cuda.Access(t.Access)}
	}
	lc, err := safeBuild(build, regions, w.Params)
	switch {
	case err != nil:
		return cuda.Command{}, fmt.Errorf("%w: library call %q: its builder refused it: %w", lanes.ErrInvalidBatch, w.Name, err)
	case lc == nil:
		return cuda.Command{}, fmt.Errorf("%w: library call %q: its builder returned no call", lanes.ErrInvalidBatch, w.Name)
	}
	own := *lc // the builder may return one call for every build: each gets its own
	own.Name, own.Regions, own.Params = w.Name, regions, w.Params
	c, err := cuda.Call(&own)
	if err != nil {
		return cuda.Command{}, fmt.Errorf("%w: library call %q as the host's builder made it: %w", lanes.ErrInvalidBatch, w.Name, err)
	}
	return c, nil
}

// safeBuild runs a builder, its panic an error: user code on the host's
// reader must not take the host down.
func safeBuild(build CallBuilder, regions []cuda.Touch, params []byte) (lc *cuda.LibraryCall, err error) {
	defer func() {
		if p := recover(); p != nil {
			lc, err = nil, fmt.Errorf("it panicked: %v", p)
		}
	}()
	return build(regions, params)
}

// names lists the calls served, for an error.
func (c LibraryCalls) names() string {
	if len(c) == 0 {
		return "none"
	}
	var out []string
	for n := range c {
		out = append(out, fmt.Sprintf("%q", n))
	}
	slices.Sort(out)
	return strings.Join(out, ", ")
}
