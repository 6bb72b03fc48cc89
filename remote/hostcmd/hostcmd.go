// Package hostcmd is the lanehost command, to build a lane host of your
// own: the stock lanehost's flags and behaviour (see cmd/lanehost), and
// what Options adds, such as the library calls the host serves by name
// (remote.HostConfig.Calls). A host of your own is one line of main:
//
//	func main() { os.Exit(hostcmd.Main(hostcmd.Options{Calls: remote.LibraryCalls{"axpy": axpy.Build}})) }
//
// (examples/callhost is one, with its test).
package hostcmd

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"os"
	"os/signal"
	"strings"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/lanesched/lanes/actors"
	"github.com/lanesched/lanes/cuda"
	"github.com/lanesched/lanes/cuda/kernels"
	"github.com/lanesched/lanes/cuda/sim"
	"github.com/lanesched/lanes/internal/profiling"
	"github.com/lanesched/lanes/remote"
	"github.com/lanesched/lanes/remote/internal/cluster"
	"github.com/lanesched/lanes/remote/internal/host"
	"github.com/lanesched/lanes/remote/internal/system"
)

// options are lanehost's flags.
type options struct {
	device, listen, name, clock string
	ordinal, lanes              int
	heartbeat, spin             time.Duration
	tlsCert, tlsKey, tlsCA      string
	tokenFile                   string
	cpuProfile                  string
	maxFronts, maxInFlight      int
	leaveTimeout, silentFront   time.Duration
	advertise                   string
	execTrace                   string
	exitWithStdin, faultKernels bool
	noDataPlane                 bool
	uploadArea                  int
	keepPoisoned                bool
	protocol                    uint
	maxTemplates                int
	clusterName, membership     string
	membershipFD                int
	seeds                       []string
	clusterRefresh              time.Duration
}

// openers open a device by --device name; the cuda build tag adds "cuda".
var openers = map[string]func(o options) (cuda.Device, error){
	"sim": func(o options) (cuda.Device, error) {
		clock := sim.ClockRealTime
		if o.clock == "zero" {
			clock = sim.ClockZeroCost
		}
		var ks kernels.Registry
		if o.faultKernels {
			ks = kernels.Builtin().With(kernels.FaultInjection())
		}
		return sim.New(sim.Config{Clock: clock, Ordinal: o.ordinal, Kernels: ks})
	},
}

// Options are what a lane host of your own adds to the stock lanehost.
type Options struct {
	// Calls are the library calls the host serves, by name
	// (remote.HostConfig.Calls).
	Calls remote.LibraryCalls
	// Modules are modules of one's own kernels the host loads on its
	// device as it starts (remote.HostConfig.Modules), with their Go
	// references for the simulated device: a front that sends the same
	// modules (remote.FrontConfig.Modules) is served.
	Modules []kernels.Module
	// Setup, when set, runs once after the device opens and before the
	// host serves, on a goroutine bound to the device (its context
	// current on the real device): make a library's state there (a cuBLAS
	// handle, say), never in a call's Enqueue, which may run during a
	// capture, where an allocation invalidates it. Its error ends the
	// host before it serves (exit status 2).
	Setup func(dev cuda.Device) error
}

// Main runs the lanehost command with the process's arguments and
// standard files, and returns its exit status (see cmd/lanehost): give it
// to os.Exit.
func Main(opts Options) int { return Run(os.Args[1:], os.Stdin, os.Stdout, os.Stderr, opts) }

// Run runs the lanehost command with args (without the program's name)
// and returns its exit status.
func Run(args []string, stdin io.Reader, stdout, stderr io.Writer, opts Options) int {
	o, err := parse(args, stderr)
	if errors.Is(err, flag.ErrHelp) {
		return 0
	}
	if err != nil {
		fmt.Fprintf(stderr, "lanehost: %v (see --help)\n", err)
		return 2
	}
	open, ok := openers[o.device]
	if !ok {
		fmt.Fprintf(stderr, "lanehost: --device %s: this build serves %s (the cuda device needs a build with the cuda tag: scripts/build-cuda.sh)\n", o.device, names())
		return 2
	}
	dev, err := open(o)
	if err != nil {
		fmt.Fprintf(stderr, "lanehost: open the %s device %d: %v\n", o.device, o.ordinal, err)
		return 2
	}
	if opts.Setup != nil {
		if err := setUp(dev, opts.Setup); err != nil {
			fmt.Fprintf(stderr, "lanehost: set up the %s device %d: %v\n", o.device, o.ordinal, err)
			return 2
		}
	}
	if o.heartbeat == 0 {
		o.heartbeat = host.DefaultHeartbeat // as HostConfig takes 0
	}
	cfg := remote.HostConfig{Name: o.name, Address: o.listen, Calls: opts.Calls, Modules: opts.Modules, TokenFile: o.tokenFile, Heartbeat: o.heartbeat, Protocol: uint32(o.protocol), MaxTemplates: o.maxTemplates,
		MaxFronts: o.maxFronts, SilentFront: o.silentFront, Advertise: o.advertise, NoDataPlane: o.noDataPlane, UploadAreaBytes: o.uploadArea,
		Scheduler: actors.Config{Devices: []cuda.Device{dev}, LanesPerDevice: o.lanes, Spin: o.spin, MaxInFlightPerLane: o.maxInFlight},
		Logf:      func(format string, a ...any) { fmt.Fprintf(stderr, "lanehost: "+format+"\n", a...) }}
	if o.clusterName != "" {
		cfg.Cluster = &remote.ClusterConfig{Name: o.clusterName, Seeds: o.seeds, Membership: o.membership, Refresh: o.clusterRefresh}
		if o.membershipFD > 0 {
			f := os.NewFile(uintptr(o.membershipFD), "membership")
			ln, err := net.FileListener(f)
			_ = f.Close() // FileListener keeps a copy of its own
			if err != nil {
				_ = dev.Close()
				fmt.Fprintf(stderr, "lanehost: --membership-fd %d: not a listening socket this process inherited: %v\n", o.membershipFD, err)
				return 2
			}
			cfg.Cluster.MembershipListener = ln
		}
	}
	if o.tlsCert != "" || o.tlsKey != "" || o.tlsCA != "" {
		if cfg.TLS, err = remote.LoadTLS(o.tlsCert, o.tlsKey, o.tlsCA); err != nil {
			_ = dev.Close()
			fmt.Fprintf(stderr, "lanehost: %v\n", err)
			return 2
		}
	}
	stopProfile, err := profiling.Start(o.cpuProfile, o.execTrace)
	if err != nil {
		_ = dev.Close()
		fmt.Fprintf(stderr, "lanehost: %v\n", err)
		return 2
	}
	defer stopProfile()
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	h, err := remote.Serve(ctx, cfg)
	if err != nil {
		_ = dev.Close()
		fmt.Fprintf(stderr, "lanehost: %v\n", err)
		return 2
	}
	fmt.Fprintln(stdout, h.Listening())
	if o.exitWithStdin {
		go func() {
			_, _ = io.Copy(io.Discard, stdin)
			stop()
		}()
	}
	var status atomic.Int32
	if !o.keepPoisoned {
		go leaveWhenPoisoned(ctx, h, o.heartbeat, stderr, func() { status.Store(3); stop() })
	}
	<-ctx.Done()
	if status.Load() == 0 && o.leaveTimeout > 0 {
		leave(h, o.leaveTimeout, stderr)
	}
	sctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := h.Stop(sctx); err != nil && status.Load() == 0 {
		fmt.Fprintf(stderr, "lanehost: stop: %v\n", err)
		return 1
	}
	return int(status.Load())
}

// leave leaves well (remote.Host.Leave): no new work, what is in flight
// finished, the fronts told; a second signal, or the timeout, cuts it
// short.
func leave(h *remote.Host, timeout time.Duration, stderr io.Writer) {
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	again := make(chan os.Signal, 1)
	signal.Notify(again, os.Interrupt, syscall.SIGTERM)
	defer signal.Stop(again)
	go func() {
		select {
		case <-again:
			cancel()
		case <-ctx.Done():
		}
	}()
	if err := h.Leave(ctx); err != nil {
		fmt.Fprintf(stderr, "lanehost: leave: %v (stopping anyway: what is left ends indeterminate)\n", err)
	}
}

// leaveWhenPoisoned checks the host's devices every heartbeat: a poisoned
// device stays poisoned for the life of the process, so the host reports
// it in a heartbeat or two, then leaves (status 3), to be replaced.
func leaveWhenPoisoned(ctx context.Context, h *remote.Host, every time.Duration, stderr io.Writer, leave func()) {
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		select {
		case <-t.C:
		case <-ctx.Done():
			return
		}
		if err := h.DeviceFault(); err != nil {
			fmt.Fprintf(stderr, "lanehost: %v: exiting (status 3) to be replaced\n", err)
			time.Sleep(2 * every)
			leave()
			return
		}
	}
}

func names() string {
	var n []string
	for k := range openers {
		n = append(n, k)
	}
	return strings.Join(n, ", ")
}

func parse(args []string, stderr io.Writer) (options, error) {
	var o options
	fs := flag.NewFlagSet("lanehost", flag.ContinueOnError)
	fs.SetOutput(io.Discard) // a bad flag is said once, by the caller; --help prints the usage below
	fs.StringVar(&o.device, "device", "sim", "the device to serve: sim, or cuda (a build with the cuda tag)")
	fs.IntVar(&o.ordinal, "ordinal", 0, "the GPU's ordinal (cuda), or the simulated device's")
	fs.StringVar(&o.listen, "listen", system.DefaultAddress, "the address to serve on; any address not loopback needs --tls-cert, --tls-key and --tls-ca")
	fs.StringVar(&o.name, "name", "", "the host's name in its front's reports (default host-PID)")
	fs.IntVar(&o.lanes, "lanes", 4, "lanes (streams) on the device")
	fs.DurationVar(&o.heartbeat, "heartbeat", host.DefaultHeartbeat, "how often the host tells its front it is alive (0 means the default too)")
	fs.DurationVar(&o.spin, "spin", 0, "how a lane waits for its fences (actors.Config.Spin): 0 spins only while a fence is due, from what the lane measured of its steps, within a quarter of the CPUs; a window such as 500us keeps polling and spinning for work that long after progress or a run of its messages (a core per busy lane); negative (-1ns) never spins; default "+actors.GPUSpin.String()+" with --device cuda on 8 CPUs or more, else 0")
	fs.StringVar(&o.clock, "sim-clock", "real", "the simulated device's clock: real (kernels take modelled time) or zero")
	fs.StringVar(&o.tlsCert, "tls-cert", "", "this host's certificate (PEM), for mutual TLS")
	fs.StringVar(&o.tlsKey, "tls-key", "", "its key (PEM)")
	fs.StringVar(&o.tlsCA, "tls-ca", "", "the CA that signed the fronts' certificates (PEM)")
	fs.StringVar(&o.tokenFile, "token-file", "", "without TLS: the token this host and its fronts derive their credentials from (never sent), a file only this user may read (default $LANES_TOKEN_FILE, else $XDG_RUNTIME_DIR/lanes/token, else ~/.config/lanes/token; made when missing)")
	fs.BoolVar(&o.exitWithStdin, "exit-with-stdin", false, "stop when standard input closes (a front that launched the host adds it)")
	fs.BoolVar(&o.faultKernels, "fault-kernels", false, "also serve kernels that skip their bounds checks (poke_i32), to provoke a real device fault; never where tenants you do not control reach the host")
	fs.BoolVar(&o.keepPoisoned, "keep-poisoned", false, "keep serving after a sticky device fault (default: exit with status 3 to be replaced)")
	fs.IntVar(&o.maxTemplates, "max-templates", 0, "templated batches kept per registration (0: 16384)")
	fs.DurationVar(&o.leaveTimeout, "leave-timeout", 30*time.Second, "on SIGINT, SIGTERM or (with --exit-with-stdin) standard input closed: leave well first, taking no new work and finishing what is in flight, for at most this long (a second signal cuts it short; 0: stop at once)")
	fs.StringVar(&o.advertise, "advertise", "", "the address fronts reach this host at, when it is not --listen (a NAT, a port mapping, a proxy); not loopback requires TLS")
	fs.IntVar(&o.maxFronts, "max-fronts", host.DefaultMaxFronts, "the most fronts served at once; one more is refused with the reason")
	fs.BoolVar(&o.noDataPlane, "no-data-plane", false, "offer fronts on this machine no shared-memory data plane: all traffic through the remote (gRPC), to compare")
	fs.IntVar(&o.uploadArea, "upload-area", 0, "bytes of each data plane's upload area, whole 4096-byte pages up to 1 GiB, where fronts write uploads of 4 KiB or more instead of sending them through the ring (0: dataplane.DefaultUploadAreaBytes, 16 MiB; -1: none)")
	fs.DurationVar(&o.silentFront, "silent-front", host.DefaultSilentFront, "a front that sent nothing for this long (stopped, hung) gives its place to a new front that finds the host full")
	fs.IntVar(&o.maxInFlight, "max-in-flight-per-lane", 0, "admission, across every front: the submissions in flight one tenant may fill a lane with (0: the scheduler's default, 256); past its share a submission is refused as overloaded, and a lane holds up to three times this from many tenants (actors.Config.MaxInFlightPerLane)")
	fs.StringVar(&o.cpuProfile, "cpuprofile", "", "write a CPU profile of the whole run to this file (pprof); %p in the name is the process id")
	fs.StringVar(&o.execTrace, "exectrace", "", "write a Go execution trace of the whole run to this file (go tool trace); %p in the name is the process id")
	fs.StringVar(&o.clusterName, "cluster", "", "join the named cluster (the automanaged provider), where fronts find this host; with --membership and --seeds")
	fs.StringVar(&o.membership, "membership", "", "with --cluster: this host's membership endpoint (host:port, plain HTTP that says who the host is; loopback unless TLS); one of --seeds")
	fs.IntVar(&o.membershipFD, "membership-fd", 0, "with --cluster: serve the membership endpoint on this inherited listening socket (a file descriptor, 3 or more: from systemd's socket activation, or a supervisor that holds the port since it handed out the seeds); --membership then defaults to its address")
	fs.Func("seeds", "with --cluster: every host's membership endpoint, comma-separated (host:port,...), this one's included; fronts are given the same list", func(v string) error {
		for _, s := range strings.Split(v, ",") {
			if s = strings.TrimSpace(s); s == "" {
				return fmt.Errorf("an empty entry in %q: give host:port,host:port and so on", v)
			}
			o.seeds = append(o.seeds, s)
		}
		return nil
	})
	fs.DurationVar(&o.clusterRefresh, "cluster-refresh", cluster.DefaultRefresh, "with --cluster: how often the membership endpoints are checked")
	fs.UintVar(&o.protocol, "protocol", 0, "claim another wire protocol version at registration (0: this build's); only to see a front refuse it")
	fs.Usage = func() {} // the flag package calls it for a bad flag too: said once, by the caller
	usage := func() {
		fs.SetOutput(stderr)
		fmt.Fprintf(stderr, "Usage: lanehost [flags]\n\nServes one device's lanes to a lanes front (remote.StartFront, lanedemo --host-per-gpu).\nPrints \"lanehost: listening on ADDRESS [bound ADDRESS] [membership ADDRESS]\" first (the address fronts dial: --advertise if given; where it is bound when that differs; its membership endpoint with --cluster). Exit status: 0 stopped, 1 failed while serving, 2 bad flags or device, 3 device poisoned.\n\n")
		fs.PrintDefaults()
	}
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			usage()
		}
		return o, err
	}
	set := map[string]bool{}
	fs.Visit(func(f *flag.Flag) { set[f.Name] = true })
	switch {
	case fs.NArg() > 0:
		return o, fmt.Errorf("unexpected argument %q", fs.Arg(0))
	case o.lanes < 1 || o.lanes > actors.MaxLanesPerDevice:
		return o, fmt.Errorf("--lanes %d: give 1 to %d", o.lanes, actors.MaxLanesPerDevice)
	case o.ordinal < 0:
		return o, fmt.Errorf("--ordinal %d: give 0 or more", o.ordinal)
	case o.clock != "real" && o.clock != "zero":
		return o, fmt.Errorf("--sim-clock %q: give real or zero", o.clock)
	case o.protocol > 1<<31:
		return o, fmt.Errorf("--protocol %d: too large", o.protocol)
	case o.leaveTimeout < 0:
		return o, fmt.Errorf("--leave-timeout %v: give 0 (stop at once) or more", o.leaveTimeout)
	case o.heartbeat != 0 && (o.heartbeat < time.Millisecond || o.heartbeat > 10*time.Second):
		return o, fmt.Errorf("--heartbeat %v: give 1ms to 10s (0: the default, %v)", o.heartbeat, host.DefaultHeartbeat)
	case o.silentFront < 100*time.Millisecond || o.silentFront > time.Hour:
		return o, fmt.Errorf("--silent-front %v: give 100ms to 1h", o.silentFront)
	case o.maxFronts < 1 || o.maxFronts > 1024:
		return o, fmt.Errorf("--max-fronts %d: give 1 to 1024", o.maxFronts)
	case o.uploadArea != 0 && o.uploadArea != -1 && (o.uploadArea < 0 || o.uploadArea%4096 != 0 || o.uploadArea > 1<<30):
		return o, fmt.Errorf("--upload-area %d: give whole 4096-byte pages up to 1 GiB (0: the default, 16 MiB; -1: none)", o.uploadArea)
	case o.spin > time.Second:
		return o, fmt.Errorf("--spin %v: give 0 (spin only while a fence is due), a negative duration (never spin) or a window up to 1s (a spinning lane holds a core while it is busy; %v suits GPU serving steps)", o.spin, actors.GPUSpin)
	case o.maxInFlight < 0:
		return o, fmt.Errorf("--max-in-flight-per-lane %d: give 0 (the default) or more", o.maxInFlight)
	case o.clusterName == "" && (o.membership != "" || len(o.seeds) > 0 || set["cluster-refresh"] || set["membership-fd"]):
		return o, fmt.Errorf("--membership, --membership-fd, --seeds and --cluster-refresh need --cluster NAME")
	case set["membership-fd"] && o.membershipFD < 3:
		return o, fmt.Errorf("--membership-fd %d: give an inherited descriptor, 3 or more (0 to 2 are standard input, output and error)", o.membershipFD)
	case o.clusterName != "" && ((o.membership == "" && o.membershipFD == 0) || len(o.seeds) == 0):
		return o, fmt.Errorf("--cluster %s: give --membership (this host's membership endpoint, host:port) or --membership-fd, and --seeds (every host's, this one's included)", o.clusterName)
	case o.tokenFile != "" && o.tlsCert != "":
		return o, fmt.Errorf("--token-file and --tls-cert: with TLS the certificates authenticate every connection; give one of them")
	case o.cpuProfile == "-" || o.execTrace == "-":
		return o, fmt.Errorf("--cpuprofile and --exectrace write files: name one, not -")
	case o.cpuProfile != "" && o.cpuProfile == o.execTrace:
		return o, fmt.Errorf("--cpuprofile and --exectrace both write %s: give each its own file", o.cpuProfile)
	}
	if !set["spin"] && o.device == "cuda" {
		o.spin = actors.DefaultGPUSpin()
	}
	return o, nil
}

// setUp runs setup on a goroutine of its own, bound to dev for the call
// (cuda.Bound); a panic of setup is its error.
func setUp(dev cuda.Device, setup func(cuda.Device) error) error {
	return cuda.Bound(dev, func() (err error) {
		defer func() {
			if p := recover(); p != nil {
				err = fmt.Errorf("setup panicked: %v", p)
			}
		}()
		return setup(dev)
	})
}
