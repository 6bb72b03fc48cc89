// Batches on the wire: lanes.Batch to wirepb.Batch and back, checked.

package wire

import (
	"fmt"
	"math"
	"unicode/utf8"

	"github.com/lanesched/lanes/actors"
	"github.com/lanesched/lanes/cache"
	"github.com/lanesched/lanes/cuda"
	"github.com/lanesched/lanes/internal/codes"
	laneerr "github.com/lanesched/lanes/internal/laneerr"
	"github.com/lanesched/lanes/internal/wirepb"
	"github.com/lanesched/lanes/lanes"
)

// Wire limits: a decoder refuses more than these, so a message never makes
// the receiver allocate more than its own size justifies.
const (
	MaxEntries    = 1 << 16
	MaxBoundaries = 1 << 16
	MaxRetain     = 1 << 16
	MaxHostBytes  = 64 << 20 // one upload's bytes
)

// ErrWire marks a message that cannot cross the wire or that arrived
// malformed: errors.Is finds it, and the message says what was wrong.
var ErrWire = codes.NewSentinel(codes.WireUnsupported, "remote: bad wire message")

// TooLarge is a batch past the wire's bounds: the scheduler's
// actors.ErrBatchTooLarge (what one process says of a batch too large for
// it, and its code), and ErrWire; definitely not submitted.
func TooLarge(format string, args ...any) error {
	return fmt.Errorf("%w: %w: "+format+" (definitely not submitted)", append([]any{actors.ErrBatchTooLarge, ErrWire}, args...)...)
}

// WireErr is an ErrWire saying what was wrong.
func WireErr(format string, args ...any) error {
	return fmt.Errorf("%w: "+format, append([]any{ErrWire}, args...)...)
}

// BatchToWire encodes a batch. A stage-in or stage-out (pinned host
// memory of this process) has no wire form and is refused (ErrWire). A
// library call crosses as its declaration (name, regions, parameters),
// not its code: the host runs the call it serves under that name
// (HostConfig.Calls), and refuses a name it does not serve
// (ErrUnknownCall). A program declaration, an invocation of a sealed
// program's segment and binding patches cross as the plain data they
// are; a program name is at most MaxProgramName bytes.
func BatchToWire(b lanes.Batch) (*wirepb.Batch, error) {
	if len(b.Entries) > MaxEntries {
		return nil, TooLarge("%d entries; at most %d cross the wire in one batch", len(b.Entries), MaxEntries)
	}
	w := &wirepb.Batch{Tenant: b.Tenant, Path: uint32(b.Path), Timing: uint32(b.Timing), Entries: make([]*wirepb.Entry, len(b.Entries)), EagerBoundaries: NodesToWire(b.EagerBoundaries)}
	for _, r := range b.Retain {
		w.Retain = append(w.Retain, BufferToWire(r))
	}
	if err := programsToWire(w, b); err != nil {
		return nil, err
	}
	for i, e := range b.Entries {
		we := &wirepb.Entry{Phase: uint32(e.Phase), Node: int64(e.Node),
			Work: &wirepb.Work{Form: uint32(e.Work.Form), ParticipantStart: e.Work.ParticipantStart, ParticipantCount: e.Work.ParticipantCount, Tokens: e.Work.Tokens}}
		w.Entries[i] = we
		if e.Invoke != nil {
			if err := checkProgramID(e.Invoke.Program, fmt.Sprintf("entry %d", i)); err != nil {
				return nil, err
			}
			we.Invoke = invocationToWire(*e.Invoke)
			if e.Command.Kind != 0 {
				we.Command = commandToWire(e.Command) // the lane refuses it, as in one process
			}
			continue
		}
		if !utf8.ValidString(e.Command.Kernel) {
			return nil, WireErr("entry %d: kernel name %.40q is not UTF-8", i, e.Command.Kernel)
		}
		switch e.Command.Kind {
		case cuda.KindLaunch, cuda.KindCopy, cuda.KindZero:
		case cuda.KindCall:
			switch lc := e.Command.LibraryCall; {
			case lc == nil:
				return nil, WireErr("entry %d is a call command with no LibraryCall; build it with cuda.Call", i)
			case !utf8.ValidString(lc.Name):
				return nil, WireErr("entry %d: library call name %.40q is not UTF-8", i, lc.Name)
			case len(lc.Params) > MaxCallParams:
				return nil, TooLarge("entry %d: library call %q has %d parameter bytes; at most %d cross the wire", i, lc.Name, len(lc.Params), MaxCallParams)
			}
		case cuda.KindUpload:
			if len(e.Command.Host) > MaxHostBytes {
				return nil, TooLarge("entry %d uploads %d bytes; at most %d cross the wire in one upload: split it", i, len(e.Command.Host), MaxHostBytes)
			}
		case cuda.KindStageIn, cuda.KindStageOut:
			return nil, WireErr("entry %d stages through pinned host memory of this process, which the host cannot reach: upload the bytes (cuda.Upload) or read them back (Front.Read) instead", i)
		default:
			return nil, laneerr.Wrap("submit", true, fmt.Errorf("entry %d: %w", i, e.Command.Validate())) // an unknown kind, as the lane says
		}
		we.Command = commandToWire(e.Command)
		if e.Replay != nil {
			we.Replay = &wirepb.Replay{Key: append([]byte(nil), e.Replay.Key[:]...)}
			for _, s := range e.Replay.Scopes {
				we.Replay.Scopes = append(we.Replay.Scopes, &wirepb.Scope{Kind: uint32(s.Kind), Lane: uint64(s.Lane)})
			}
		}
	}
	return w, nil
}

// Decoding is what a host decodes a batch with: the upload area of the
// data plane its message came through (nil: none, and a command naming
// one is refused), where an upload named there is copied out of it, once,
// or (inPlace: the area is pinned and held until the step ends) read; and
// the library calls it serves (a call it does not serve is refused); and
// the namespace of its registration's program names.
type Decoding struct {
	Area    []byte
	InPlace bool
	Calls   LibraryCalls
	Host    string // the host's name, for errors
	Scope   string // the registration's program scope (programScope); "": none
}

// BatchFromWire is BatchFromWire with what the host decodes with.
func BatchFromWire(w *wirepb.Batch, d Decoding) (lanes.Batch, error) {
	if w == nil {
		return lanes.Batch{}, WireErr("no batch")
	}
	switch {
	case len(w.Entries) > MaxEntries:
		return lanes.Batch{}, WireErr("%d entries; at most %d cross the wire", len(w.Entries), MaxEntries)
	case len(w.EagerBoundaries) > MaxBoundaries || len(w.Retain) > MaxRetain:
		return lanes.Batch{}, WireErr("%d eager boundaries and %d retained buffers; at most %d and %d", len(w.EagerBoundaries), len(w.Retain), MaxBoundaries, MaxRetain)
	case w.Path > math.MaxUint8 || w.Timing > math.MaxUint8:
		return lanes.Batch{}, WireErr("path %d, timing %d: out of range", w.Path, w.Timing)
	}
	b := lanes.Batch{Tenant: w.Tenant, Path: lanes.Path(w.Path), Timing: lanes.TimingMode(w.Timing), Entries: make([]lanes.Entry, len(w.Entries))}
	var err error
	if b.EagerBoundaries, err = IntsFromWire(w.EagerBoundaries, "eager boundary"); err != nil {
		return lanes.Batch{}, err
	}
	for _, r := range w.Retain {
		buf, err := BufferFromWire(r)
		if err != nil {
			return lanes.Batch{}, err
		}
		b.Retain = append(b.Retain, buf)
	}
	if err := programsFromWire(w, &b); err != nil {
		return lanes.Batch{}, err
	}
	for i, we := range w.Entries {
		e, err := entryFromWire(we, d)
		if err != nil {
			return lanes.Batch{}, fmt.Errorf("entry %d: %w", i, err)
		}
		b.Entries[i] = e
	}
	if d.Scope != "" {
		scopePrograms(&b, d.Scope)
	}
	return b, nil
}

func entryFromWire(we *wirepb.Entry, d Decoding) (lanes.Entry, error) {
	if we == nil || we.Command == nil && we.Invoke == nil {
		return lanes.Entry{}, WireErr("no command")
	}
	if we.Phase > math.MaxUint8 {
		return lanes.Entry{}, WireErr("phase %d out of range", we.Phase)
	}
	node, err := toInt(we.Node, "node")
	if err != nil {
		return lanes.Entry{}, err
	}
	e := lanes.Entry{Phase: cache.Phase(we.Phase), Node: node}
	if w := we.Work; w != nil {
		if w.Form > math.MaxUint8 {
			return lanes.Entry{}, WireErr("work form %d out of range", w.Form)
		}
		e.Work = lanes.Work{Form: lanes.Form(w.Form), ParticipantStart: w.ParticipantStart, ParticipantCount: w.ParticipantCount, Tokens: w.Tokens}
	}
	if we.Invoke != nil {
		if e.Invoke, err = invocationFromWire(we.Invoke); err != nil {
			return lanes.Entry{}, err
		}
	}
	if we.Command != nil {
		if e.Command, err = commandFromWire(we.Command, d); err != nil {
			return lanes.Entry{}, err
		}
	}
	if r := we.Replay; r != nil {
		if len(r.Key) != len(cache.ProviderKey{}) {
			return lanes.Entry{}, WireErr("replay key of %d bytes; keys are %d", len(r.Key), len(cache.ProviderKey{}))
		}
		if len(r.Scopes) > cuda.MaxArgs+2 {
			return lanes.Entry{}, WireErr("%d scopes; a command has at most %d regions", len(r.Scopes), cuda.MaxArgs+2)
		}
		e.Replay = &lanes.ReplayContract{}
		copy(e.Replay.Key[:], r.Key)
		for _, s := range r.Scopes {
			if s == nil || s.Kind > math.MaxUint8 || s.Lane > math.MaxInt32 {
				return lanes.Entry{}, WireErr("bad scope")
			}
			e.Replay.Scopes = append(e.Replay.Scopes, cache.Scope{Kind: cache.ScopeKind(s.Kind), Lane: int(s.Lane)})
		}
	}
	return e, nil
}

// IntsFromWire narrows wire integers to ints (nil for none), refusing one
// that does not fit.
func IntsFromWire(vs []int64, what string) ([]int, error) {
	if len(vs) == 0 {
		return nil, nil
	}
	out := make([]int, len(vs))
	for i, v := range vs {
		n, err := toInt(v, what)
		if err != nil {
			return nil, err
		}
		out[i] = n
	}
	return out, nil
}

// toInt narrows a wire integer to an int, refusing what does not fit.
func toInt(v int64, what string) (int, error) {
	if v < math.MinInt32 || v > math.MaxInt32 {
		return 0, WireErr("%s %d out of range", what, v)
	}
	return int(v), nil
}
