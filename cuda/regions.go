// What a command touches: its regions, with how, and the bytes it moves.

package cuda

// Touch is one region a command touches, with how.
type Touch struct {
	Region Region
	Access Access
}
