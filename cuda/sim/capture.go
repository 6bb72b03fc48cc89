// Stream capture on the simulated device: CUDA's capture modes and rules,
// and recording commands into a graph instead of running them.

package sim

import (
	"github.com/lanesched/lanes/cuda"
	"github.com/lanesched/lanes/internal/backend"
	"github.com/lanesched/lanes/internal/codes"
)

// record appends n to an active capture. It reports whether the stream was
// capturing; a rejected command invalidates the capture.
func (s *stream) record(op string, n node) (bool, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	c := s.capture
	if c == nil {
		return false, nil
	}
	if c.invalidated {
		return true, backend.DriverError(op, codes.StreamCaptureInvalidated, "the capture on this stream was invalidated; end it and capture again")
	}
	s.dev.mu.Lock()
	rejected := s.dev.fire(FaultCaptureReject, nodeKernels([]node{n}))
	s.dev.mu.Unlock()
	if rejected {
		c.invalidated = true
		return true, backend.DriverError(op, codes.StreamCaptureUnsupported, "injected capture rejection; the capture is invalidated")
	}
	c.nodes = append(c.nodes, n)
	return true, nil
}

// unsupportedDuringCapture invalidates this stream's capture, if any, and
// returns the error CUDA gives for a synchronizing call during capture.
func (s *stream) unsupportedDuringCapture(op string) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.capture == nil {
		return nil
	}
	s.capture.invalidated = true
	return backend.DriverError(op, codes.StreamCaptureUnsupported, op+" on a capturing stream is not allowed; the capture is invalidated. End the capture first")
}

// invalidateGlobalCapture invalidates a global-mode capture.
func (s *stream) invalidateGlobalCapture() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.capture == nil || s.capture.mode != backend.CaptureGlobal {
		return false
	}
	s.capture.invalidated = true
	return true
}

// BeginCapture starts recording.
func (s *stream) BeginCapture(mode backend.CaptureMode) error {
	const op = "begin capture"
	if err := s.check(op); err != nil {
		return err
	}
	if mode > backend.CaptureRelaxed {
		return cuda.Contractf(op, cuda.ErrInvalidCommand, "unknown capture mode %d", mode)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.capture != nil {
		return backend.DriverError(op, codes.IllegalState, "the stream is already capturing; end that capture first")
	}
	s.capture = &captureState{mode: mode}
	return nil
}

// EndCapture ends the capture and returns its graph.
func (s *stream) EndCapture() (backend.Graph, error) {
	const op = "end capture"
	if err := s.check(op); err != nil {
		return nil, err
	}
	s.mu.Lock()
	c := s.capture
	s.capture = nil
	s.mu.Unlock()
	switch {
	case c == nil:
		return nil, backend.DriverError(op, codes.IllegalState, "the stream is not capturing; call BeginCapture first")
	case c.invalidated:
		return nil, backend.DriverError(op, codes.StreamCaptureInvalidated, "a call during the capture invalidated it; no graph was made, capture again")
	}
	return &graph{dev: s.dev, nodes: c.nodes}, nil
}

// Capture reports the capture status.
func (s *stream) Capture() backend.CaptureStatus {
	s.mu.Lock()
	defer s.mu.Unlock()
	switch {
	case s.capture == nil:
		return backend.CaptureNone
	case s.capture.invalidated:
		return backend.CaptureInvalidated
	}
	return backend.CaptureActive
}

type captureState struct {
	mode        backend.CaptureMode
	nodes       []node
	invalidated bool
}
