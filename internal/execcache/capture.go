// Capturing a candidate into a CUDA graph: recording, instantiation,
// upload and launch of an Executable, and the ReplayError of a failed one.

package execcache

import (
	"fmt"

	"github.com/lanesched/lanes/internal/backend"
	discovery "github.com/lanesched/lanes/internal/discovery"

	cache "github.com/lanesched/lanes/cache"
	"github.com/lanesched/lanes/cuda"
)

// ReplayError is a failure to capture, upload or launch an executable.
// EagerFallbackSafe says whether the stream is out of capture and healthy,
// so the same commands may still run eagerly; when false, the lane must fail.
type ReplayError struct {
	Stage             string
	Detail            string
	EagerFallbackSafe bool
	Err               error
}

// Error formats "cache: stage: detail".
func (e *ReplayError) Error() string {
	msg := "cache: " + e.Stage + ": " + e.Detail
	if e.EagerFallbackSafe {
		msg += " (eager fallback is safe)"
	} else {
		msg += " (eager fallback is not safe)"
	}
	return msg
}

// Unwrap returns the device error, if any.
func (e *ReplayError) Unwrap() error { return e.Err }

// Executable is a captured, instantiated segment.
type Executable struct {
	Key        discovery.SegmentKey
	Shape      discovery.ShapeKey
	Exec       backend.Exec
	Commands   int   // logical commands captured
	GraphNodes int   // nodes in the captured graph
	NodeCounts []int // graph nodes per command; nil when they could not be attributed
	Scope      cache.Scope
	Owner      string // the tenant whose batch captured it ("" for none)
	Bytes      int64  // host memory it retains: the uploads it captured
	// DeviceBytes is the device memory it holds, as its device measured
	// it once instantiated (backend.Exec.DeviceBytes).
	DeviceBytes int64
	// Hits counts its replays (Launch); a rebuilt lane captures the most
	// hit again first (Recipes).
	Hits      uint64
	recipe    []cuda.Command // the commands it replays, for a rebuilt lane (nil: none kept)
	uploaded  bool
	lastUsed  uint64
	lastBatch uint64 // the cache's batch count when it was last used

	shapePrev, shapeNext *Executable // its shape's residents, least recently used first (residents.go)

	fingerprint    string               // Key in hex, made once per key
	fingerprintKey discovery.SegmentKey // the key fingerprint was made of
}

// Uploaded reports whether the executable was uploaded by its preparation.
func (e *Executable) Uploaded() bool { return e.uploaded }

// Fingerprint is the executable's key in hex (Key.String()), made once
// per key rather than at every replay that reports it.
func (e *Executable) Fingerprint() string {
	if e.fingerprint == "" || e.fingerprintKey != e.Key {
		e.fingerprint, e.fingerprintKey = e.Key.String(), e.Key
	}
	return e.fingerprint
}

// record captures the candidate's commands (enqueued by enqueue) on s in
// relaxed mode and returns the graph and what it holds. A panicking enqueue
// is recovered: the capture is ended, and the error says whether that could
// be proven.
func record(s backend.Stream, cand discovery.Candidate, enqueue func(i int) error) (backend.Graph, *Executable, error) {
	if err := s.BeginCapture(backend.CaptureRelaxed); err != nil {
		return nil, nil, &ReplayError{Stage: "begin capture", Detail: err.Error(), EagerFallbackSafe: !cuda.Classify(err).Sticky, Err: err}
	}
	panicked, encodeErr := encode(cand, enqueue)
	graph, endErr := s.EndCapture()
	terminated := s.Capture() == backend.CaptureNone
	discard := func() {
		if graph != nil {
			_ = graph.Destroy()
		}
	}
	switch {
	case panicked != nil:
		discard()
		detail := fmt.Sprintf("a command panicked (%v); the capture was ended", panicked)
		if !terminated {
			detail = fmt.Sprintf("a command panicked (%v) and the end of the capture could not be proven", panicked)
		}
		return nil, nil, &ReplayError{Stage: "encode capture", Detail: detail}
	case encodeErr != nil:
		discard()
		return nil, nil, &ReplayError{Stage: "encode capture", Detail: encodeErr.Error(), EagerFallbackSafe: terminated && !cuda.Classify(encodeErr).Sticky, Err: encodeErr}
	case endErr != nil || !terminated:
		discard()
		detail := "the stream is still capturing"
		if endErr != nil {
			detail = endErr.Error()
		}
		return nil, nil, &ReplayError{Stage: "end capture", Detail: detail, EagerFallbackSafe: terminated && !cuda.Classify(endErr).Sticky, Err: endErr}
	}
	exe := &Executable{Key: cand.Key, Shape: cand.Shape, Commands: cand.Len(), GraphNodes: graph.NodeCount(), Scope: cand.Scope}
	// Every command of the boundary issues exactly one graph node (a kernel,
	// memcpy or memset node); the per-command counts are attributed only
	// when the graph agrees.
	if exe.GraphNodes == exe.Commands {
		exe.NodeCounts = make([]int, exe.Commands)
		for i := range exe.NodeCounts {
			exe.NodeCounts[i] = 1
		}
	}
	return graph, exe, nil
}

// instantiate makes the recorded graph executable; the graph is destroyed.
func instantiate(graph backend.Graph, exe *Executable) (*Executable, error) {
	defer graph.Destroy()
	x, err := graph.Instantiate()
	if err != nil {
		return nil, &ReplayError{Stage: "instantiate", Detail: err.Error(), EagerFallbackSafe: !cuda.Classify(err).Sticky, Err: err}
	}
	exe.Exec = x
	return exe, nil
}

// encode enqueues the candidate's commands, recovering a panic.
func encode(cand discovery.Candidate, enqueue func(i int) error) (panicked any, err error) {
	defer func() {
		if p := recover(); p != nil {
			panicked = p
		}
	}()
	for i := cand.Start; i < cand.End; i++ {
		if err := enqueue(i); err != nil {
			return nil, fmt.Errorf("command %d: %w", i, err)
		}
	}
	return nil, nil
}

func (e *Executable) upload(s backend.Stream) error {
	if err := e.Exec.Upload(s); err != nil {
		return &ReplayError{Stage: "upload", Detail: err.Error(), Err: err}
	}
	e.uploaded = true
	return nil
}

func (e *Executable) launch(s backend.Stream) error {
	if !e.uploaded {
		return &ReplayError{Stage: "launch", Detail: "executable " + e.Key.Short() + " was not uploaded by its preparation"}
	}
	if err := s.Launch(e.Exec); err != nil {
		return &ReplayError{Stage: "launch", Detail: err.Error(), Err: err}
	}
	return nil
}
