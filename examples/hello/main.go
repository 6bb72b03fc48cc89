// Command hello is the README's example: one tenant, one kernel, replayed.
package main

import (
	"context"
	"encoding/binary"
	"fmt"
	"log"

	"github.com/lanesched/lanes"
	"github.com/lanesched/lanes/cuda/sim"
)

func main() {
	ctx := context.Background()
	dev, err := sim.New(sim.Config{}) // the real GPU: driver.Open(driver.Config{}), built with -tags cuda
	check(err)
	defer dev.Close()
	srv, err := lanes.Start(ctx, lanes.Config{Devices: []lanes.Device{dev}})
	check(err)
	defer srv.Stop(ctx) // drains: every submission ends exactly once

	buf, err := srv.Alloc(ctx, "tenant-a", lanes.BufferSpec{Size: 4 * 256, Elem: lanes.I32})
	check(err)
	check(srv.Upload(ctx, "tenant-a", buf.Whole(), make([]byte, 4*256))) // device memory starts undefined
	inc, err := lanes.Launch(srv.Kernels(), "inc_i32", lanes.Linear(256, 128), lanes.BufferArg(buf.Whole()), lanes.I32Arg(256))
	check(err)
	step := lanes.Batch{Entries: []lanes.Entry{lanes.Replayed("hello/v1", 0, inc)}}
	for i := range 3 {
		receipt, err := srv.Submit(ctx, "tenant-a", step)
		check(err)
		fmt.Printf("step %d: %s\n", i, receipt.Attribution.Rows[0].Reason) // "replayed", or why it ran eagerly
	}
	out, err := srv.Read(ctx, "tenant-a", buf.Whole())
	check(err)
	fmt.Println("every element is now", binary.LittleEndian.Uint32(out)) // 3
}

func check(err error) {
	if err != nil {
		log.Fatal(lanes.Classify(err).Code, ": ", err)
	}
}
