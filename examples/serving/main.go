// Command serving serves two tenants' steps through *lanes.Server, in this
// process or on lane hosts, by one flag: the serving code is the same.
//
//	go run ./examples/serving            # lanes in this process
//	go run ./examples/serving --hosts 2  # two lane host processes (this binary), through a front
package main

import (
	"context"
	"encoding/binary"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"sync"
	"time"

	"github.com/lanesched/lanes"
	"github.com/lanesched/lanes/cuda/sim"
	"github.com/lanesched/lanes/remote"
	"github.com/lanesched/lanes/remote/hostcmd"
)

// hostEnv makes this binary a lane host (what cmd/lanehost runs), so that
// --hosts needs nothing built beside it.
const hostEnv = "SERVING_LANE_HOST"

func main() {
	if os.Getenv(hostEnv) == "1" {
		os.Exit(hostcmd.Main(hostcmd.Options{}))
	}
	os.Exit(run(os.Args[1:], os.Stdout, os.Stderr))
}

func run(args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("serving", flag.ContinueOnError)
	fs.SetOutput(stderr)
	hosts := fs.Int("hosts", 0, "lane host processes to serve from, each with a simulated device (0: serve in this process)")
	steps := fs.Int("steps", 200, "steps per tenant")
	if err := fs.Parse(args); err != nil {
		return 2
	}
	if *hosts < 0 || *steps < 1 {
		fmt.Fprintln(stderr, "serving: --hosts is 0 or more, --steps 1 or more")
		return 2
	}
	ctx := context.Background()

	// The one value that differs: where the lanes run.
	var cfg lanes.Config
	if *hosts == 0 {
		dev, err := sim.New(sim.Config{})
		if err != nil {
			fmt.Fprintln(stderr, "serving:", err)
			return 1
		}
		defer dev.Close()
		cfg.Devices = []lanes.Device{dev}
	} else {
		exe, err := os.Executable()
		if err != nil {
			fmt.Fprintln(stderr, "serving:", err)
			return 1
		}
		cfg.Hosts = &remote.FrontConfig{}
		for i := range *hosts {
			cfg.Hosts.Processes = append(cfg.Hosts.Processes, remote.HostProcess{Name: fmt.Sprintf("gpu%d", i), Path: exe, Args: []string{"--device", "sim"}, Env: []string{hostEnv + "=1"}})
		}
	}
	srv, err := lanes.Start(ctx, cfg)
	if err != nil {
		fmt.Fprintln(stderr, "serving:", err)
		return 1
	}
	defer srv.Stop(ctx)

	results := serve(ctx, srv, []string{"tenant-a", "tenant-b"}, *steps)
	st := srv.Status()
	where := fmt.Sprintf("in this process (lanes: %d)", st.Total)
	if !st.InProcess {
		where = fmt.Sprintf("on lane hosts (hosts: %d)", st.Total)
	}
	fmt.Fprintf(stdout, "served %s\n", where)
	code := 0
	for _, r := range results {
		if r.err != nil {
			fmt.Fprintf(stdout, "%s: failed: %s: %v\n", r.tenant, lanes.Classify(r.err).Code, r.err)
			code = 1
			continue
		}
		fmt.Fprintf(stdout, "%s: %d steps, %d of %d entries replayed, every element %d (want %d)\n", r.tenant, r.steps, r.replayed, r.entries, r.value, r.steps*kernelsPerStep)
		if r.value != uint32(r.steps*kernelsPerStep) {
			code = 1
		}
	}
	return code
}

const (
	kernelsPerStep = 4
	elements       = 256
)

// result is one tenant's run.
type result struct {
	tenant                   string
	steps, entries, replayed int
	value                    uint32
	err                      error
}

// serve runs each tenant's steps on its own goroutine, two in flight at a
// time, then reads its buffer back: the serving code, the same whichever
// side srv is.
func serve(ctx context.Context, srv *lanes.Server, tenants []string, steps int) []result {
	out := make([]result, len(tenants))
	var wg sync.WaitGroup
	for i, tenant := range tenants {
		wg.Add(1)
		go func() {
			defer wg.Done()
			out[i] = serveTenant(ctx, srv, tenant, steps)
		}()
	}
	wg.Wait()
	return out
}

func serveTenant(ctx context.Context, srv *lanes.Server, tenant string, steps int) result {
	r := result{tenant: tenant}
	var buf lanes.Buffer
	// Retry what says it may succeed later: a host restarting, a full lane.
	if r.err = retry(ctx, func() (err error) {
		buf, err = srv.Alloc(ctx, tenant, lanes.BufferSpec{Size: 4 * elements, Elem: lanes.I32})
		return err
	}); r.err != nil {
		return r
	}
	defer srv.Forget(ctx, tenant)
	if r.err = srv.Upload(ctx, tenant, buf.Whole(), make([]byte, 4*elements)); r.err != nil {
		return r
	}
	var step lanes.Batch
	for k := range kernelsPerStep {
		inc, err := lanes.Launch(srv.Kernels(), "inc_i32", lanes.Linear(elements, 128), lanes.BufferArg(buf.Whole()), lanes.I32Arg(elements))
		if err != nil {
			r.err = err
			return r
		}
		step.Entries = append(step.Entries, lanes.Replayed("serving/v1", k, inc))
	}
	// Two steps in flight: each batch value is the server's until its
	// submission ends, so each in-flight step has its own copy.
	var inFlight []lanes.Pending
	wait := func(p lanes.Pending) error {
		rc, err := p.Result()
		if err != nil {
			return err
		}
		r.steps++
		for _, row := range rc.Attribution.Rows {
			r.entries++
			if row.Replayed {
				r.replayed++
			}
		}
		return nil
	}
	for range steps {
		if len(inFlight) == 2 {
			if r.err = wait(inFlight[0]); r.err != nil {
				return r
			}
			inFlight = inFlight[1:]
		}
		b := lanes.Batch{Entries: append([]lanes.Entry(nil), step.Entries...)}
		var p lanes.Pending
		if r.err = retry(ctx, func() (err error) {
			p, err = srv.SubmitAsync(ctx, tenant, b)
			return err
		}); r.err != nil {
			return r
		}
		inFlight = append(inFlight, p)
	}
	for _, p := range inFlight {
		if r.err = wait(p); r.err != nil {
			return r
		}
	}
	data, err := srv.Read(ctx, tenant, lanes.Region{Buffer: buf, Length: 4})
	if err != nil {
		r.err = err
		return r
	}
	r.value = binary.LittleEndian.Uint32(data)
	return r
}

// retry calls f again while its error says a retry may succeed (overload,
// no host serving yet), for up to 30 seconds.
func retry(ctx context.Context, f func() error) error {
	deadline := time.Now().Add(30 * time.Second)
	for {
		err := f()
		if err == nil || !lanes.Classify(err).Retryable || time.Now().After(deadline) {
			return err
		}
		select {
		case <-ctx.Done():
			return errors.Join(err, ctx.Err())
		case <-time.After(5 * time.Millisecond):
		}
	}
}
