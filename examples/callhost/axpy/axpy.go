// Package axpy is a library call a lane host of your own serves by name:
// y = a·x + y over float32 regions. A front builds the command
// (Command) as it would in one process; the host rebuilds the call from
// what crossed (Build, in remote.HostConfig.Calls). Both come from Build,
// so the two agree.
//
// The call gives its Go reference (the simulated device runs it) and,
// built with the cuda tag, Enqueue: cuBLAS's cublasSaxpy on the stream it
// is given, with libcublas loaded at run time and its handle made by
// Setup before the host serves (a handle made in Enqueue would allocate
// during a capture).
package axpy

import (
	"encoding/binary"
	"fmt"
	"math"

	"github.com/lanesched/lanes/cuda"
)

// Name is the call's name: the host serves it under this name.
const Name = "axpy"

// Command is y = a·x + y as a library-call command.
func Command(x, y cuda.Region, a float32) (cuda.Command, error) {
	regions := []cuda.Touch{{Region: x, Access: cuda.AccessRead}, {Region: y, Access: cuda.AccessReadWrite}}
	params := binary.LittleEndian.AppendUint32(nil, math.Float32bits(a))
	lc, err := Build(regions, params)
	if err != nil {
		return cuda.Command{}, err
	}
	lc.Name, lc.Regions, lc.Params = Name, regions, params
	return cuda.Call(lc)
}

// Build is the call from its regions (x read, y read and written, of one
// length) and its parameters (a, a little-endian float32): a
// remote.CallBuilder.
func Build(regions []cuda.Touch, params []byte) (*cuda.LibraryCall, error) {
	switch {
	case len(regions) != 2 || len(params) != 4:
		return nil, fmt.Errorf("axpy takes regions x and y and 4 parameter bytes (a); got %d regions, %d bytes", len(regions), len(params))
	case regions[0].Region.Length != regions[1].Region.Length || regions[0].Region.Length%4 != 0:
		return nil, fmt.Errorf("axpy: x of %d bytes, y of %d: give two regions of the same whole number of float32s", regions[0].Region.Length, regions[1].Region.Length)
	case regions[1].Access != cuda.AccessReadWrite:
		return nil, fmt.Errorf("axpy writes y: declare it AccessReadWrite")
	}
	a := math.Float32frombits(binary.LittleEndian.Uint32(params))
	return &cuda.LibraryCall{Enqueue: enqueue(regions[0].Region, regions[1].Region, a), Reference: func(mem [][]byte) error {
		x, y := mem[0], mem[1]
		for i := 0; i+4 <= len(x) && i+4 <= len(y); i += 4 {
			v := a*math.Float32frombits(binary.LittleEndian.Uint32(x[i:])) + math.Float32frombits(binary.LittleEndian.Uint32(y[i:]))
			binary.LittleEndian.PutUint32(y[i:], math.Float32bits(v))
		}
		return nil
	}}, nil
}
