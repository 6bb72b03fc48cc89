package lanes_test

import (
	"bytes"
	"context"
	"encoding/binary"
	"fmt"
	"math"
	"slices"
	"strings"

	"github.com/lanesched/lanes"
	"github.com/lanesched/lanes/cuda"
	"github.com/lanesched/lanes/cuda/kernels"
	"github.com/lanesched/lanes/examples/callhost/axpy"
	"github.com/lanesched/lanes/internal/conformance"
	core "github.com/lanesched/lanes/lanes"
	"github.com/lanesched/lanes/programs"
)

// canceled is a context that has ended.
func canceled() context.Context {
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	return ctx
}

// tenantMistakes are the tenant names every call refuses.
var tenantMistakes = []struct{ name, tenant string }{
	{"an empty tenant name", ""},
	{"a tenant name too long", strings.Repeat("t", lanes.MaxTenantName+1)},
	{"a tenant name not printable", "a\x00b"},
	{"a tenant name not UTF-8", "\xff"},
}

// everyCall makes each call of the server once, for a tenant, on b, and
// notes its error.
func everyCall(r *parityRun, ctx context.Context, tenant string, b lanes.Buffer) {
	r.noteErr("Alloc", func() error {
		_, err := r.srv.Alloc(ctx, tenant, lanes.BufferSpec{Size: 64, Elem: lanes.I32})
		return err
	}())
	r.noteErr("Upload", r.srv.Upload(ctx, tenant, b.Whole(), make([]byte, b.Size)))
	r.noteErr("Read", func() error { _, err := r.srv.Read(ctx, tenant, b.Whole()); return err }())
	r.noteErr("Free", r.srv.Free(ctx, tenant, b))
	r.noteErr("Forget", r.srv.Forget(ctx, tenant))
	step := lanes.Batch{Entries: []lanes.Entry{lanes.Replayed("parity", 0, r.inc(b, 16))}}
	rc, err := r.srv.Submit(ctx, tenant, step)
	r.note("Submit: receipt", rc)
	r.noteErr("Submit", err)
	_, err = r.srv.SubmitAsync(ctx, tenant, step)
	r.noteErr("SubmitAsync", err)
}

// theirs is a buffer of tenant "b" and one of tenant "a", both zeroed.
func theirs(r *parityRun) (mine, other lanes.Buffer) {
	return r.alloc("a", 64, lanes.I32), r.alloc("b", 64, lanes.I32)
}

// eagerBatch writes, copies, zeroes and reads out through eager entries.
func eagerBatch(r *parityRun, a, b lanes.Buffer) lanes.Batch {
	r.t.Helper()
	up, err := lanes.Upload(a.Whole(), bytes.Repeat([]byte{7}, int(a.Size)))
	r.must("Upload command", err)
	cp, err := cuda.Copy(b.Whole(), a.Whole())
	r.must("Copy command", err)
	half, _ := a.Region(0, a.Size/2)
	zero, err := cuda.Zero(half)
	r.must("Zero command", err)
	return lanes.Batch{Entries: []lanes.Entry{lanes.Input(up), core.Eager(0, zero), lanes.Output(cp)}}
}

// parityCases are the calls of *lanes.Server and the mistakes made with
// each, in the order they run on a side's shared server.
var parityCases = []parityCase{
	{call: "Alloc", name: "a buffer", run: func(r *parityRun) {
		b, err := r.srv.Alloc(r.ctx, r.tenant("a"), lanes.BufferSpec{Size: 100, Elem: lanes.F32})
		r.noteErr("Alloc", err)
		r.note("size, elem", [2]uint64{b.Size, uint64(b.Elem)})
	}},
	{call: "Alloc", name: "mistakes", run: func(r *parityRun) {
		for _, m := range tenantMistakes {
			_, err := r.srv.Alloc(r.ctx, m.tenant, lanes.BufferSpec{Size: 64, Elem: lanes.I32})
			r.noteErr(m.name, err)
		}
		for _, c := range []struct {
			what string
			spec lanes.BufferSpec
		}{
			{"no bytes", lanes.BufferSpec{Size: 0, Elem: lanes.I32}},
			{"an unknown element", lanes.BufferSpec{Size: 64, Elem: cuda.ElementType(200)}},
			{"not whole elements", lanes.BufferSpec{Size: 6, Elem: lanes.I32}},
			{"an alignment of 3", lanes.BufferSpec{Size: 64, Elem: lanes.I32, Align: 3}},
			{"a zero-value spec", lanes.BufferSpec{}},
			{"a huge alignment (1<<40)", lanes.BufferSpec{Size: 64, Elem: lanes.I32, Align: 1 << 40}},
		} {
			_, err := r.srv.Alloc(r.ctx, r.tenant("a"), c.spec)
			r.noteErr(c.what, err)
		}
		_, err := r.srv.Alloc(canceled(), r.tenant("a"), lanes.BufferSpec{Size: 64, Elem: lanes.I32})
		r.noteErr("a canceled context", err)
		//lint:ignore SA1012 the mistake under test
		_, err = r.srv.Alloc(nil, r.tenant("a"), lanes.BufferSpec{Size: 64, Elem: lanes.I32}) //nolint:staticcheck
		r.noteErr("a nil context", err)
	}},
	{call: "Alloc", name: "larger than the device", run: func(r *parityRun) {
		_, err := r.srv.Alloc(r.ctx, r.tenant("a"), lanes.BufferSpec{Size: 1 << 50, Elem: lanes.U8})
		r.noteErr("1 PiB", err)
	}},
	{call: "Upload", name: "round trip", run: func(r *parityRun) {
		b := r.alloc("a", 256, lanes.U8)
		data := make([]byte, 256)
		for i := range data {
			data[i] = byte(i)
		}
		r.noteErr("Upload", r.srv.Upload(r.ctx, r.tenant("a"), b.Whole(), data))
		r.note("read back", r.read("a", b.Whole()))
		part, _ := b.Region(8, 8)
		r.noteErr("Upload part", r.srv.Upload(r.ctx, r.tenant("a"), part, bytes.Repeat([]byte{0xee}, 8)))
		r.note("read back part", r.read("a", b.Whole())[:24])
	}},
	{call: "Upload", name: "9 MiB in pieces", run: func(r *parityRun) {
		const n = 9 << 20
		b := r.alloc("a", n, lanes.U8)
		data := make([]byte, n)
		for i := range data {
			data[i] = byte(i * 7)
		}
		r.noteErr("Upload", r.srv.Upload(r.ctx, r.tenant("a"), b.Whole(), data))
		r.note("read back equal", bytes.Equal(r.read("a", b.Whole()), data))
	}},
	{call: "Upload", name: "mistakes", run: func(r *parityRun) {
		mine, other := theirs(r)
		freed := r.alloc("a", 64, lanes.I32)
		r.must("Free", r.srv.Free(r.ctx, r.tenant("a"), freed))
		forged := mine
		forged.ID += 1000
		for _, c := range []struct {
			what string
			ctx  context.Context
			dst  lanes.Region
			n    int
		}{
			{"fewer bytes than the region", r.ctx, mine.Whole(), 60},
			{"more bytes than the region", r.ctx, mine.Whole(), 68},
			{"the zero Buffer", r.ctx, lanes.Buffer{}.Whole(), 0},
			{"the zero Buffer, 4 bytes", r.ctx, lanes.Region{Length: 4}, 4},
			{"another tenant's buffer", r.ctx, other.Whole(), 64},
			{"a freed buffer", r.ctx, freed.Whole(), 64},
			{"a forged buffer", r.ctx, forged.Whole(), 64},
			{"past the buffer's end", r.ctx, lanes.Region{Buffer: mine, Offset: 64, Length: 4}, 4},
			{"an empty region", r.ctx, lanes.Region{Buffer: mine}, 0},
			{"a canceled context", canceled(), mine.Whole(), 64},
		} {
			r.noteErr(c.what, r.srv.Upload(c.ctx, r.tenant("a"), c.dst, bytes.Repeat([]byte{1}, c.n)))
		}
		r.note("unchanged", r.read("a", mine.Whole()))
		r.note("theirs unchanged", r.read("b", other.Whole()))
	}},
	{call: "Read", name: "mistakes", run: func(r *parityRun) {
		mine, other := theirs(r)
		freed := r.alloc("a", 64, lanes.I32)
		r.must("Free", r.srv.Free(r.ctx, r.tenant("a"), freed))
		for _, c := range []struct {
			what string
			ctx  context.Context
			src  lanes.Region
		}{
			{"the zero Buffer", r.ctx, lanes.Buffer{}.Whole()},
			{"the zero Buffer, 4 bytes", r.ctx, lanes.Region{Length: 4}},
			{"another tenant's buffer", r.ctx, other.Whole()},
			{"a freed buffer", r.ctx, freed.Whole()},
			{"past the buffer's end", r.ctx, lanes.Region{Buffer: mine, Offset: 60, Length: 8}},
			{"from past the buffer's end", r.ctx, lanes.Region{Buffer: mine, Offset: 1 << 62, Length: 4}},
			{"an empty region", r.ctx, lanes.Region{Buffer: mine}},
			{"a canceled context", canceled(), mine.Whole()},
		} {
			_, err := r.srv.Read(c.ctx, r.tenant("a"), c.src)
			r.noteErr(c.what, err)
		}
	}},
	{call: "Free", name: "a buffer, then mistakes", run: func(r *parityRun) {
		mine, other := theirs(r)
		forged := mine
		forged.ID += 1000
		r.noteErr("canceled", r.srv.Free(canceled(), r.tenant("a"), mine))
		r.noteErr("another tenant's", r.srv.Free(r.ctx, r.tenant("a"), other))
		r.noteErr("the zero Buffer", r.srv.Free(r.ctx, r.tenant("a"), lanes.Buffer{}))
		r.noteErr("a forged buffer", r.srv.Free(r.ctx, r.tenant("a"), forged))
		r.noteErr("Free", r.srv.Free(r.ctx, r.tenant("a"), mine))
		r.noteErr("Free again", r.srv.Free(r.ctx, r.tenant("a"), mine))
		_, err := r.srv.Read(r.ctx, r.tenant("a"), mine.Whole())
		r.noteErr("Read after Free", err)
		r.submit("Submit after Free", "a", lanes.Batch{Entries: []lanes.Entry{lanes.Replayed("parity", 0, r.inc(mine, 16))}})
		r.note("theirs unchanged", r.read("b", other.Whole()))
	}},
	{call: "Forget", name: "a tenant, then its buffers", run: func(r *parityRun) {
		mine, other := theirs(r)
		r.noteErr("canceled", r.srv.Forget(canceled(), r.tenant("a")))
		r.noteErr("Forget", r.srv.Forget(r.ctx, r.tenant("a")))
		_, err := r.srv.Read(r.ctx, r.tenant("a"), mine.Whole())
		r.noteErr("Read after Forget", err)
		r.noteErr("Free after Forget", r.srv.Free(r.ctx, r.tenant("a"), mine))
		r.noteErr("Forget a tenant never seen", r.srv.Forget(r.ctx, r.tenant("never")))
		r.noteErr("Forget again", r.srv.Forget(r.ctx, r.tenant("a")))
		again := r.alloc("a", 64, lanes.I32)
		r.note("starts over", r.read("a", again.Whole()))
		r.note("theirs unchanged", r.read("b", other.Whole()))
		for _, m := range tenantMistakes {
			r.noteErr(m.name, r.srv.Forget(r.ctx, m.tenant))
		}
	}},
	{call: "Submit", name: "replayed steps", run: func(r *parityRun) {
		b := r.alloc("a", 64*4, lanes.I32)
		step := lanes.Batch{Entries: []lanes.Entry{lanes.Replayed("parity", 0, r.inc(b, 64)), lanes.Replayed("parity", 1, r.inc(b, 64))}}
		for i := range 3 {
			r.submit("step "+string(rune('0'+i)), "a", step)
		}
		r.note("counts", r.read("a", b.Whole())[:8])
	}},
	{call: "Submit", name: "eager commands", run: func(r *parityRun) {
		a, b := r.alloc("a", 64, lanes.U8), r.alloc("a", 64, lanes.U8)
		r.submit("eager", "a", eagerBatch(r, a, b))
		r.note("a", r.read("a", a.Whole()))
		r.note("b", r.read("a", b.Whole()))
	}},
	{call: "Submit", name: "timed, with retained buffers", run: func(r *parityRun) {
		b := r.alloc("a", 64*4, lanes.I32)
		scratch := r.alloc("a", 32, lanes.U8)
		step := lanes.Batch{Entries: []lanes.Entry{lanes.Replayed("parity", 0, r.inc(b, 64))}, Timing: core.TimingKernel, Retain: []lanes.Buffer{scratch}}
		r.submit("captured", "a", step)
		r.submit("replayed", "a", step)
	}},
	{call: "Submit", name: "binding patches", run: func(r *parityRun) {
		b := r.alloc("a", 64*4, lanes.I32)
		bind := r.alloc("a", 16, lanes.U8)
		part, _ := bind.Region(4, 4)
		step := lanes.Batch{Entries: []lanes.Entry{lanes.Replayed("patch", 0, r.inc(b, 64))}, Patches: []core.Patch{{Dst: part, Bytes: []byte{1, 2, 3, 4}}}}
		r.submit("patched", "a", step)
		r.note("bound", r.read("a", bind.Whole()))
		step.Patches = []core.Patch{{Dst: part, Bytes: []byte{1, 2}}}
		r.submit("a patch of the wrong length", "a", step)
	}},
	{call: "Submit", name: "a library call", run: func(r *parityRun) {
		x, y := r.alloc("a", 16, lanes.F32), r.alloc("a", 16, lanes.F32)
		r.must("Upload", r.srv.Upload(r.ctx, r.tenant("a"), x.Whole(), float32s(4, 1)))
		call, err := axpy.Command(x.Whole(), y.Whole(), 2)
		r.must("axpy.Command", err)
		step := lanes.Batch{Entries: []lanes.Entry{lanes.Replayed("call", 0, call)}}
		r.submitTwice("a", step)
		r.note("y", r.read("a", y.Whole()))
	}},
	{call: "Submit", name: "a user kernel", run: func(r *parityRun) {
		x := r.alloc("a", 16, lanes.F32)
		r.must("Upload", r.srv.Upload(r.ctx, r.tenant("a"), x.Whole(), float32s(4, 1.5)))
		cmd, err := lanes.Launch(r.srv.Kernels(), conformance.UserScale, lanes.Linear(4, 32), lanes.BufferArg(x.Whole()), lanes.F32Arg(2), lanes.I32Arg(4))
		r.must("Launch", err)
		step := lanes.Batch{Entries: []lanes.Entry{lanes.Replayed("user", 0, cmd)}}
		r.submitTwice("a", step)
		r.note("x", r.read("a", x.Whole()))
	}},
	{call: "Submit", name: "another tenant's buffer", run: func(r *parityRun) {
		mine, other := theirs(r)
		launch := lanes.Batch{Entries: []lanes.Entry{lanes.Replayed("parity", 0, r.inc(other, 16))}}
		r.submit("in a launch", "a", launch)
		r.submit("retained", "a", lanes.Batch{Entries: []lanes.Entry{lanes.Replayed("parity", 0, r.inc(mine, 16))}, Retain: []lanes.Buffer{other}})
		cp, err := cuda.Copy(other.Whole(), mine.Whole())
		r.must("Copy", err)
		r.submit("copied out into", "a", lanes.Batch{Entries: []lanes.Entry{lanes.Output(cp)}})
		cp, err = cuda.Copy(mine.Whole(), other.Whole())
		r.must("Copy", err)
		r.submit("copied in from", "a", lanes.Batch{Entries: []lanes.Entry{lanes.Input(cp)}})
		_, err = r.srv.SubmitAsync(r.ctx, r.tenant("a"), launch)
		r.noteErr("SubmitAsync", err)
		r.note("theirs unchanged", r.read("b", other.Whole()))
		gone := r.alloc("b", 64, lanes.I32) // freed by its tenant: no one's
		r.must("Free", r.srv.Free(r.ctx, r.tenant("b"), gone))
		r.submit("their freed buffer in a launch", "a", lanes.Batch{Entries: []lanes.Entry{lanes.Replayed("parity", 0, r.inc(gone, 16))}})
		r.submit("their freed buffer retained", "a", lanes.Batch{Entries: []lanes.Entry{lanes.Replayed("parity", 0, r.inc(mine, 16))}, Retain: []lanes.Buffer{gone}})
		_, err = r.srv.Read(r.ctx, r.tenant("a"), gone.Whole())
		r.noteErr("their freed buffer read", err)
	}},
	{call: "Submit", name: "mistakes", run: func(r *parityRun) {
		mine := r.alloc("a", 64, lanes.I32)
		freed := r.alloc("a", 64, lanes.I32)
		r.must("Free", r.srv.Free(r.ctx, r.tenant("a"), freed))
		zero, err := lanes.Launch(r.srv.Kernels(), "inc_i32", lanes.Linear(16, 16), lanes.BufferArg(lanes.Buffer{}.Whole()), lanes.I32Arg(16))
		r.noteErr("a launch on the zero Buffer, built", err)
		if err == nil {
			r.submit("a launch on the zero Buffer", "a", lanes.Batch{Entries: []lanes.Entry{lanes.Replayed("parity", 0, zero)}})
		}
		handmade := lanes.Command{Kind: cuda.KindLaunch, Kernel: "inc_i32", Config: lanes.Linear(16, 16), Args: []lanes.Arg{lanes.BufferArg(lanes.Region{Length: 64}), lanes.I32Arg(16)}}
		r.submit("a handmade launch on the zero Buffer", "a", lanes.Batch{Entries: []lanes.Entry{lanes.Replayed("parity", 0, handmade)}})
		short := lanes.Command{Kind: cuda.KindUpload, Dst: mine.Whole(), Host: make([]byte, 60)}
		r.submit("an upload of fewer bytes than its region", "a", lanes.Batch{Entries: []lanes.Entry{lanes.Input(short)}})
		zeroUp := lanes.Command{Kind: cuda.KindUpload, Dst: lanes.Region{Length: 4}, Host: make([]byte, 4)}
		r.submit("an upload into the zero Buffer", "a", lanes.Batch{Entries: []lanes.Entry{lanes.Input(zeroUp)}})
		step := lanes.Batch{Entries: []lanes.Entry{lanes.Replayed("parity", 0, r.inc(mine, 16))}}
		retained := step
		retained.Retain = []lanes.Buffer{{}}
		r.submit("the zero Buffer retained", "a", retained)
		patched := step
		patched.Patches = []core.Patch{{Dst: lanes.Region{Length: 4}, Bytes: make([]byte, 4)}}
		r.submit("a patch into the zero Buffer", "a", patched)
		r.submit("a freed buffer", "a", lanes.Batch{Entries: []lanes.Entry{lanes.Replayed("parity", 0, r.inc(freed, 16))}})
		r.submit("no entries", "a", lanes.Batch{})
		var many []lanes.Entry
		for range 1025 {
			many = append(many, lanes.Replayed("parity", 0, r.inc(mine, 16)))
		}
		r.submit("1025 entries", "a", lanes.Batch{Entries: many})
		rc, err := r.srv.Submit(canceled(), r.tenant("a"), lanes.Batch{Entries: []lanes.Entry{lanes.Replayed("parity", 0, r.inc(mine, 16))}})
		r.note("a canceled context: receipt", rc)
		r.noteErr("a canceled context", err)
		for _, m := range tenantMistakes {
			rc, err := r.srv.Submit(r.ctx, m.tenant, lanes.Batch{Entries: []lanes.Entry{lanes.Replayed("parity", 0, r.inc(mine, 16))}})
			r.note(m.name+": receipt", rc)
			r.noteErr(m.name, err)
			_, err = r.srv.SubmitAsync(r.ctx, m.tenant, lanes.Batch{Entries: []lanes.Entry{lanes.Replayed("parity", 0, r.inc(mine, 16))}})
			r.noteErr(m.name+", async", err)
		}
		r.note("unchanged", r.read("a", mine.Whole()))
	}},
	{call: "SubmitAsync", name: "steps end once each", run: func(r *parityRun) {
		b := r.alloc("a", 64*4, lanes.I32)
		step := lanes.Batch{Entries: []lanes.Entry{lanes.Replayed("parity", 0, r.inc(b, 64))}}
		var ps []lanes.Pending
		for range 20 {
			p, err := r.srv.SubmitAsync(r.ctx, r.tenant("a"), step)
			r.must("SubmitAsync", err)
			ps = append(ps, p)
		}
		var outcomes []string
		for _, p := range ps {
			rc, err := p.Result()
			outcomes = append(outcomes, rc.Outcome.String()+" "+viewErr(err).String())
		}
		r.note("outcomes", outcomes)
		r.note("counts", r.read("a", b.Whole())[:4])
	}},
	{call: "Submit", name: "a program, sealed and invoked", run: func(r *parityRun) { // it seals the lane: the last to capture
		b := r.alloc("a", 64*4, lanes.I32)
		id := programs.ID{Runtime: "lanes/sim", Name: r.tenant("step")}
		decl := lanes.Batch{Entries: []lanes.Entry{lanes.Replayed("prog", 0, r.inc(b, 64)), lanes.Replayed("prog", 1, r.inc(b, 64))}, Program: &programs.Capture{ID: id, Nodes: 2}}
		rc := r.submit("declared", "a", decl)
		inv := programs.Invocation{Program: id, Segment: programs.Segment{End: 2, Commands: 2}}
		invoke := lanes.Batch{Entries: []lanes.Entry{{Node: -1, Invoke: &inv}}}
		r.submit("before the seal", "a", invoke)
		var err error
		if s := schedulerOf(r.srv); s != nil {
			_, err = s.Seal(r.ctx, rc.Lane)
		} else {
			_, err = frontOf(r.srv).Seal(r.ctx, r.tenant("a"))
		}
		r.must("Seal", err)
		r.submit("invoked", "a", invoke)
		r.submit("another tenant invokes it", "b", invoke)
		long := decl
		long.Program = &programs.Capture{ID: programs.ID{Runtime: "lanes/sim", Name: strings.Repeat("p", lanes.MaxProgramName+1)}, Nodes: 2}
		r.submit("a program name of MaxProgramName+1 bytes", "a", long)
		r.note("counts", r.read("a", b.Whole())[:4])
	}},
	{call: "SubmitAsync", name: "mistakes, now or at the end", run: func(r *parityRun) {
		mine, other := theirs(r)
		large := r.alloc("a", 66<<20+1, lanes.U8)
		var big [2]lanes.Command
		for i := range big {
			reg, _ := large.Region(uint64(i)*(33<<20), 33<<20)
			big[i] = lanes.Command{Kind: cuda.KindUpload, Dst: reg, Host: make([]byte, 33<<20)}
		}
		whole, _ := large.Region(0, 64<<20+1)
		huge := lanes.Command{Kind: cuda.KindUpload, Dst: whole, Host: make([]byte, 64<<20+1)}
		freed := r.alloc("a", 64, lanes.I32)
		r.must("Free", r.srv.Free(r.ctx, r.tenant("a"), freed))
		short := lanes.Command{Kind: cuda.KindUpload, Dst: mine.Whole(), Host: make([]byte, 60)}
		var many []lanes.Entry
		for range 1025 {
			many = append(many, lanes.Replayed("parity", 0, r.inc(mine, 16)))
		}
		for _, c := range []struct {
			what string
			b    lanes.Batch
		}{
			{"another tenant's buffer", lanes.Batch{Entries: []lanes.Entry{lanes.Replayed("parity", 0, r.inc(other, 16))}}},
			{"a freed buffer", lanes.Batch{Entries: []lanes.Entry{lanes.Replayed("parity", 0, r.inc(freed, 16))}}},
			{"an upload of fewer bytes than its region", lanes.Batch{Entries: []lanes.Entry{lanes.Input(short)}}},
			{"no entries", lanes.Batch{}},
			{"1025 entries", lanes.Batch{Entries: many}},
			{"65537 entries", lanes.Batch{Entries: slices.Repeat(many[:1], 65537)}},
			{"two uploads of 33 MiB", lanes.Batch{Entries: []lanes.Entry{lanes.Input(big[0]), lanes.Input(big[1])}}},
			{"an upload of 64 MiB and a byte", lanes.Batch{Entries: []lanes.Entry{lanes.Input(huge)}}},
		} {
			p, err := r.srv.SubmitAsync(r.ctx, r.tenant("a"), c.b)
			r.noteErr(c.what+": at SubmitAsync", err)
			if err == nil {
				rc, err := p.Result()
				r.note(c.what+": receipt", rc)
				r.noteErr(c.what+": at its end", err)
			}
		}
	}},
	{call: "Kernels", name: "names", run: func(r *parityRun) {
		var have []string
		for _, name := range []string{kernels.Fill, kernels.Axpy, kernels.Add, kernels.RowSum, kernels.Gemv, kernels.Inc, kernels.Poke, conformance.UserScale, "no_such_kernel"} {
			if spec, ok := r.srv.Kernels().Kernel(name); ok {
				have = append(have, name+" "+fmt.Sprint(len(spec.Params)))
			}
		}
		r.note("kernels", have)
	}},
	{call: "Status", name: "idle", run: func(r *parityRun) {
		st := r.srv.Status()
		r.note("serving all, nothing in flight", [3]bool{st.Serving == st.Total, st.Total > 0, st.InFlight == 0})
	}},
	{call: "Stop", name: "then every call", run: func(r *parityRun) {
		b := r.alloc("a", 64, lanes.I32)
		r.noteErr("Stop", r.srv.Stop(r.ctx))
		everyCall(r, r.ctx, r.tenant("a"), b)
		for _, m := range tenantMistakes {
			everyCall(r, r.ctx, m.tenant, b)
		}
		everyCall(r, canceled(), r.tenant("a"), b)
		r.noteErr("Stop again", r.srv.Stop(r.ctx))
	}},
}

// float32s is n copies of v, little-endian.
func float32s(n int, v float32) []byte {
	out := make([]byte, 4*n)
	for i := range n {
		binary.LittleEndian.PutUint32(out[4*i:], math.Float32bits(v))
	}
	return out
}

// submitTwice submits step for tenant twice: the first captures, the
// second replays.
func (r *parityRun) submitTwice(tenant string, step lanes.Batch) {
	r.submit("first", tenant, step)
	r.submit("second", tenant, step)
}
