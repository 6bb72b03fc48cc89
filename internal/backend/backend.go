// Package backend is what the simulated device (cuda/sim) and the real
// one (cuda/driver) share and no user needs: the free fence, the handle
// checks every backend makes at its boundary, the one way to run user
// code, and device instance ids. It is internal so that the cuda package's
// exported surface is what a user of a device sees.
package backend

import (
	"crypto/rand"
	"encoding/binary"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"

	"github.com/lanesched/lanes/cuda"
)

// FreeFence orders a device's frees against its streams' enqueues and
// launches, the same way on every backend. Each stream checks a command's
// handles and issues its work holding its own use lock (one user: its
// owner, so the lock is uncontended, unlike one lock every stream would
// share); a free marks its buffer as going while holding every stream's use
// lock. So every enqueue that found the buffer live has issued its work
// before the free waits for the device, and every later one is refused:
// work issued after the wait would touch freed memory, which on a GPU
// poisons the context. Its zero value is ready.
type FreeFence struct {
	mu      sync.Mutex // the registry; held while marking, so no stream joins meanwhile
	streams map[*sync.Mutex]struct{}
	frees   atomic.Uint64
}

// AddStream registers a stream's use lock.
func (f *FreeFence) AddStream(use *sync.Mutex) {
	f.mu.Lock()
	if f.streams == nil {
		f.streams = map[*sync.Mutex]struct{}{}
	}
	f.streams[use] = struct{}{}
	f.mu.Unlock()
}

// RemoveStream forgets a destroyed stream's use lock.
func (f *FreeFence) RemoveStream(use *sync.Mutex) {
	f.mu.Lock()
	delete(f.streams, use)
	f.mu.Unlock()
}

// MarkGoing records handle id of table t (a buffer or a host buffer) as
// being freed, while no stream is halfway through an enqueue or launch and
// holding lock (the device's, which guards t), and counts a free. It
// refuses, with goingError, an id t does not hold or that is already
// going.
func (f *FreeFence) MarkGoing(op string, lock sync.Locker, t marker, id uint64) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	for use := range f.streams {
		use.Lock()
	}
	defer func() {
		for use := range f.streams {
			use.Unlock()
		}
	}()
	lock.Lock()
	defer lock.Unlock()
	if !t.markGoing(id) {
		return goingError(op, id)
	}
	f.frees.Add(1)
	return nil
}

// marker is a Table, for MarkGoing.
type marker interface{ markGoing(id uint64) bool }

// Table is one kind of handle a device hands out (its buffers, or its
// pinned host buffers) by id, and which of them are being freed. The
// device's lock guards it. Make one with NewTable.
type Table[T any] struct {
	entries map[uint64]T
	going   map[uint64]bool
}

// NewTable makes an empty table.
func NewTable[T any]() Table[T] {
	return Table[T]{entries: map[uint64]T{}, going: map[uint64]bool{}}
}

// Add records a handle handed out.
func (t *Table[T]) Add(id uint64, v T) { t.entries[id] = v }

// Live is id's entry when it is handed out and not being freed: what a
// new enqueue may name.
func (t *Table[T]) Live(id uint64) (T, bool) {
	v, ok := t.entries[id]
	if !ok || t.going[id] {
		var zero T
		return zero, false
	}
	return v, true
}

// Entry is id's entry while it is handed out, being freed or not: what
// work enqueued before its free still reaches.
func (t *Table[T]) Entry(id uint64) (T, bool) {
	v, ok := t.entries[id]
	return v, ok
}

// EndFree ends the free MarkGoing began: id is no longer going and, when
// freed, no longer handed out.
func (t *Table[T]) EndFree(id uint64, freed bool) {
	delete(t.going, id)
	if freed {
		delete(t.entries, id)
	}
}

// Take empties the table and returns what it held.
func (t *Table[T]) Take() map[uint64]T {
	held := t.entries
	t.entries, t.going = map[uint64]T{}, map[uint64]bool{}
	return held
}

func (t *Table[T]) markGoing(id uint64) bool {
	if _, ok := t.entries[id]; !ok || t.going[id] {
		return false
	}
	t.going[id] = true
	return true
}

// Frees counts the frees marked: a handle found live stays live while it
// is unchanged (Device.Frees).
func (f *FreeFence) Frees() uint64 { return f.frees.Load() }

// CheckExec checks, before a launch (under the stream's use lock), that
// every buffer and host buffer an executable's graph names is live, by the
// device's live(id, host): replaying a graph over freed memory would poison
// the device, and a caller that freed a buffer is refused instead. checked
// is the executable's record of the free count when its handles were last
// found live (plus one, so its zero means never): it looks only when
// something was freed since.
func (f *FreeFence) CheckExec(op string, h *Handles, checked *atomic.Uint64, live func(id uint64, host bool) bool) error {
	epoch := f.frees.Load() + 1
	if checked.Load() == epoch {
		return nil
	}
	err := h.Each(func(id uint64) error {
		if !live(id, false) {
			return cuda.Contractf(op, cuda.ErrStaleHandle, "the executable's graph names buffer %d, which was freed; capture it again", id)
		}
		return nil
	}, func(id uint64) error {
		if !live(id, true) {
			return cuda.Contractf(op, cuda.ErrStaleHandle, "the executable's graph names host buffer %d, which was freed; capture it again", id)
		}
		return nil
	})
	if err == nil {
		checked.Store(epoch)
	}
	return err
}

// goingError is the error of a buffer freed twice, or while its free runs.
func goingError(op string, id uint64) error {
	return cuda.Contractf(op, cuda.ErrStaleHandle, "buffer %d was already freed, or is being freed", id)
}

// Handles is the set of buffers and host buffers some commands name, by id
// (of one device instance): what an executable captured from them touches.
// The zero value is empty.
type Handles struct {
	buffers, hosts []uint64
}

// Reset empties h, keeping its storage.
func (h *Handles) Reset() { h.buffers, h.hosts = h.buffers[:0], h.hosts[:0] }

// Add adds the handles one command names.
func (h *Handles) Add(c cuda.Command) {
	_ = ForRegions(c, func(r cuda.Region) error {
		h.buffers = addID(h.buffers, r.Buffer.ID)
		return nil
	})
	if c.Kind == cuda.KindStageIn || c.Kind == cuda.KindStageOut {
		h.hosts = addID(h.hosts, c.Staging.Buffer.ID)
	}
}

// Each calls buffer for every buffer id and host for every host buffer id,
// and stops at the first error.
func (h *Handles) Each(buffer, host func(id uint64) error) error {
	for _, id := range h.buffers {
		if err := buffer(id); err != nil {
			return err
		}
	}
	for _, id := range h.hosts {
		if err := host(id); err != nil {
			return err
		}
	}
	return nil
}

func addID(ids []uint64, id uint64) []uint64 {
	for _, have := range ids {
		if have == id {
			return ids
		}
	}
	return append(ids, id)
}

// RunCall runs f, user code of kind ("library call" for a call's Enqueue
// or Reference, "kernel" for a kernel's Go reference) named name, turning
// an error or a panic into a *cuda.CallError wrapped in a device error of code:
// a backend's one way to run user code, so that no panic of it escapes
// into the device.
func RunCall(op string, code cuda.Code, kind, name string, f func() error) (err error) {
	defer func() {
		if p := recover(); p != nil {
			ce := &cuda.CallError{Kind: kind, Name: name, Panicked: true, Err: fmt.Errorf("%v", p)}
			e := DriverError(op, code, ce.Error())
			e.Contract = ce
			err = e
		}
	}()
	if fe := f(); fe != nil {
		ce := &cuda.CallError{Kind: kind, Name: name, Err: fe}
		e := DriverError(op, code, ce.Error())
		e.Contract = ce
		return e
	}
	return nil
}

// CheckBuffer checks that b is a buffer of device instance inst and is the
// very value the device handed out for its id (have, when found).
func CheckBuffer(op string, inst uint64, b cuda.Buffer, have cuda.Buffer, found bool) error {
	switch {
	case b.Device != inst:
		return cuda.Contractf(op, cuda.ErrForeignHandle, "buffer %d belongs to device instance %d, not %d; allocate it on this device", b.ID, b.Device, inst)
	case !found:
		return cuda.Contractf(op, cuda.ErrStaleHandle, "buffer %d is not allocated (freed, or never handed out by this device)", b.ID)
	case have != b:
		return cuda.Contractf(op, cuda.ErrStaleHandle, "buffer %d does not match its allocation (%+v); use the cuda.Buffer value Alloc returned", b.ID, have)
	}
	return nil
}

// CheckEvent checks an event handle: one released (Event.Release) is
// stale, whatever its stream did with the event since.
func CheckEvent(op string, released bool) error {
	if released {
		return cuda.Contractf(op, cuda.ErrStaleHandle, "the event was released; record a new one")
	}
	return nil
}

// CheckExec checks an executable handle: mine says whether it was
// instantiated on this device instance, destroyed whether it was destroyed
// since.
func CheckExec(op string, inst uint64, mine, destroyed bool) error {
	switch {
	case !mine:
		return cuda.Contractf(op, cuda.ErrForeignHandle, "the executable was not instantiated on device %d", inst)
	case destroyed:
		return cuda.Contractf(op, cuda.ErrStaleHandle, "the executable was destroyed; instantiate the graph again")
	}
	return nil
}

// ValidateEnqueue is a stream's check of a command it is given:
// [ValidateFor], and no call of a Library that no lane bound (see
// [CheckBound]).
func ValidateEnqueue(op string, cmd cuda.Command, kernels cuda.Kernels, lookup func(cuda.Buffer) error) error {
	if cmd.Kind == cuda.KindCall && cmd.LibraryCall != nil {
		if err := CheckBound(op, cmd.LibraryCall); err != nil {
			return err
		}
	}
	return ValidateFor(op, cmd, kernels, lookup)
}

// instances counts device instances from a random base, so that two
// processes (lane hosts of one front, say, or a host and its restart)
// hand out different ids and a handle of one is refused by the other.
var instances = func() *atomic.Uint64 {
	var base [8]byte
	_, _ = rand.Read(base[:])
	a := new(atomic.Uint64)
	a.Store(binary.LittleEndian.Uint64(base[:]) >> 20 << 8) // 44 random bits, room for 256 devices each
	return a
}()

// NextInstance returns a device instance id unique in the process, and,
// with overwhelming probability, among processes (it counts from a random
// base); backends call it once per device they open.
func NextInstance() uint64 { return instances.Add(1) }

// UnwrapStream returns the stream a decorator wraps: a stream that embeds
// another (for instrumentation, say) and has an Unwrap method. Backends
// unwrap before their ownership checks, so decorated streams are accepted
// wherever their inner stream is.
func UnwrapStream(s Stream) Stream {
	for {
		w, ok := s.(interface{ Unwrap() Stream })
		if !ok {
			return s
		}
		s = w.Unwrap()
	}
}

// The device memory of an instantiated, uploaded executable of n tiny
// kernel nodes, fitted to cuMemGetInfo around cuGraphInstantiate and
// cuGraphUpload on an H100 with driver 580 (scripts/anchors/graph_memory.cu,
// docs/measurements/2026-12-05-graph-memory.txt): about 100 KiB and 2.5 KiB
// a node (K=1: 113 KiB, 16: 143 KiB, 64: 256 KiB, 256: 748 KiB, 1024:
// 2.6 MiB, within 4% of the fit).
const (
	ExecBytesBase    = 100 << 10
	ExecBytesPerNode = 2560
)

// ExecBytes is the fitted device memory of an executable of n nodes.
func ExecBytes(n int) int64 { return ExecBytesBase + int64(n)*ExecBytesPerNode }

// CheckRebind refuses an in-place parameter update (Exec.Rebind) whose
// commands are not one per node of an executable of n nodes, or include
// a kind no node takes in place (Rebindable).
func CheckRebind(cmds []cuda.Command, n int) error {
	if len(cmds) != n {
		return &RebindRefusedError{Refusal: RebindNodeCount, Node: -1,
			Detail: fmt.Sprintf("%d commands for an executable of %d nodes", len(cmds), n)}
	}
	for i := range cmds {
		if !Rebindable(cmds[i].Kind) {
			return &RebindRefusedError{Refusal: RebindNodeKind, Node: i,
				Detail: fmt.Sprintf("%s; only kernel, copy and memset nodes take new parameters in place", Article(cmds[i].Kind))}
		}
	}
	return nil
}

// Rebindable reports whether a node captured from a command of kind k
// takes new parameters in place: a kernel launch
// (cuGraphExecKernelNodeSetParams), a copy between device memory and
// device or pinned staging memory (cuGraphExecMemcpyNodeSetParams), a
// memset (cuGraphExecMemsetNodeSetParams). Not an upload, whose source is
// pinned memory the graph itself holds, nor a library call, whose nodes
// are the library's.
func Rebindable(k cuda.CommandKind) bool {
	switch k {
	case cuda.KindLaunch, cuda.KindCopy, cuda.KindZero, cuda.KindStageIn, cuda.KindStageOut:
		return true
	}
	return false
}

// CheckedLike reports whether cmd passes every check its node's command
// (checked, when it was captured or last rebound) passed but those of its
// buffers: the same launch (kernel, shape, argument kinds, element types,
// scalars, structs, region offsets and lengths) on other buffers of the
// same element types, or a copy or memset of the same lengths. Then a
// Rebind need only check each region against its buffer and look the
// buffers up (CheckRegions): a kernel's extent checks and the launch
// shape's are functions of what is equal. A serving loop rebinds one
// tenant's step in place of another's, the same step on other buffers.
func CheckedLike(cmd, checked *cuda.Command) bool {
	if cmd.Kind != checked.Kind || cmd.Kernel != checked.Kernel || cmd.Config != checked.Config || len(cmd.Args) != len(checked.Args) ||
		cmd.LibraryCall != nil || checked.LibraryCall != nil || len(cmd.Host) != 0 {
		return false
	}
	for i := range cmd.Args {
		a, b := &cmd.Args[i], &checked.Args[i]
		if a.Kind != b.Kind || a.Elem != b.Elem || a.Bits != b.Bits || a.Struct != b.Struct || !sameExtent(a.Region, b.Region) {
			return false
		}
	}
	return sameExtent(cmd.Dst, checked.Dst) && sameExtent(cmd.Src, checked.Src) &&
		cmd.Staging.Offset == checked.Staging.Offset && cmd.Staging.Length == checked.Staging.Length
}

// sameExtent reports whether two regions cover the same bytes of buffers
// of one element type.
func sameExtent(a, b cuda.Region) bool {
	return a.Offset == b.Offset && a.Length == b.Length && a.Buffer.Elem == b.Buffer.Elem
}

// CheckRegions checks each region cmd names against its buffer and looks
// the buffer up, and reports whether all passed (a caller runs the full
// check for the error of one that did not).
func CheckRegions(cmd *cuda.Command, lookup func(cuda.Buffer) error) bool {
	if st := cmd.Staging; (cmd.Kind == cuda.KindStageIn || cmd.Kind == cuda.KindStageOut) &&
		(st.Buffer.ID == 0 || st.Length == 0 || st.Offset > st.Buffer.Size || st.Length > st.Buffer.Size-st.Offset) {
		return false
	}
	return ForRegions(*cmd, func(r cuda.Region) error {
		if err := r.Validate(); err != nil {
			return err
		}
		return lookup(r.Buffer)
	}) == nil
}

// KeepRebound copies cmd into dst as an executable keeps a command a
// Rebind gave one of its nodes, reusing dst's argument storage (a serving
// loop rebinds at every step): rebindable commands carry no host bytes.
func KeepRebound(dst, cmd *cuda.Command) {
	args := dst.Args[:0]
	*dst = *cmd
	dst.Args, dst.Host = nil, nil
	if len(cmd.Args) > 0 {
		dst.Args = append(args, cmd.Args...)
	}
}

// RebindKindMismatch refuses a command of another kind than the one its
// node was captured from.
func RebindKindMismatch(i int, node, cmd cuda.CommandKind) error {
	return &RebindRefusedError{Refusal: RebindNodeKind, Node: i,
		Detail: fmt.Sprintf("the node was captured from %s, the command is %s", Article(node), Article(cmd))}
}

// Article is a command kind with its indefinite article.
func Article(k cuda.CommandKind) string {
	if s := k.String(); s != "" && strings.ContainsRune("aeiou", rune(s[0])) {
		return "an " + s
	}
	return "a " + k.String()
}

// CheckBound refuses a call of a Library that is enqueued on a stream
// directly: only a lane can hand it its per-lane state. Every backend
// calls it before it runs a call.
func CheckBound(op string, lc *cuda.LibraryCall) error {
	if lc.Library != nil {
		return cuda.Contractf(op, cuda.ErrInvalidCommand, "library call %q needs library %q's per-lane state; submit it through a lane (actors.Scheduler, or a lane host), which sets the library up and binds the call to it", lc.Name, lc.Library.Name)
	}
	return nil
}
