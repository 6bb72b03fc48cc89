// Checks every backend shares: a buffer, event or executable handle is
// live, of this device, and not forged.

package cuda

// The checks every backend makes at its boundary, in one place so the
// simulator and the driver reject the same input with the same error.

// CheckBuffer checks that b is a buffer of device instance inst and is the
// very value the device handed out for its id (have, when found).
func CheckBuffer(op string, inst uint64, b Buffer, have Buffer, found bool) error {
	switch {
	case b.Device != inst:
		return contractf(op, ErrForeignHandle, "buffer %d belongs to device instance %d, not %d; allocate it on this device", b.ID, b.Device, inst)
	case !found:
		return contractf(op, ErrStaleHandle, "buffer %d is not allocated (freed, or never handed out by this device)", b.ID)
	case have != b:
		return contractf(op, ErrStaleHandle, "buffer %d does not match its allocation (%+v); use the Buffer value Alloc returned", b.ID, have)
	}
	return nil
}

// CheckEvent checks an event handle: one released (Event.Release) is
// stale, whatever its stream did with the event since.
func CheckEvent(op string, released bool) error {
	if released {
		return contractf(op, ErrStaleHandle, "the event was released; record a new one")
	}
	return nil
}

// CheckExec checks an executable handle: mine says whether it was
// instantiated on this device instance, destroyed whether it was destroyed
// since.
func CheckExec(op string, inst uint64, mine, destroyed bool) error {
	switch {
	case !mine:
		return contractf(op, ErrForeignHandle, "the executable was not instantiated on device %d", inst)
	case destroyed:
		return contractf(op, ErrStaleHandle, "the executable was destroyed; instantiate the graph again")
	}
	return nil
}

// CallValidator is implemented by a device's Kernels when the device
// cannot run every library call (the simulated device runs a call only
// through its Reference): ValidateFor asks it about each call, so a batch
// is refused before any of it is enqueued.
type CallValidator interface {
	ValidateCall(op string, c *LibraryCall) error
}

// ValidateEnqueue is a stream's check of a command it is given:
// [ValidateFor], and no call of a Library that no lane bound (see
// [LibraryCall.CheckBound]).
func ValidateEnqueue(op string, cmd Command, kernels Kernels, lookup func(Buffer) error) error {
	if cmd.Kind == KindCall && cmd.LibraryCall != nil {
		if err := cmd.LibraryCall.CheckBound(op); err != nil {
			return err
		}
	}
	return ValidateFor(op, cmd, kernels, lookup)
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
