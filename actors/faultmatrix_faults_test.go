// The fault matrix's faults of the caller's making (freed, forged, foreign
// and retained handles) and its library-call path.

package actors_test

import (
	"encoding/binary"
	"testing"

	"github.com/lanesched/lanes/actors"
	"github.com/lanesched/lanes/cache"
	"github.com/lanesched/lanes/cuda"
	"github.com/lanesched/lanes/lanes"
)

func isCallerFault(f string) bool {
	return f == "freed" || f == "forged" || f == "not-yours" || f == "retain-other"
}

// callerBytes is the memory a caller-error cell leaves allocated on
// purpose (the other tenant's buffer).
func callerBytes(c cell) uint64 {
	if c.fault == "not-yours" || c.fault == "retain-other" {
		return 256
	}
	return 0
}

// callerError makes the cell's batch wrong the way a careless or malicious
// caller would: a freed buffer, a buffer value with an enlarged size,
// another tenant's buffer, or another tenant's buffer retained. On the
// invocation path the invocation is fine and a patch carries the bad handle.
func callerError(t *testing.T, s *actors.Scheduler, d *panicky, c cell, b lanes.Batch) lanes.Batch {
	t.Helper()
	bad := d.bufs[0]
	switch c.fault {
	case "freed":
		freed, err := d.Alloc(cuda.BufferSpec{Size: 64, Elem: cuda.I32})
		if err != nil {
			t.Fatalf("Alloc: got err %v, want nil", err)
		}
		if err := d.Free(freed); err != nil {
			t.Fatalf("Free: got err %v, want nil", err)
		}
		bad = freed
	case "forged":
		bad.Size *= 16
	case "not-yours", "retain-other":
		other, err := d.Alloc(cuda.BufferSpec{Size: 64, Elem: cuda.I32})
		if err != nil {
			t.Fatalf("Alloc: got err %v, want nil", err)
		}
		if err := s.Own("other", other); err != nil {
			t.Fatalf("Own(other): got err %v, want nil", err)
		}
		bad = other
	}
	b.Entries = append([]lanes.Entry(nil), b.Entries...)
	switch {
	case c.fault == "retain-other":
		b.Retain = []cuda.Buffer{bad}
	case c.path == pathInvocation:
		b.Patches = []lanes.Patch{{Dst: bad.Whole(), Bytes: make([]byte, 64)}}
	default:
		z, err := cuda.Zero(bad.Whole())
		if err != nil {
			t.Fatalf("cuda.Zero: got err %v, want nil", err)
		}
		b.Entries = append(b.Entries, lanes.Entry{Phase: cache.PhaseReadout, Node: cache.NoNode, Command: z})
	}
	return b
}

// incCall is a library call adding 1 to the first 16 int32 of buf (what
// the inc kernel does), run through its Go reference on the simulated
// device.
func incCall(t *testing.T, buf cuda.Buffer) cuda.Command {
	t.Helper()
	c, err := cuda.Call(&cuda.LibraryCall{Name: "inc_call", Regions: []cuda.Touch{{Region: buf.Whole(), Access: cuda.AccessReadWrite}},
		Reference: func(mem [][]byte) error {
			for i := 0; i < 64 && i+4 <= len(mem[0]); i += 4 {
				binary.LittleEndian.PutUint32(mem[0][i:], binary.LittleEndian.Uint32(mem[0][i:])+1)
			}
			return nil
		}})
	if err != nil {
		t.Fatalf("cuda.Call(inc_call): got err %v, want nil", err)
	}
	return c
}
