// Why an executable refused new parameters in place, and the error of a
// failed driver call.

package backend

import (
	"fmt"

	"github.com/lanesched/lanes/cuda"
	"github.com/lanesched/lanes/internal/codes"
)

// RebindRefusal says why an executable could not take new parameters in
// place ([Exec.Rebind]); the cure is the same for every refusal: capture
// the commands and update or instantiate.
type RebindRefusal string

// The refusals of [Exec.Rebind].
const (
	// RebindNodeCount: the commands are not one per node of the executable.
	RebindNodeCount RebindRefusal = "node_count"
	// RebindNodeKind: a command or a node takes no parameters in place (an
	// upload or a library call, which are captured again), or a command is
	// of another kind than its node was captured from.
	RebindNodeKind RebindRefusal = "node_kind"
	// RebindNotChain: the executable's graph is not one chain of nodes in
	// capture order, so its nodes cannot be matched to commands.
	RebindNotChain RebindRefusal = "not_a_chain"
	// RebindDeviceRefused: the device refused a node's new parameters.
	RebindDeviceRefused RebindRefusal = "device_refused"
)

// RebindRefusedError is an executable's refusal to take new parameters in
// place: Refusal says why, Node which node (-1: the executable as a
// whole). It matches [cuda.ErrUpdateRefused] with errors.Is and classifies as
// that code: the executable is unchanged, and capturing the commands
// again is the way on.
type RebindRefusedError struct {
	Refusal RebindRefusal
	Node    int
	Detail  string
}

// Error formats "cuda: graph exec rebind: refusal: detail".
func (e *RebindRefusedError) Error() string {
	msg := "cuda: graph exec rebind: " + string(e.Refusal)
	if e.Node >= 0 {
		msg += fmt.Sprintf(" at node %d", e.Node)
	}
	if e.Detail != "" {
		msg += ": " + e.Detail
	}
	return msg + "; capture the commands instead"
}

// Is matches [cuda.ErrUpdateRefused].
func (e *RebindRefusedError) Is(target error) bool { return target == cuda.ErrUpdateRefused }

// Class is [codes.GraphExecUpdateFailure]'s class.
func (e *RebindRefusedError) Class() cuda.Class { return codes.GraphExecUpdateFailure.Class() }

// DriverError builds the error for a failed device call, classifying the
// code as sticky and retryable from CUDA's documented behaviour.
func DriverError(op string, code cuda.Code, detail string) *cuda.Error {
	return &cuda.Error{Op: op, Code: code, Sticky: code.Sticky(), Retryable: code.Retryable(), Detail: detail}
}
