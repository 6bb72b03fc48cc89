// Libraries' per-lane state (cuda.Library): made on the lane before it
// enqueues any of a library's calls, bound into each call, made again
// after a rebuild and released when the lane is let go of.

package lanecore

import (
	"fmt"

	"github.com/lanesched/lanes/cuda"
	"github.com/lanesched/lanes/internal/backend"

	lanes "github.com/lanesched/lanes/lanes"
)

// libraryState is the lane's state of one library.
type libraryState struct {
	lib       *cuda.Library
	workspace cuda.Buffer // the lane's workspace of the library; zero when it has none
	lane      cuda.LibraryLane
	ready     bool // Setup ran for the lane's current stream
}

// MaxLibraries is the most libraries one lane holds state of: declare
// each library once (one *cuda.Library) and give it to all its calls.
const MaxLibraries = 64

// SetUpLibrary makes the lane's state of lib now, unless it has it: its
// workspace (allocated once, kept until ReleaseLibraries) and what
// lib.Setup makes, on the calling thread, which must be the lane's (bound
// to the device). A submission does the same for each library its calls
// name before it enqueues anything; call this to pay for it before the
// first. Nothing may be capturing on the lane (nothing is, between
// submissions). It fails, refused, with ErrLibrarySetup when Setup failed
// or panicked (retryable: the next use tries again), with the device's
// error when the workspace cannot be allocated (out of memory is
// retryable), and with ErrInvalidBatch for a library the lane cannot
// hold: a second library of the same name (it would share the first's
// replay keys), one past MaxLibraries, or any after ReleaseLibraries.
func (l *Lane) SetUpLibrary(lib *cuda.Library) error {
	if err := l.setUpLibrary(lib); err != nil {
		return rejected("set up library", err)
	}
	return nil
}

// setUpLibrary is SetUpLibrary, its error not yet wrapped.
func (l *Lane) setUpLibrary(lib *cuda.Library) error {
	if err := lib.Validate(); err != nil {
		return err
	}
	st := l.library(lib)
	if l.libsReleased {
		return fmt.Errorf("%w: lane %d released its libraries (ReleaseLibraries) and takes no call of one again; make a new lane", lanes.ErrInvalidBatch, l.id)
	}
	if st == nil {
		if err := l.admitLibrary(lib); err != nil {
			return err
		}
		st = &libraryState{lib: lib}
		if lib.WorkspaceBytes > 0 {
			buf, err := l.dev.Alloc(cuda.BufferSpec{Size: lib.WorkspaceBytes, Elem: cuda.U8})
			if err != nil {
				return fmt.Errorf("library %q: the lane's workspace of %d bytes: %w", lib.Name, lib.WorkspaceBytes, err)
			}
			st.workspace = buf
			st.lane.Workspace = buf.Whole()
			l.counters.LibraryWorkspaceBytes += int64(lib.WorkspaceBytes)
			if l.onWorkspace != nil {
				l.onWorkspace(buf, true)
			}
		}
		st.lane.Lane = l.id
		l.libs = append(l.libs, st)
	}
	if st.ready {
		return nil
	}
	st.lane.Stream, st.lane.State = backend.NativeHandle(l.s), nil
	if lib.Setup != nil {
		v, err := runLibraryCode(lib, "setup", func() (any, error) { return lib.Setup(st.lane) })
		if err != nil {
			return err
		}
		st.lane.State = v
	}
	st.ready = true
	l.counters.LibrarySetups++
	return nil
}

// admitLibrary refuses a library the lane cannot hold beside the others.
func (l *Lane) admitLibrary(lib *cuda.Library) error {
	if len(l.libs) >= MaxLibraries {
		return fmt.Errorf("%w: lane %d holds the state of %d libraries already, the most it holds; declare each library once and give the one *cuda.Library to all its calls", lanes.ErrInvalidBatch, l.id, MaxLibraries)
	}
	for _, st := range l.libs {
		if st.lib.Name == lib.Name {
			return fmt.Errorf("%w: lane %d holds another library named %q; declare each library once and give the one *cuda.Library to all its calls (calls are keyed by their library's name)", lanes.ErrInvalidBatch, l.id, lib.Name)
		}
	}
	return nil
}

// runLibraryCode runs a library's Setup or Teardown, its error or panic
// an ErrLibrarySetup wrapping a *cuda.CallError.
func runLibraryCode(lib *cuda.Library, what string, f func() (any, error)) (v any, err error) {
	defer func() {
		if p := recover(); p != nil {
			err = fmt.Errorf("%w: %w", lanes.ErrLibrarySetup, &cuda.CallError{Kind: "library " + what, Name: lib.Name, Panicked: true, Err: fmt.Errorf("%v", p)})
		}
	}()
	if v, err = f(); err != nil {
		return nil, fmt.Errorf("%w: %w", lanes.ErrLibrarySetup, &cuda.CallError{Kind: "library " + what, Name: lib.Name, Err: err})
	}
	return v, nil
}

// library is the lane's state of lib, or nil.
func (l *Lane) library(lib *cuda.Library) *libraryState {
	for _, st := range l.libs {
		if st.lib == lib {
			return st
		}
	}
	return nil
}

// setUpLibraries makes the lane's state of every library the batch's
// calls name and it lacks, before any of the batch is enqueued.
func (l *Lane) setUpLibraries(b *lanes.Batch) error {
	for i := range b.Entries {
		c := &b.Entries[i].Command
		if c.Kind != cuda.KindCall || c.LibraryCall == nil || c.LibraryCall.Library == nil {
			continue
		}
		if st := l.library(c.LibraryCall.Library); st != nil && st.ready {
			continue
		}
		if err := l.setUpLibrary(c.LibraryCall.Library); err != nil {
			return fmt.Errorf("entry %d (call %q): %w", i, c.LibraryCall.Name, err)
		}
	}
	return nil
}

// bind is cmd as the lane's stream runs it: a call of a library gets the
// lane's state of it (its workspace as its last region, EnqueueOn given
// the state). A call whose library the lane has not set up stays unbound,
// and the stream refuses it (backend.CheckBound).
func (l *Lane) bind(cmd cuda.Command) cuda.Command {
	lc := cmd.LibraryCall
	if cmd.Kind != cuda.KindCall || lc == nil || lc.Library == nil {
		return cmd
	}
	st := l.library(lc.Library)
	if st == nil || !st.ready {
		return cmd
	}
	bound := &cuda.LibraryCall{Name: lc.Name, Regions: lc.Regions, Params: lc.Params, Reference: lc.Reference}
	if lc.Workspace != 0 {
		bound.Regions = append(lc.Regions[:len(lc.Regions):len(lc.Regions)], cuda.Touch{Region: st.lane.Workspace, Access: lc.Workspace})
	}
	if lc.EnqueueOn != nil {
		state, enqueue := st.lane, lc.EnqueueOn
		bound.Enqueue = func(stream uintptr) error {
			state.Stream = stream
			return enqueue(state)
		}
	}
	cmd.LibraryCall = bound
	return cmd
}

// tearDownLibraries runs every set-up library's Teardown (its errors
// dropped: the lane is moving on either way) and marks it to be set up
// again before its next call.
func (l *Lane) tearDownLibraries() {
	for _, st := range l.libs {
		if !st.ready {
			continue
		}
		st.ready = false
		if st.lib.Teardown != nil {
			lane := st.lane
			_, _ = runLibraryCode(st.lib, "teardown", func() (any, error) { return nil, st.lib.Teardown(lane) })
		}
		st.lane.State = nil
	}
}

// ReleaseLibraries tears down the lane's state of every library and frees
// their workspaces: call it when the lane is let go of (it stops, its
// device is lost, or it is abandoned after a hang: then only once its
// stream drained, since a replay may still use a workspace). Nothing may
// be in flight on the lane. Its executables may hold calls that use a
// freed workspace, so from then on the lane refuses every call of a
// library (ErrInvalidBatch); everything else it still runs. Freeing, and
// a teardown such as cuBLAS's, wait for the device's work: on a device
// that still runs hung work, AbandonLibraries instead. It returns the
// first error freeing a workspace.
func (l *Lane) ReleaseLibraries() error {
	l.tearDownLibraries()
	var first error
	for _, st := range l.libs {
		if st.lib.WorkspaceBytes > 0 {
			if l.onWorkspace != nil {
				l.onWorkspace(st.workspace, false)
			}
			if err := l.dev.Free(st.workspace); err != nil && first == nil {
				first = err
			}
		}
	}
	l.dropLibraries()
	return first
}

// ForgetLibraryState forgets what each library's Setup made on the lane
// without its Teardown (which may wait for the device's work: cuBLAS's
// does), keeping the workspaces and the libraries: each is set up again
// before its next call (at Recover for Config.Libraries). For a lane that
// recovers while its device still runs another stream's hung work; what
// Setup made is left to the device's close.
func (l *Lane) ForgetLibraryState() {
	for _, st := range l.libs {
		st.ready, st.lane.State = false, nil
	}
}

// AbandonLibraries lets go of the lane's state of every library without
// tearing it down or freeing a workspace (both would wait for the
// device's work): for a device that still runs hung work, whose close
// releases them. The workspaces stay allocated, so Config.OnWorkspace
// does not hear of them again. Like ReleaseLibraries, the lane takes no
// call of a library afterwards.
func (l *Lane) AbandonLibraries() { l.dropLibraries() }

// dropLibraries forgets every library's state, for good.
func (l *Lane) dropLibraries() {
	clear(l.libs)
	l.libs = l.libs[:0]
	l.libsReleased = true
	l.counters.LibraryWorkspaceBytes = 0
}

// Libraries is how many libraries the lane holds state of, and the bytes
// of their workspaces.
func (l *Lane) Libraries() (n int, workspaceBytes int64) {
	return len(l.libs), l.counters.LibraryWorkspaceBytes
}
