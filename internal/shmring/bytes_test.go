package shmring

import "unsafe"

// unsafeBytes views words as bytes: 8-byte aligned memory, as a mapping
// is.
func unsafeBytes(words []uint64) []byte {
	return unsafe.Slice((*byte)(unsafe.Pointer(&words[0])), 8*len(words))
}
