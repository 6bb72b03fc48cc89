// Executing commands on the simulated device: real bytes moved and
// computed, and what each costs on the clock.

package sim

import (
	"errors"
	"fmt"
	"time"

	"github.com/lanesched/lanes/cuda"
	"github.com/lanesched/lanes/cuda/kernels"
	"github.com/lanesched/lanes/internal/backend"
	"github.com/lanesched/lanes/internal/codes"
)

// commandCost is the host and device time of one command, eager or as a
// graph node.
func (d *device) commandCost(c cuda.Command, asNode bool) (host, device time.Duration) {
	cost := d.cost
	switch c.Kind {
	case cuda.KindLaunch, cuda.KindCall:
		host, device = cost.LaunchHost, cost.KernelDevice
		if asNode {
			device = cost.GraphNode
		}
		return host, device + perBytes(backend.CommandBytes(c), cost.MemoryBandwidth)
	case cuda.KindUpload, cuda.KindStageIn, cuda.KindStageOut:
		host, device = cost.TransferHost, cost.TransferDevice
		if asNode {
			device = cost.GraphNode
		}
		return host, device + perBytes(backend.CommandBytes(c), cost.HostBandwidth)
	default:
		host, device = cost.TransferHost, cost.TransferDevice
		if asNode {
			device = cost.GraphNode
		}
		return host, device + perBytes(backend.CommandBytes(c), cost.MemoryBandwidth)
	}
}

// nodesCost is the device time of a graph's nodes.
func (d *device) nodesCost(ns []node) time.Duration {
	var t time.Duration
	for _, n := range ns {
		_, dev := d.commandCost(n.cmd, true)
		t += dev
	}
	return t
}

// uploadCost is the device time of uploading an executable.
func (d *device) uploadCost(ns []node) time.Duration {
	return time.Duration(len(ns)) * d.cost.UploadNode
}

// execute runs the bytes of the nodes, in order; called with execMu held.
// An access outside an allocation, or to a freed buffer, is CUDA's sticky
// illegal address, and stops the work there. A read of memory never
// written (Config.InitCheck) is reported, the first of them, once the
// work ran on: the GPU runs it all.
func (d *device) execute(ns []node) error {
	var report error
	for _, n := range ns {
		err := d.executeCommand(n.cmd)
		if err == nil {
			continue
		}
		if _, ok := err.(*UninitializedReadError); !ok {
			return err
		}
		if report == nil {
			report = err
		}
	}
	return report
}

// executeCommand runs one command's bytes, checked under InitCheck: the
// one place every command runs, eager or a graph's node.
func (d *device) executeCommand(c cuda.Command) error {
	if d.initCheck {
		return d.executeChecked(c)
	}
	return d.executeBytes(c)
}

// executeBytes runs one command's bytes.
func (d *device) executeBytes(c cuda.Command) error {
	switch c.Kind {
	case cuda.KindLaunch, cuda.KindCall:
		return d.runCompute(c, d.regionMemory)
	case cuda.KindUpload:
		m, err := d.regionMemory(c.Dst)
		if err == nil {
			copy(m[:c.Dst.Length], c.Host)
		}
		return err
	case cuda.KindCopy:
		dst, err := d.regionMemory(c.Dst)
		if err != nil {
			return err
		}
		src, err := d.regionMemory(c.Src)
		if err == nil {
			copy(dst[:c.Dst.Length], src[:c.Src.Length])
		}
		return err
	case cuda.KindZero:
		m, err := d.regionMemory(c.Dst)
		if err == nil {
			clear(m[:c.Dst.Length])
		}
		return err
	case cuda.KindStageIn, cuda.KindStageOut:
		d.mu.Lock()
		host, ok := d.hosts.Entry(c.Staging.Buffer.ID)
		d.mu.Unlock()
		if !ok {
			return backend.DriverError("memcpy", codes.IllegalAddress, "host staging was freed before the copy that uses it ran; the device is poisoned")
		}
		staging := host[c.Staging.Offset:c.Staging.End()]
		if c.Kind == cuda.KindStageIn {
			m, err := d.regionMemory(c.Dst)
			if err == nil {
				copy(m[:c.Dst.Length], staging)
			}
			return err
		}
		m, err := d.regionMemory(c.Src)
		if err == nil {
			copy(staging, m[:c.Src.Length])
		}
		return err
	}
	return backend.DriverError("execute", codes.InvalidValue, "unknown command kind")
}

// runCompute runs a launch's kernel reference, or a library call's, on the
// memory view gives each of its regions: the device's own (regionMemory),
// or a scratch copy of it (an InitCheck probe).
func (d *device) runCompute(c cuda.Command, view func(cuda.Region) (kernels.Memory, error)) error {
	if c.Kind == cuda.KindCall {
		return d.runCall(c.LibraryCall, view)
	}
	k, ok := d.kernels()[c.Kernel]
	if !ok {
		return backend.DriverError("kernel", codes.NotFound, "kernel "+c.Kernel+" vanished from the registry")
	}
	// The run's memory views and its own copy of the arguments (a body
	// that writes them changes no replay) reuse the device's scratch:
	// execMu is held, and a body keeps neither past its return.
	mem := d.memScratch[:0]
	for _, a := range c.Args {
		if a.Kind != cuda.ParamBuffer {
			continue
		}
		m, err := view(a.Region)
		if err != nil {
			clear(mem)
			return err
		}
		mem = append(mem, m)
	}
	args := append(d.argScratch[:0], c.Args...)
	d.memScratch, d.argScratch = mem, args
	err := backend.RunCall("kernel", codes.LaunchFailed, "kernel", c.Kernel, func() error { return k.Run(c.Config, mem, args) })
	clear(mem) // drop the views: the memory may be freed
	if errors.Is(err, kernels.ErrIllegalAddress) {
		return backend.DriverError("kernel", codes.IllegalAddress,
			fmt.Sprintf("kernel %s accessed memory outside its allocation; the device is poisoned, open a new one", c.Kernel))
	}
	return err
}

// runCall runs a library call's Reference on its regions' bytes. Its
// failure is the work failing on the device, as a faulting kernel's is:
// an access outside an allocation is the sticky illegal address, any other
// error or a panic a launch failure (sticky too: CUDA cannot tell what the
// failed work left behind).
func (d *device) runCall(lc *cuda.LibraryCall, view func(cuda.Region) (kernels.Memory, error)) error {
	mem := make([][]byte, len(lc.Regions))
	for i, t := range lc.Regions {
		m, err := view(t.Region)
		if err != nil {
			return err
		}
		mem[i] = m[:t.Region.Length:t.Region.Length]
	}
	err := backend.RunCall("call", codes.LaunchFailed, "library call", lc.Name, func() error { return lc.Reference(mem) })
	if err != nil && errors.Is(err, kernels.ErrIllegalAddress) {
		return backend.DriverError("call", codes.IllegalAddress, fmt.Sprintf("library call %q touched memory outside its regions' allocations; the device is poisoned", lc.Name))
	}
	return err
}

// regionMemory returns the bytes from r's start to the end of its allocation; a
// buffer freed since the command was enqueued is an illegal address.
func (d *device) regionMemory(r cuda.Region) (kernels.Memory, error) {
	d.mu.Lock()
	a, ok := d.buffers.Entry(r.Buffer.ID)
	d.mu.Unlock()
	if !ok || a.buf != r.Buffer {
		return nil, backend.DriverError("kernel", codes.IllegalAddress,
			fmt.Sprintf("buffer %d was freed before work that uses it ran; the device is poisoned", r.Buffer.ID))
	}
	return a.bytes[r.Offset:], nil
}
