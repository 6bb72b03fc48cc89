// Receipts on the wire: a lane host's lanes.Receipt to wirepb.Receipt and
// back, with the error as its code and message.

package wire

import (
	"fmt"
	"math"
	"slices"
	"strings"
	"time"

	"github.com/lanesched/lanes/cache"
	"github.com/lanesched/lanes/cuda"
	"github.com/lanesched/lanes/internal/codes"
	"github.com/lanesched/lanes/internal/wirepb"
	"github.com/lanesched/lanes/lanes"
)

// MaxRows bounds a receipt's attribution rows on the wire (a batch's
// entries).
const MaxRows = MaxEntries

// PeerError is an error a lane host reported: its code and message, as the
// host's own error classified them, and the contract sentinels it wrapped.
// cuda.Classify classifies it by its code; errors.Is matches what it
// matched on the host: the sentinels it wrapped (cuda.ErrStaleHandle,
// actors.ErrNotYours, lanes.ErrInvalidBatch...), by name where the host
// named them (several share a code), and a driver code's sentinel
// (cuda.ErrOutOfMemory) by its code, so a lost step's indeterminate outcome
// and a device's out of memory stay errors.Is-able across the wire.
type PeerError struct {
	Code cuda.Code
	Msg  string
	// Kinds are the names (messages) of the sentinels it wrapped; nil
	// from a host that did not say (an older one): then errors.Is matches
	// every sentinel of its code.
	Kinds []string
	// Cause is the front's caller's context error of a submission the
	// host withdrew (code withdrawn), which errors.Is matches too.
	Cause error
}

// Error is the host's message.
func (e *PeerError) Error() string { return e.Msg }

// Class is the class of the host's code.
func (e *PeerError) Class() cuda.Class { return e.Code.Class() }

// Is reports whether target is a sentinel the host's error wrapped (among
// its Kinds when the host named them, else of its code), or the driver
// code sentinel of its code; for a submission withdrawn because its
// caller's context ended, also that context's error.
func (e *PeerError) Is(target error) bool {
	if e.Cause != nil && target == e.Cause {
		return true
	}
	switch t := target.(type) {
	case *codes.Sentinel:
		if e.Kinds != nil { // the host said which (a sentinel's message is its name)
			return slices.Contains(e.Kinds, t.Error())
		}
		return t.Code() == e.Code
	case *cuda.Error:
		if t.Op != "" || t.Code == codes.RuntimeContract {
			return false
		}
		if e.Kinds != nil {
			return slices.Contains(e.Kinds, codeKind(t.Code))
		}
		return t.Code == e.Code
	}
	return false
}

// codeKind names a driver code among an error's kinds: what a code
// sentinel (cuda.ErrOutOfMemory) matches.
func codeKind(c cuda.Code) string { return "code " + c.String() }

// sentinelKinds names the sentinels in err's tree, for the front's
// errors.Is: contract sentinels by message, driver errors by code (at most
// maxKinds).
func sentinelKinds(err error) []string {
	var kinds []string
	for todo := []error{err}; len(todo) > 0 && len(kinds) < maxKinds; {
		e := todo[len(todo)-1]
		todo = todo[:len(todo)-1]
		switch u := e.(type) {
		case *codes.Sentinel:
			if !slices.Contains(kinds, u.Error()) {
				kinds = append(kinds, u.Error())
			}
		case *cuda.Error:
			if k := codeKind(u.Code); u.Code != codes.RuntimeContract && !slices.Contains(kinds, k) {
				kinds = append(kinds, k)
			}
			if u.Contract != nil {
				todo = append(todo, u.Contract)
			}
		case interface{ Unwrap() error }:
			if w := u.Unwrap(); w != nil {
				todo = append(todo, w)
			}
		case interface{ Unwrap() []error }:
			for _, w := range u.Unwrap() {
				if w != nil {
					todo = append(todo, w)
				}
			}
		}
	}
	return kinds
}

// maxKinds bounds the sentinel names an error carries on the wire (and a
// front takes), each of at most maxKindBytes.
const (
	maxKinds     = 8
	maxKindBytes = 256
)

// NewPeerError is the error a host reported with code, message and kinds
// (named: the host's whole list). Kinds out of bounds are dropped, and the
// error then matches by code alone.
func NewPeerError(code int32, msg string, kinds []string, named bool) *PeerError {
	if msg == "" {
		msg = fmt.Sprintf("remote: lane host reported %v without a message", cuda.Code(code))
	}
	e := &PeerError{Code: cuda.Code(code), Msg: msg}
	if named && len(kinds) <= maxKinds && !slices.ContainsFunc(kinds, func(k string) bool { return k == "" || len(k) > maxKindBytes }) {
		e.Kinds = append([]string{}, kinds...) // not nil: named, even when none
	}
	return e
}

// errorToWire is what the wire carries of err: its code, msg (its message
// as the front may read it, made valid UTF-8: a message that is not could
// not be marshalled) and the sentinels it wraps.
func errorToWire(err error, msg string) (code int32, text string, kinds []string) {
	return int32(cuda.Classify(err).Code), strings.ToValidUTF8(msg, "\uFFFD"), sentinelKinds(err)
}

// ErrorToResult puts a host's err on an op's result (see errorToWire),
// its text as the result's front reads it (unscoped).
func ErrorToResult(res *wirepb.OpResult, err error) {
	res.ErrorCode, res.Error, res.ErrorKinds = errorToWire(err, Unscoped(err.Error(), res.Epoch))
	res.ErrorKindsNamed = true
}

// ReceiptToWire encodes a receipt of the host's epoch for the front's call,
// with the bytes it read back, if any, and the programs of its segments
// named as the front named them: all of it but HostStart, which a
// host sets on the Unix clock (wirepb.Receipt.HostStartUnixNano) from its
// scheduler's clock origin.
func ReceiptToWire(epoch, call uint64, r lanes.Receipt, readback []byte) *wirepb.Receipt {
	w := &wirepb.Receipt{Epoch: epoch, Call: call, Fence: r.Fence, Outcome: uint32(r.Outcome), DeviceTimeNs: r.DeviceTime.Nanoseconds(),
		Launches: uint32(max(r.Attribution.Launches, 0)), Readback: readback, Lane: int32(r.Lane), Tenant: r.Tenant}
	if r.Err != nil {
		w.ErrorCode, w.Error, w.ErrorKinds = errorToWire(r.Err, r.Err.Error())
		w.ErrorKindsNamed = true
	}
	w.Rows = RowsToWire(r.Attribution.Rows)
	restToWire(w, r)
	UnscopeSegments(w.Segments, epoch)
	return w
}

// RowsToWire encodes a receipt's attribution rows.
func RowsToWire(rows []lanes.Row) []*wirepb.Row {
	out := make([]*wirepb.Row, 0, len(rows))
	for _, row := range rows {
		out = append(out, &wirepb.Row{Index: uint32(row.Index), Node: int64(row.Node), Op: row.Op, Replayed: row.Replayed,
			Reason: uint32(row.Reason), GraphNodes: uint32(row.GraphNodes), Phase: uint32(row.Phase), Dispatches: uint32(row.Dispatches),
			Transfers: uint32(row.Transfers), Work: &wirepb.Work{Form: uint32(row.Work.Form), ParticipantStart: row.Work.ParticipantStart,
				ParticipantCount: row.Work.ParticipantCount, Tokens: row.Work.Tokens}})
	}
	return out
}

// ReceiptFromWire decodes a receipt: its epoch and call (the front checks
// both against its in-flight table), the receipt with a *PeerError for an
// error, and the read-back bytes. A timed receipt's HostStart is on the
// Unix clock (time.Unix(0, int64(r.HostStart)) is when the host recorded
// its start), not a scheduler's.
func ReceiptFromWire(w *wirepb.Receipt) (epoch, call uint64, r lanes.Receipt, readback []byte, err error) {
	if w == nil {
		return 0, 0, lanes.Receipt{}, nil, WireErr("no receipt")
	}
	switch {
	case w.Outcome == 0 || w.Outcome > math.MaxUint8:
		return 0, 0, lanes.Receipt{}, nil, WireErr("outcome %d out of range", w.Outcome)
	case len(w.Rows) > MaxRows:
		return 0, 0, lanes.Receipt{}, nil, WireErr("%d rows; at most %d", len(w.Rows), MaxRows)
	case len(w.Readback) > MaxHostBytes:
		return 0, 0, lanes.Receipt{}, nil, WireErr("%d read-back bytes; at most %d", len(w.Readback), MaxHostBytes)
	case w.DeviceTimeNs < 0:
		return 0, 0, lanes.Receipt{}, nil, WireErr("negative device time")
	case lanes.Outcome(w.Outcome) == lanes.OutcomeSucceeded && w.ErrorCode != 0:
		return 0, 0, lanes.Receipt{}, nil, WireErr("a success with error code %d", w.ErrorCode)
	}
	r = lanes.Receipt{Fence: w.Fence, Outcome: lanes.Outcome(w.Outcome), Lane: int(w.Lane), Tenant: w.Tenant,
		DeviceTime: time.Duration(w.DeviceTimeNs)}
	r.Attribution.Launches = int(w.Launches)
	if lanes.Outcome(w.Outcome) != lanes.OutcomeSucceeded {
		r.Err = NewPeerError(w.ErrorCode, w.Error, w.ErrorKinds, w.ErrorKindsNamed)
	}
	for _, row := range w.Rows {
		if row == nil || row.Reason > math.MaxUint8 || row.Phase > math.MaxUint8 {
			return 0, 0, lanes.Receipt{}, nil, WireErr("bad row")
		}
		node, err := toInt(row.Node, "row node")
		if err != nil {
			return 0, 0, lanes.Receipt{}, nil, err
		}
		lr := lanes.Row{Index: int(row.Index), Node: node, Op: row.Op, Replayed: row.Replayed, Reason: cache.Reason(row.Reason),
			GraphNodes: int(row.GraphNodes), Phase: cache.Phase(row.Phase), Dispatches: int(row.Dispatches), Transfers: int(row.Transfers)}
		if wk := row.Work; wk != nil {
			if wk.Form > math.MaxUint8 {
				return 0, 0, lanes.Receipt{}, nil, WireErr("bad row work form")
			}
			lr.Work = lanes.Work{Form: lanes.Form(wk.Form), ParticipantStart: wk.ParticipantStart, ParticipantCount: wk.ParticipantCount, Tokens: wk.Tokens}
		}
		r.Attribution.Rows = append(r.Attribution.Rows, lr)
	}
	if err := restFromWire(w, &r); err != nil {
		return 0, 0, lanes.Receipt{}, nil, err
	}
	if len(w.Readback) > 0 {
		readback = append([]byte(nil), w.Readback...)
	}
	return w.Epoch, w.Call, r, readback, nil
}

// Unscoped is an error's text as the front of the registration (epoch)
// reads it: its tenants and programs by the front's own names for them.
func Unscoped(msg string, epoch uint64) string {
	if !strings.Contains(msg, "@") {
		return msg // no scoped name: nothing to build (most answers carry no error at all)
	}
	return strings.ReplaceAll(msg, RegistrationScope(epoch), "")
}
