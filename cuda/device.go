// The device a user holds: Device, DeviceInfo and Bound.

package cuda

// Device is one device instance: a GPU's primary context, or a simulated
// device (make one with sim.New or driver.Open, hand it to lanes.Config's
// Devices). Every buffer it hands out carries its instance id and is
// rejected by any other instance. What a lane needs beyond these methods
// (streams, graphs, executables) is the backends' own: both backends
// implement it, and a Device from elsewhere is refused when a lane starts.
//
// A device is poisoned by a sticky error (an illegal address in a kernel,
// say): from then on [Device.Err] returns that error and every call that
// touches the device fails with it, as CUDA's context does.
type Device interface {
	// BindThread prepares the calling goroutine to call into the device: it
	// locks the goroutine to its OS thread and makes the device's context
	// current there. The returned function unlocks the thread. Call the
	// device's own methods (Alloc, Free, AllocHost, ...) between the two, or through
	// [Bound]. Calls from an unbound thread fail with ErrThreadNotBound
	// where the backend can tell.
	BindThread() (unbind func(), err error)
	// Info describes the device.
	Info() DeviceInfo
	// Kernels resolves the kernels this device can launch.
	Kernels() Kernels
	// Alloc allocates a buffer. Out of memory is retryable.
	Alloc(spec BufferSpec) (Buffer, error)
	// Free releases a buffer. Like cuMemFree it first waits for the device's
	// outstanding work.
	Free(b Buffer) error
	// Memory reports the device's memory accounting.
	Memory() MemoryStats
	// Err returns the sticky error that poisoned the device, or nil.
	Err() error
	// Close waits for outstanding work, releases every resource and makes
	// the device unusable. A second Close returns nil.
	Close() error
	// HostMemory is pinned host memory: staging that commands read and
	// write while they run (StageIn and StageOut in a batch).
	HostMemory
}

// DeviceInfo describes a device.
type DeviceInfo struct {
	Instance    uint64 // unique per device instance in this process
	Ordinal     int    // the device's ordinal (cuDeviceGet)
	Name        string // e.g. "NVIDIA H200" or "sim"
	Backend     string // "sim" or "driver"
	TotalMemory uint64 // bytes
}

// Bound runs fn on a goroutine locked to a thread bound to dev (its
// BindThread), waits for it and returns its error: the way to call a
// device's own methods (Alloc, Free, ...) from code
// that is not a lane's. A failure to bind is returned and fn does not run.
func Bound(dev Device, fn func() error) error {
	done := make(chan error, 1)
	go func() {
		unbind, err := dev.BindThread()
		if err != nil {
			done <- err
			return
		}
		defer unbind()
		done <- fn()
	}()
	return <-done
}
