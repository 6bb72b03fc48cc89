// The bounds of a command on the wire.

package cuda

// Wire limits, so a decoder never allocates more than the input justifies.
const (
	MaxKernelName = 256
	MaxArgs       = 64
)
