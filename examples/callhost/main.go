// Command callhost is a lane host of your own: the stock lanehost (the
// same flags, see cmd/lanehost), serving the library call "axpy" by name
// (package axpy), so that a front's batch with axpy.Command runs on it as
// it runs in one process: its Go reference on the simulated device,
// cuBLAS's cublasSaxpy on the GPU (built with the cuda tag).
//
//	go build -o bin/callhost ./examples/callhost
//	bin/callhost --device sim
//	scripts/build-cuda.sh test-binaries bin   # bin/callhost --device cuda
//
// A front then connects to the address it prints, as to any lane host.
package main

import (
	"os"

	"github.com/lanesched/lanes/examples/callhost/axpy"
	"github.com/lanesched/lanes/remote"
	"github.com/lanesched/lanes/remote/hostcmd"
)

// options are what this host adds to the stock lanehost.
func options() hostcmd.Options {
	return hostcmd.Options{Calls: remote.LibraryCalls{axpy.Name: axpy.Build}, Setup: axpy.Setup}
}

func main() { os.Exit(hostcmd.Main(options())) }
