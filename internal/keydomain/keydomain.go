// Package keydomain holds what package cache's provider keys and the
// discovery's bound keys must agree on, byte for byte: the domain
// separators and the tag of an element type.
package keydomain

import "github.com/lanesched/lanes/cuda"

// Domain separators: a command key can never equal a segment key, nor a
// key of another format version.
const (
	Command = "lanes.cuda.command-replay.v1\x00"
	Segment = "lanes.cuda.executable-segment.v1\x00"
)

// ElementTag is the stable one-byte tag of an element type in keys.
func ElementTag(t cuda.ElementType) byte { return byte(t) - 1 }
