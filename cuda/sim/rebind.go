// In-place parameter updates of the simulated device's executables, and
// the device memory an executable holds.

package sim

import (
	"time"

	"github.com/lanesched/lanes/cuda"
	"github.com/lanesched/lanes/internal/backend"
)

// Rebind gives the executable's nodes cmds' parameters, as
// cuGraphExecKernelNodeSetParams, cuGraphExecMemcpyNodeSetParams and
// cuGraphExecMemsetNodeSetParams on each node: one command per node, in
// capture order, each of the kind its node was captured from and
// validated as Enqueue validates it. A FaultUpdateReject rule refuses it
// as the device would. Launches already enqueued keep the nodes they were
// launched with: while one holds them, the executable takes a new node
// list rather than change the one it holds.
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
	args := 0
	for i := range x.nodes {
		if k := x.nodes[i].cmd.Kind; k != cmds[i].Kind {
			return backend.RebindKindMismatch(i, k, cmds[i].Kind)
		}
		args += len(cmds[i].Args)
	}
	// A step names a few buffers many times: each is looked up once.
	var seen [8]cuda.Buffer
	nseen := 0
	lookup := func(b cuda.Buffer) error {
		for i := range nseen {
			if seen[i] == b {
				return nil
			}
		}
		if _, err := d.lookup(op, b); err != nil {
			return err
		}
		if nseen < len(seen) {
			seen[nseen] = b
			nseen++
		}
		return nil
	}
	for i := range cmds {
		cmd := &cmds[i]
		if cmd.Kind == cuda.KindStageIn || cmd.Kind == cuda.KindStageOut {
			if _, err := d.hostLookup(op, cmd.Staging.Buffer); err != nil {
				return err
			}
		}
		if backend.CheckedLike(cmd, &x.nodes[i].cmd) && backend.CheckRegions(cmd, lookup) {
			continue // the node's checks hold for it but its buffers', which passed
		}
		if err := backend.ValidateEnqueue(op, *cmd, kernelView{d.kernels()}, lookup); err != nil {
			return err
		}
	}
	x.scratch = x.scratch[:0]
	for i := range cmds {
		if k, ok := kernelOf(&cmds[i]); ok {
			x.scratch = append(x.scratch, k)
		}
	}
	d.mu.Lock()
	refused := d.fire(FaultUpdateReject, x.scratch)
	d.mu.Unlock()
	if refused {
		return &backend.RebindRefusedError{Refusal: backend.RebindDeviceRefused, Node: 0, Detail: "injected update refusal"}
	}
	d.clock.spin(time.Duration(len(cmds)) * d.cost.RebindNode)
	if x.idle() {
		// No launch holds the nodes any more: they take the new
		// parameters where they are (a serving loop rebinds at every step
		// of a tenant beyond the cache, and allocates nothing).
		for i := range cmds {
			backend.KeepRebound(&x.nodes[i].cmd, &cmds[i])
		}
		x.refresh()
		return nil
	}
	// A launch in flight holds the nodes: new ones, in one allocation for
	// the nodes and one for all their arguments.
	ns := make([]node, len(cmds))
	frozenArgs := make([]cuda.Arg, 0, args)
	for i, cmd := range cmds {
		if len(cmd.Args) > 0 {
			n := len(frozenArgs)
			frozenArgs = append(frozenArgs, cmd.Args...)
			cmd.Args = frozenArgs[n:len(frozenArgs):len(frozenArgs)]
		}
		ns[i] = node{cmd: cmd}
	}
	x.takeNodes(ns)
	return nil
}

// idle reports whether every launch of the executable has finished (the
// worker retired it), so nothing holds its nodes.
func (x *exec) idle() bool {
	s := x.lastStream
	if x.launchedOn > 1 {
		return false // launched on more than one stream: not tracked
	}
	if s == nil {
		return true
	}
	s.mu.Lock()
	done := s.doneSeq >= x.lastSeq
	s.mu.Unlock()
	return done
}

// launched notes a launch of the executable, item seq on s (idle).
func (x *exec) launched(s *stream, seq uint64) {
	if x.lastStream != s {
		if x.lastStream != nil && x.launchedOn < 2 {
			x.launchedOn++
		}
		if x.launchedOn == 0 {
			x.launchedOn = 1
		}
		x.lastStream = s
	}
	x.lastSeq = seq
}

// DeviceBytes is the cost model's device memory for an executable of its
// node count (costModel.ExecBytes).
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
func (d *device) ExecBytes(nodes int) int64 { return d.cost.execBytes(nodes) }

// execBytes is the device memory of an instantiated and uploaded
// executable of n nodes; a cost model without the figures (the zero-cost
// clock, which costs no time) holds the measured ones: memory is not time.
func (c costModel) execBytes(n int) int64 {
	if c.ExecBytesBase <= 0 && c.ExecBytesPerNode <= 0 {
		return backend.ExecBytes(n)
	}
	return c.ExecBytesBase + int64(n)*c.ExecBytesPerNode
}
