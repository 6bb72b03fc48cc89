// lanedemo --cluster: the lane hosts join a cluster on loopback (the
// automanaged provider) and the front finds them there; one more may join
// midway (--join-at), one leave well (--leave-at), one be killed
// (--kill-at), under the same load.

package demo

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/lanesched/lanes/internal/procs"
	"github.com/lanesched/lanes/remote"
)

// fleet is the --cluster mode's lane host processes.
type fleet struct {
	cluster string
	seeds   []string   // every host's membership endpoint, by index
	sockets []*os.File // each one's listening socket, held until its host inherits it
	path    string
	args    func(i int) []string

	mu     sync.Mutex
	procs  map[int]*exec.Cmd
	stdins map[int]io.WriteCloser
	exited map[int]chan error
	events []string
	start  time.Time // the measured phase's start, for the events
}

// startFleet starts the first cfg.Devices hosts of the cluster (and keeps
// a membership endpoint free for one that joins later).
func startFleet(cfg Config, path string, args func(i int) []string) (*fleet, error) {
	n := cfg.Devices
	if cfg.Hosts.JoinAt > 0 {
		n++
	}
	fl := &fleet{cluster: fmt.Sprintf("lanedemo-%d", os.Getpid()), path: path, args: args, procs: map[int]*exec.Cmd{},
		stdins: map[int]io.WriteCloser{}, exited: map[int]chan error{}}
	// Every membership endpoint listens before any host starts (the seeds
	// name them all), held here until its host inherits it: a port picked
	// and let go could be someone else's by then.
	for range n {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			fl.stop()
			return nil, err
		}
		f, err := ln.(*net.TCPListener).File()
		_ = ln.Close() // the file holds the socket
		if err != nil {
			fl.stop()
			return nil, err
		}
		fl.seeds, fl.sockets = append(fl.seeds, ln.Addr().String()), append(fl.sockets, f)
	}
	for i := range cfg.Devices {
		if err := fl.startHost(i); err != nil {
			fl.stop()
			return nil, err
		}
	}
	return fl, nil
}

// hostStartWithin bounds how long a host may take to say where it
// listens (a front waits as long for a host it launches: JoinTimeout).
const hostStartWithin = 30 * time.Second

// hostName names the i-th host.
func hostName(i int) string { return "host" + strconv.Itoa(i) }

// startHost starts the i-th host as a member of the cluster.
func (fl *fleet) startHost(i int) error {
	args := append(fl.args(i), "--name", hostName(i), "--cluster", fl.cluster, "--membership", fl.seeds[i], "--membership-fd", "3",
		"--seeds", strings.Join(fl.seeds, ","), "--exit-with-stdin")
	cmd := exec.Command(fl.path, args...)
	if e := procs.Env(nil); e != "" {
		cmd.Env = append(os.Environ(), e) // a small machine: the host takes half its CPUs, as a launched one does
	}
	fl.mu.Lock()
	cmd.ExtraFiles = []*os.File{fl.sockets[i]}
	fl.mu.Unlock()
	cmd.Stderr = os.Stderr
	stdin, err := cmd.StdinPipe()
	if err != nil {
		return err
	}
	out, err := cmd.StdoutPipe()
	if err != nil {
		return err
	}
	err = cmd.Start()
	fl.mu.Lock()
	_ = fl.sockets[i].Close() // the host has its own copy
	fl.mu.Unlock()
	if err != nil {
		return fmt.Errorf("lanedemo: start %s: %w", fl.path, err)
	}
	lines := make(chan string, 1)
	go func() {
		line, _ := bufio.NewReader(out).ReadString('\n')
		lines <- line
	}()
	var line string
	select {
	case line = <-lines:
	case <-time.After(hostStartWithin):
	}
	if _, err := remote.ParseListening(line); err != nil {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
		return fmt.Errorf("lanedemo: %s %s: within %v: %v (its standard error says why)", fl.path, strings.Join(args, " "), hostStartWithin, err)
	}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	fl.mu.Lock()
	fl.procs[i], fl.stdins[i], fl.exited[i] = cmd, stdin, exited
	fl.mu.Unlock()
	return nil
}

// event records what happened to the fleet, and when in the measured phase.
func (fl *fleet) event(format string, a ...any) {
	fl.mu.Lock()
	defer fl.mu.Unlock()
	fl.events = append(fl.events, fmt.Sprintf("%5.2fs ", time.Since(fl.start).Seconds())+fmt.Sprintf(format, a...))
}

// schedule joins, asks to leave and kills hosts at the configured times of
// the measured phase (started at start), watching the front see each.
func (fl *fleet) schedule(ctx context.Context, cfg Config, f *remote.Front, start time.Time) {
	fl.mu.Lock()
	fl.start = start
	fl.mu.Unlock()
	var wg sync.WaitGroup
	at := func(d time.Duration, do func()) {
		if d <= 0 {
			return
		}
		wg.Go(func() {
			select {
			case <-time.After(time.Until(start.Add(d))):
				do()
			case <-ctx.Done():
			}
		})
	}
	at(cfg.Hosts.JoinAt, func() {
		i := len(fl.seeds) - 1
		fl.event("%s starts and joins the cluster", hostName(i))
		if err := fl.startHost(i); err != nil {
			fl.event("%s would not start: %v", hostName(i), err)
			return
		}
		fl.watch(ctx, f, hostName(i), func(st remote.HostStatus) bool { return st.Health == remote.HostServing }, "serving: takes new tenants")
	})
	at(cfg.Hosts.LeaveAt, func() {
		fl.event("%s asked to leave (SIGTERM)", hostName(0))
		fl.signal(0, syscall.SIGTERM)
		fl.mu.Lock()
		exited := fl.exited[0]
		fl.mu.Unlock()
		select {
		case err := <-exited:
			fl.event("%s left and exited (%v)", hostName(0), exitStatus(err))
			exited <- err
		case <-ctx.Done():
		}
	})
	at(cfg.Hosts.KillAt, func() {
		i := min(1, cfg.Devices-1)
		fl.event("%s killed (SIGKILL)", hostName(i))
		fl.signal(i, syscall.SIGKILL)
		fl.watch(ctx, f, hostName(i), func(st remote.HostStatus) bool { return st.Health != remote.HostServing }, "lost at the front")
	})
	wg.Wait()
}

func exitStatus(err error) string {
	if err == nil {
		return "status 0"
	}
	return err.Error()
}

// watch records when the front first sees the host as ok says.
func (fl *fleet) watch(ctx context.Context, f *remote.Front, name string, ok func(remote.HostStatus) bool, what string) {
	for ctx.Err() == nil {
		for _, st := range f.Hosts() {
			if st.HostName == name && ok(st) {
				fl.event("%s %s", name, what)
				return
			}
		}
		time.Sleep(time.Millisecond)
	}
}

func (fl *fleet) signal(i int, sig os.Signal) {
	fl.mu.Lock()
	cmd := fl.procs[i]
	fl.mu.Unlock()
	if cmd != nil {
		_ = cmd.Process.Signal(sig)
	}
}

// stop asks every host still running to leave (their standard input
// closed) and waits for them, killing any still there after 10 s.
func (fl *fleet) stop() {
	fl.mu.Lock()
	defer fl.mu.Unlock()
	for _, f := range fl.sockets {
		_ = f.Close() // a joiner's that never joined; closing twice is harmless
	}
	for _, in := range fl.stdins {
		_ = in.Close()
	}
	deadline := time.Now().Add(10 * time.Second)
	for i, exited := range fl.exited {
		select {
		case <-exited:
		case <-time.After(time.Until(deadline)):
			_ = fl.procs[i].Process.Kill()
			<-exited
		}
	}
}
