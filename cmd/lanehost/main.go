// Command lanehost serves one device's lanes to a lanes front through
// protoactor-go's remote: run one per GPU, so a GPU's sticky fault costs
// only that GPU's process.
//
//	lanehost [flags]
//
// With --cluster NAME, --membership and --seeds it is a member of a cluster
// where fronts find it (remote.ClusterConfig), and leaves the membership
// when it stops.
//
// It prints "lanehost: listening on ADDRESS" as its first line (followed
// by "bound ADDRESS" when it advertises another address, and "membership
// ADDRESS" in a cluster: remote.Listening), then serves
// until SIGINT or SIGTERM (or, with --exit-with-stdin, until its standard
// input closes: a front that launched it died or stopped it). Exit status:
// 0 stopped, 1 failed while serving, 2 bad flags or a device that would
// not open, 3 its device was poisoned by a sticky fault (a new process
// must replace it).
//
// To serve library calls of your own (or anything else package hostcmd's
// Options add), build a lanehost of your own around hostcmd.Main.
package main

import (
	"os"

	"github.com/lanesched/lanes/remote/hostcmd"
)

func main() { os.Exit(hostcmd.Main(hostcmd.Options{})) }
