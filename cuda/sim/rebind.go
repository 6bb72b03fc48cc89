// In-place parameter updates of the simulated device's executables, and
// the device memory an executable holds.

package sim

import (
	"fmt"
	"time"

	"github.com/lanesched/lanes/cuda"
	"github.com/lanesched/lanes/cuda/internal/backend"
)

// Rebind gives the executable's kernel nodes cmds' parameters, as
// cuGraphExecKernelNodeSetParams on each node: one kernel launch per node,
// in capture order, each validated as Enqueue validates it. A
// FaultUpdateReject rule refuses it as the device would.
func (x *exec) Rebind(cmds []cuda.Command) error {
	const op = "graph exec rebind"
	if x.destroyed.Load() {
		return cuda.Contractf(op, cuda.ErrStaleHandle, "the executable was destroyed")
	}
	d := x.dev
	if err := d.check(op); err != nil {
		return err
	}
	if err := backend.CheckRebind(cmds, len(x.nodes)); err != nil {
		return err
	}
	for i := range x.nodes {
		if x.nodes[i].cmd.Kind != cuda.KindLaunch {
			return &cuda.RebindRefusedError{Refusal: cuda.RebindNodeKind, Node: i,
				Detail: fmt.Sprintf("the node is a %v; only kernel nodes take new parameters in place", x.nodes[i].cmd.Kind)}
		}
	}
	ns := make([]node, len(cmds))
	for i, cmd := range cmds {
		err := backend.ValidateEnqueue(op, cmd, kernelView{d.kernels()}, func(b cuda.Buffer) error {
			_, err := d.lookup(op, b)
			return err
		})
		if err != nil {
			return err
		}
		ns[i] = node{cmd: frozen(cmd)}
	}
	d.mu.Lock()
	refused := d.fire(FaultUpdateReject, nodeKernels(ns))
	d.mu.Unlock()
	if refused {
		return &cuda.RebindRefusedError{Refusal: cuda.RebindDeviceRefused, Node: 0, Detail: "injected update refusal"}
	}
	d.clock.spin(time.Duration(len(ns)) * d.cost.RebindNode)
	x.setNodes(ns)
	return nil
}

// DeviceBytes is the cost model's device memory for an executable of its
// node count (CostModel.ExecBytes).
// A destroyed executable holds nothing.
func (x *exec) DeviceBytes() int64 {
	if x.destroyed.Load() {
		return 0
	}
	return x.dev.cost.execBytes(len(x.nodes))
}

// ExecBytes is what an executable of n nodes holds on this device (its
// DeviceBytes once made): a lane admits misses against its device-byte
// bound on it.
func (d *Device) ExecBytes(nodes int) int64 { return d.cost.execBytes(nodes) }

// execBytes is the device memory of an instantiated and uploaded
// executable of n nodes; a cost model without the figures (the zero-cost
// clock, which costs no time) holds the measured ones: memory is not time.
func (c CostModel) execBytes(n int) int64 {
	if c.ExecBytesBase <= 0 && c.ExecBytesPerNode <= 0 {
		return backend.ExecBytes(n)
	}
	return c.ExecBytesBase + int64(n)*c.ExecBytesPerNode
}
