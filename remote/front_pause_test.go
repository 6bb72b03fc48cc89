package remote_test

import (
	"bufio"
	"context"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/lanesched/lanes/cuda"
	"github.com/lanesched/lanes/lanes"
	"github.com/lanesched/lanes/remote"
)

func init() { children["front-paused"] = pausedFrontChild }

// pausedFrontChild runs a front of the host at $LANES_HOST (LostAfter
// 1 s) that uploads in a loop until its stdin closes, then says how
// its host fared: the epochs it served under, its losses, and the calls
// that failed.
func pausedFrontChild() int {
	ctx := context.Background()
	f, err := remote.StartFront(ctx, remote.FrontConfig{Hosts: []string{os.Getenv("LANES_HOST")}, LostAfter: time.Second, Logf: func(format string, a ...any) {
		fmt.Fprintf(os.Stderr, format+"\n", a...)
	}})
	if err != nil {
		fmt.Println("start:", err)
		return 1
	}
	defer f.Stop(ctx)
	b, err := f.Alloc(ctx, "t", cuda.BufferSpec{Size: 64, Elem: cuda.U8})
	if err != nil {
		fmt.Println("alloc:", err)
		return 1
	}
	first := f.Hosts()[0].Epoch
	done := make(chan struct{})
	go func() { _, _ = bufio.NewReader(os.Stdin).ReadString('\n'); close(done) }()
	fmt.Println("serving")
	failed, calls := 0, 0
	for {
		select {
		case <-done:
			h := f.Hosts()[0]
			fmt.Printf("epochs %d %d losses %d failed %d of %d\n", first, h.Epoch, h.Losses, failed, calls)
			return 0
		default:
		}
		up, _ := cuda.Upload(b.Whole(), make([]byte, 64))
		calls++
		if _, err := f.Submit(ctx, "t", lanes.Batch{Entries: []lanes.Entry{lanes.Eager(0, up)}}); err != nil {
			failed++
		}
		time.Sleep(time.Millisecond)
	}
}

// TestAPausedFrontKeepsItsHosts: a front stopped (SIGSTOP) for three times
// its LostAfter, then continued, could not read its hosts' heartbeats
// meanwhile: it keeps its host under the same registration, and its calls
// go on, instead of losing a host that never stopped.
func TestAPausedFrontKeepsItsHosts(t *testing.T) {
	_, addr := startHostProcess(t, "--sim-clock", "zero", "--heartbeat", "50ms")
	child := exec.Command(os.Args[0], "-test.run", "^$")
	child.Env = append(os.Environ(), "LANES_CHILD=front-paused", "LANES_HOST="+addr)
	in, _ := child.StdinPipe()
	out, _ := child.StdoutPipe()
	logs := &syncWriter{b: &strings.Builder{}}
	child.Stderr = logs
	if err := child.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = child.Process.Kill(); _ = child.Wait() })
	lines := bufio.NewReader(out)
	if line, _ := lines.ReadString('\n'); line != "serving\n" {
		t.Fatalf("the front's process: got %q, want it serving", line)
	}
	time.Sleep(300 * time.Millisecond)
	if err := child.Process.Signal(syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	time.Sleep(3 * time.Second)
	if err := child.Process.Signal(syscall.SIGCONT); err != nil {
		t.Fatal(err)
	}
	time.Sleep(500 * time.Millisecond)
	_, _ = in.Write([]byte("\n"))
	line, _ := lines.ReadString('\n')
	var first, now, losses, failed, calls int
	if _, err := fmt.Sscanf(line, "epochs %d %d losses %d failed %d of %d", &first, &now, &losses, &failed, &calls); err != nil {
		t.Fatalf("the front's process said %q (%v); its log:\n%s", line, err, logs.String())
	}
	if first != now || losses != 0 || failed != 0 || calls < 10 {
		t.Errorf("after a pause of the front: epochs %d then %d, %d losses, %d of %d calls failed; want the same registration, no loss, none failed\n%s", first, now, losses, failed, calls, logs.String())
	}
	if !strings.Contains(logs.String(), "did not run for") {
		t.Errorf("the front's log: got\n%s\nwant it to say it did not run for a while", logs.String())
	}
}
