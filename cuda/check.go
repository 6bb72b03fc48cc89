// Checks every backend shares: a buffer, event or executable handle is
// live, of this device, and not forged.

package cuda

// The checks every backend makes at its boundary, in one place so the
// simulator and the driver reject the same input with the same error.

// CallValidator is implemented by a device's Kernels when the device
// cannot run every library call (the simulated device runs a call only
// through its Reference): ValidateFor asks it about each call, so a batch
// is refused before any of it is enqueued.
type CallValidator interface {
	ValidateCall(op string, c *LibraryCall) error
}

// ValidateFor checks a command against a device before it is enqueued:
// its structure, its kernel (by the device's registry) or library call,
// and every buffer it names (through lookup).
func ValidateFor(op string, cmd Command, kernels Kernels, lookup func(Buffer) error) error {
	if cv, ok := kernels.(CallValidator); ok && cmd.Kind == KindCall && cmd.LibraryCall != nil {
		if err := cv.ValidateCall(op, cmd.LibraryCall); err != nil {
			return err
		}
	}
	if cmd.Kind == KindLaunch {
		spec, ok := kernels.Kernel(cmd.Kernel)
		if !ok {
			return contractf(op, ErrUnknownKernel, "kernel %q is not loaded on this device", cmd.Kernel)
		}
		if err := cmd.ValidateLaunch(&spec); err != nil {
			return err
		}
	} else if err := cmd.Validate(); err != nil {
		return err
	}
	return cmd.ForRegions(func(r Region) error { return lookup(r.Buffer) })
}
