// A front's supervision of its hosts: joining them (launching and
// restarting the ones it starts), noticing silence, and stopping them.

package front

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strings"
	"sync/atomic"
	"time"

	"github.com/lanesched/lanes/internal/procs"
	"github.com/lanesched/lanes/internal/wirepb"
	system "github.com/lanesched/lanes/remote/internal/system"

	wire "github.com/lanesched/lanes/remote/internal/wire"
)

// awaitGone waits, after the host left under epoch, for the answers to
// what the front sent it before it heard (refusals), then tells the host
// it sends nothing more under the epoch (the host goes once every front
// has said so), then waits for its process to go (or its address to
// terminate), or for two of its heartbeat bounds, and ends whatever is
// still in flight on it indeterminate.
func (l *Link) awaitGone(epoch uint64) {
	limit := time.After(2 * l.F.cfg.LostAfter)
	how := "it left and did not answer"
	tick := time.NewTicker(time.Millisecond)
	defer tick.Stop()
	released := false
wait:
	for {
		select {
		case e := <-l.events:
			if e == "lost" || e == "exited" {
				how = "it left and went"
				break wait
			}
		case <-tick.C:
			if !released && l.F.calls.InFlight(l.Name, epoch) == 0 {
				released = true
				l.release(epoch)
				tick.Stop()
			}
		case <-limit:
			break wait
		case <-l.F.quit:
			return
		}
	}
	if n := l.endInFlight(epoch, how); n > 0 { // and closes the epoch to new calls
		l.F.cfg.Logf("host %s (epoch %d) left: %s; %d calls still in flight end indeterminate", l.Name, epoch, how, n)
	}
	if !released {
		l.release(epoch) // nothing more is sent under it: the host need not wait
	}
}

// release tells the host, which left under epoch, that the front has
// nothing in flight on it and sends nothing more under the epoch.
func (l *Link) release(epoch uint64) {
	l.mu.Lock()
	pid := l.pid
	l.mu.Unlock()
	l.F.tell(pid, &wirepb.Leaving{Epoch: epoch, Drained: true})
}

// watchSilence loses a host silent for longer than LostAfter. A front
// that itself did not run for half of LostAfter (stopped, a frozen VM, a
// process starved of CPU) could not read what its hosts sent meanwhile:
// it gives each host a new bound from then, instead of losing hosts whose
// heartbeats wait unread.
func (f *Front) watchSilence() {
	defer f.wg.Done()
	t := time.NewTicker(max(f.cfg.LostAfter/5, time.Millisecond))
	defer t.Stop()
	last := time.Now()
	for {
		select {
		case <-t.C:
		case <-f.quit:
			return
		}
		now := time.Now()
		if gap := now.Sub(last); gap > f.cfg.LostAfter/2 {
			f.cfg.Logf("the front did not run for %v (stopped, or starved of CPU): its hosts are given %v from now to be heard from", gap.Round(time.Millisecond), f.cfg.LostAfter)
			for _, l := range f.AllLinks() {
				l.excuse(now)
			}
		}
		last = now
		if f.cfg.Cluster != nil {
			f.pruneGone()
		}
		for _, l := range f.AllLinks() {
			epoch := l.Serving.Load()
			if epoch == 0 {
				continue
			}
			silent := time.Since(time.Unix(0, l.heardAt.Load()))
			if bound := f.cfg.LostAfter + readAllowance(l.readBytes.Load()); silent > bound {
				l.lose(epoch, fmt.Sprintf("silent for %v (bound %v)", silent.Round(time.Millisecond), bound.Round(time.Millisecond)))
				continue
			}
			// The other way: the host echoes the front's probes in its
			// heartbeats; one unechoed for LostAfter plus a probe's period
			// (a hung host is lost by its silence first) means the way to
			// it is cut.
			deaf := l.deaf()
			if bound := f.cfg.LostAfter + f.cfg.LostAfter/5 + readAllowance(l.uploadBytes.Load()); deaf > bound {
				l.lose(epoch, fmt.Sprintf("its heartbeats arrive but it has not heard the front for %v (bound %v): the way to it is cut", deaf.Round(time.Millisecond), bound))
				continue
			}
			l.probe(epoch)
		}
	}
}

// ReadRate is the slowest a host's read-back bytes are assumed to cross
// to the front: while reads are in flight, a host's heartbeats queue
// behind their bytes on the one connection, so a host is given LostAfter
// plus the time its reads in flight take at this rate before its silence
// counts (a 64 MiB read: 4 s more).
const ReadRate = 16 << 20 // bytes a second

func readAllowance(bytes int64) time.Duration {
	return time.Duration(float64(max(bytes, 0)) / ReadRate * float64(time.Second))
}

// supervise keeps the host registered: it joins (launching the process
// first for a launched host), waits while it serves, and after a loss
// joins again (killing and restarting a launched host, with backoff).
func (l *Link) supervise() {
	defer l.F.wg.Done()
	backoff := l.F.cfg.RestartBackoff
	asIs := false // the host dropped the registration itself: joined again without a restart
	for first := true; ; first = false {
		if !first && !l.pause(backoff) {
			return
		}
		if l.unlisted() && !l.awaitListed() {
			return // a host of the cluster is joined again only while it is a member
		}
		if l.launch != nil && !asIs {
			if !first {
				l.mu.Lock()
				l.restarts++
				l.mu.Unlock()
			}
			if err := l.start(); err != nil {
				if errors.Is(err, wire.ErrStopped) {
					return // the front stops
				}
				l.F.cfg.Logf("host %s: start: %v", l.Name, err)
				if first {
					l.mu.Lock()
					l.startErr = err
					l.mu.Unlock()
					l.answered() // StartFront says why at once
				}
				backoff = min(2*backoff, 5*time.Second)
				continue
			}
		}
		asIs = false
		switch l.join() {
		case "stopped":
			return
		case "unlisted":
			continue // it left the membership before it registered
		case "dropped":
			asIs = !l.processExited() // it answered: joined again as it is
			continue
		case "refused":
			l.kill()
			return
		case "busy":
			// The host refused for now (it serves its most fronts, or it
			// is leaving): ask again after a while (a launched one:
			// start another). StartFront already reported a first refusal.
			if l.launch != nil {
				l.kill()
			}
			backoff = min(2*backoff, 5*time.Second)
			continue
		case "registered":
			backoff = l.F.cfg.RestartBackoff
			if !l.serve() {
				return
			}
			if st := l.Status(); st.Health == HostLeft {
				l.awaitGone(st.Epoch)
				if l.launch != nil {
					return // asked to leave (SIGTERM, say): it stops itself, and stays out
				}
			}
			if l.rejoinAsIs() && !l.processExited() {
				asIs = true
				continue
			}
		default: // no answer in time
			backoff = min(2*backoff, 5*time.Second)
		}
		l.kill()
	}
}

// pause waits d unless the front stops (false).
func (l *Link) pause(d time.Duration) bool {
	select {
	case <-time.After(d):
		return true
	case <-l.F.quit:
		return false
	}
}

// join asks the host to register, again every second (a cluster's host:
// every 250 ms, while it is a member), until it answers, the join times
// out or the front stops.
func (l *Link) join() string {
	l.mu.Lock()
	since, was := l.since, l.State
	l.SetState(HostJoining)
	if was == HostLost {
		l.since = since // a lost host stays lost, to the eye, until it serves again
	}
	l.attempt = joinAttempts.Add(1)
	pid, attempt, stale := l.pid, l.attempt, l.pending
	l.pending = nil
	l.mu.Unlock()
	if stale != nil {
		l.closePlane(stale.welcome.Epoch) // welcomed in a join given up on
	}
	deadline := time.After(l.F.cfg.JoinTimeout)
	retry := time.Second
	if l.fromCluster {
		retry = 250 * time.Millisecond // a new member's host actor may start a moment after its membership
	}
	for {
		l.F.tell(pid, &wirepb.Join{Protocol: wire.Protocol, Front: l.F.Sys.Addr, Attempt: attempt})
		select {
		case e := <-l.events:
			if e == "registered" || e == "dropped" || e == "refused" || e == "busy" || e == "exited" && l.processExited() {
				return e
			}
		case <-time.After(retry):
			l.checkCredential() // a stranger on the address never answers: say why
			if l.unlisted() {
				l.mu.Lock()
				if l.attempt == attempt && l.State == HostJoining {
					l.State, l.since = was, since // gone from the cluster: it stays lost (or left) to the eye
				}
				l.mu.Unlock()
				return "unlisted"
			}
		case <-deadline:
			if l.launch == nil {
				if err := l.credentialRefused(); err != nil {
					l.F.cfg.Logf("host %s has not registered within %v: %v (asking on)", l.Name, l.F.cfg.JoinTimeout, err)
				} else if l.fromCluster {
					l.F.cfg.Logf("host %s, a member of cluster %s, has not registered within %v: is it up at that address, and can it reach this front at %s? (asking on)",
						l.Name, l.F.cfg.Cluster.Name, l.F.cfg.JoinTimeout, l.F.Sys.Addr)
				}
				deadline = time.After(l.F.cfg.JoinTimeout) // a fixed host: keep asking
				continue
			}
			return "timeout"
		case <-l.F.quit:
			return "stopped"
		}
	}
}

// joinAttempts numbers joins across the process's fronts.
var joinAttempts atomic.Uint64

// serve waits while the host serves; false when the front stops.
func (l *Link) serve() bool {
	for {
		select {
		case e := <-l.events:
			if e == "lost" || e == "left" || e == "exited" && l.processExited() {
				return true
			}
		case <-l.F.quit:
			return false
		}
	}
}

// launchFailure is why the host's first launch failed, if it did.
func (l *Link) launchFailure() error {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.State == HostServing {
		return nil
	}
	return l.startErr
}

// processExited reports whether the launched process of now has exited
// (an "exited" event may be a previous process's, seen late).
func (l *Link) processExited() bool {
	l.mu.Lock()
	ch := l.exited
	l.mu.Unlock()
	if ch == nil {
		return false
	}
	select {
	case <-ch:
		return true
	default:
		return false
	}
}

// start launches the host process and learns its address from its first
// line.
func (l *Link) start() error {
	args := append(append([]string(nil), l.launch.Args...), "--name", l.launch.Name, "--exit-with-stdin")
	cmd := exec.Command(l.launch.Path, args...)
	cmd.Env = append(append(os.Environ(), l.launch.Env...), system.TokenFileEnv+"="+l.F.tokenFile) // the host admits this front
	if e := procs.Env(l.launch.Env); e != "" {
		cmd.Env = append(cmd.Env, e) // a small machine: the host takes half its CPUs (internal/procs)
	}
	cmd.Stderr = os.Stderr
	stdin, err := cmd.StdinPipe()
	if err != nil {
		return fmt.Errorf("%w: %v", wire.ErrConfig, err)
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		return fmt.Errorf("%w: %v", wire.ErrConfig, err)
	}
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("%w: %v", wire.ErrConfig, err) // no such program, not executable: Launch.Path
	}
	lines := make(chan string, 1)
	go func() {
		r := bufio.NewReader(stdout)
		line, _ := r.ReadString('\n')
		lines <- line
		_, _ = io.Copy(io.Discard, r)
	}()
	var line string
	select {
	case line = <-lines:
	case <-time.After(l.F.cfg.JoinTimeout):
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
		return fmt.Errorf("%w: %s %s did not say where it listens within %v (JoinTimeout): a lane host prints %q and its address first", wire.ErrNoHost, l.launch.Path, strings.Join(args, " "), l.F.cfg.JoinTimeout, wire.ListeningLine)
	case <-l.F.quit:
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
		return fmt.Errorf("%w: the front stopped while the host started", wire.ErrStopped)
	}
	said, err := wire.ParseListening(line)
	if err != nil {
		_ = cmd.Process.Kill()
		exit := cmd.Wait()
		return fmt.Errorf("%w: %s %s: %v (its exit: %v; its standard error says why)", wire.ErrConfig, l.launch.Path, strings.Join(args, " "), err, exit)
	}
	exited := make(chan struct{})
	l.mu.Lock()
	l.setAddress(said.Address)
	l.proc, l.stdin, l.exited = cmd.Process, stdin, exited
	l.mu.Unlock()
	go func() {
		err := cmd.Wait()
		close(exited)
		l.mu.Lock()
		mine, epoch := l.proc == cmd.Process, l.Epoch
		l.mu.Unlock()
		if mine {
			how := "the process exited"
			if err != nil {
				how = "the process exited: " + err.Error()
			}
			l.lose(epoch, how)
			l.event("exited")
		}
	}()
	return nil
}

// kill ends a launched host's process (a hung one may not answer
// anything else).
func (l *Link) kill() {
	l.mu.Lock()
	proc, stdin := l.proc, l.stdin
	l.proc, l.stdin = nil, nil
	l.mu.Unlock()
	if proc != nil {
		_ = stdin.Close()
		_ = proc.Kill()
	}
}

// stopLink ends every call still in flight on the host and lets the
// host go; a launched host's process is stopped after (stopProcess).
func (l *Link) stopLink() {
	l.mu.Lock()
	epoch, was, pid := l.Epoch, l.State, l.pid
	l.SetState(HostStopped)
	l.mu.Unlock()
	if was == HostServing {
		// Let the host go: it may serve another front now.
		l.F.tell(pid, &wirepb.Welcome{Refusal: frontStopped, Protocol: wire.Protocol, Epoch: epoch})
		l.endInFlight(epoch, frontStopped)
	}
	l.closePlane(epoch)
}

// stopProcess stops a launched host's process once its supervisor is
// done (none is started after): its standard input closed (lanehost
// --exit-with-stdin stops itself), killed if it has not exited within 3 s
// or by the end of ctx.
func (l *Link) stopProcess(ctx context.Context) {
	l.mu.Lock()
	proc, stdin, exited := l.proc, l.stdin, l.exited
	l.proc, l.stdin = nil, nil // its exit is no loss
	l.mu.Unlock()
	if proc == nil {
		return
	}
	_ = stdin.Close()
	grace := time.NewTimer(3 * time.Second)
	defer grace.Stop()
	select {
	case <-exited:
		return
	case <-grace.C:
	case <-ctx.Done():
	}
	_ = proc.Kill()
	<-exited
}

// frontStopped is how a call in flight ends when its front stops first.
const frontStopped = "the front stopped"
