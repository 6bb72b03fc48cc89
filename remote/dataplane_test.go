// The same-host data plane with real host processes: which path a front
// takes, a corrupt ring, kill -9 and what is left mapped.

package remote_test

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/lanesched/lanes/remote"
)

func init() { children["front-remote-path"] = remotePathChild }

// TestAHostOnThisMachineIsServedThroughSharedMemory: a front's hosts on
// its machine take its steps, receipts and operations through the data
// plane (Hosts() says so, and counts records both ways); kill -9 of a host leaves no segment of it mapped
// in the front once the front lost it, and its replacement gets a plane
// of its own; a front asked to keep to the remote does.
func TestAHostOnThisMachineIsServedThroughSharedMemory(t *testing.T) {
	f, loops := launchTwo(t, 500*time.Millisecond)
	for _, lp := range loops {
		for range 3 {
			if _, err := f.Submit(context.Background(), lp.c.tenant, lp.c.step(t, 2)); err != nil {
				t.Fatalf("a step of %s: got err %v, want nil", lp.c.tenant, err)
			}
		}
	}
	for _, h := range f.Hosts() {
		if !h.DataPlane || h.DataPlaneSent == 0 || h.DataPlaneRead == 0 {
			t.Fatalf("host %s: got DataPlane %v, %d records sent, %d read; want its traffic through the data plane", h.Name, h.DataPlane, h.DataPlaneSent, h.DataPlaneRead)
		}
	}
	if n := remote.PlaneMappings(); n != 2 {
		t.Errorf("segments mapped with two hosts: got %d, want 2", n)
	}
	again := hostNamed(f, "a")
	// kill -9: nothing of the dead host stays mapped.
	if err := syscall.Kill(again.PID, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	restarted := waitServing(t, f, "a", again.Epoch, 20*time.Second)
	if restarted.PID == again.PID || !restarted.DataPlane {
		t.Errorf("host a after kill -9: got pid %d (was %d), DataPlane %v; want a new process on a new plane", restarted.PID, again.PID, restarted.DataPlane)
	}
	for deadline := time.Now().Add(within(5 * time.Second)); remote.PlaneMappings() != 2 && time.Now().Before(deadline); {
		time.Sleep(10 * time.Millisecond)
	}
	if n := remote.PlaneMappings(); n != 2 {
		t.Errorf("segments mapped after a host was killed and replaced: got %d, want 2 (none of the dead host's)", n)
	}

	// The remote path, when asked for (another process: one front each).
	child := exec.Command(os.Args[0], "-test.run", "^$")
	child.Env = append(os.Environ(), "LANES_CHILD=front-remote-path", "LANES_HOST="+hostNamed(f, "b").Address)
	out, err := child.CombinedOutput()
	if err != nil || !strings.Contains(string(out), "through the remote") {
		t.Fatalf("a front with NoDataPlane: got %q (%v), want its steps served through the remote", out, err)
	}
}

// TestACorruptRecordEndsOneRegistration: a record no front would write
// (a forged length) on a host's data plane ends that front's registration
// alone: the host process serves on, the front loses it within its bound
// and joins it again under a new epoch with a new plane, its tenant (told
// its state was lost) starts over and is served.
func TestACorruptRecordEndsOneRegistration(t *testing.T) {
	cmd, addr := startHostProcess(t, "--heartbeat", "50ms")
	f, err := remote.StartFront(context.Background(), remote.FrontConfig{Hosts: []string{addr}, LostAfter: 500 * time.Millisecond, Logf: t.Logf})
	if err != nil {
		t.Fatalf("StartFront: got err %v, want nil", err)
	}
	defer f.Stop(context.Background())
	c := setUp(t, f, "t")
	before := f.Hosts()[0]
	if !remote.CorruptPlane(f, addr) {
		t.Fatal("CorruptPlane: got false, want the record written")
	}
	st := waitServing(t, f, addr, before.Epoch, 20*time.Second)
	if !st.DataPlane {
		t.Errorf("the host joined again: got DataPlane false, want a new plane")
	}
	if err := cmd.Process.Signal(syscall.Signal(0)); err != nil {
		t.Fatalf("the host after a corrupt record: got %v, want it still running", err)
	}
	startOver(t, f, c)
}

// readsFollow checks that a Read sees every submission whose SubmitAsync
// returned before it, without waiting for them to end: n times, the step
// adds 1 and the Read must see it. The error says the first it did not.
func readsFollow(t *testing.T, f *remote.Front, c counter, n int) error {
	step, err := f.Encode(c.step(t, 1))
	if err != nil {
		return err
	}
	base := c.value(t, f)
	for i := range n {
		if _, err := f.SubmitEncoded(context.Background(), c.tenant, step); err != nil {
			return err
		}
		if got, want := c.value(t, f), base+int32(i)+1; got != want {
			return fmt.Errorf("a Read right after submission %d: got %d, want %d (the submission before it)", i, got, want)
		}
	}
	return nil
}

// TestAReadFollowsTheSubmissionsBeforeIt: through the data plane (and the
// remote, in remotePathChild), a tenant's Read is answered after the
// submissions it made before, whether or not they ended.
func TestAReadFollowsTheSubmissionsBeforeIt(t *testing.T) {
	_, addr := startHostProcess(t, "--sim-clock", "zero")
	f, err := remote.StartFront(context.Background(), remote.FrontConfig{Hosts: []string{addr}, Logf: t.Logf})
	if err != nil {
		t.Fatalf("StartFront: got err %v, want nil", err)
	}
	defer f.Stop(context.Background())
	c := setUp(t, f, "t")
	if err := readsFollow(t, f, c, 300); err != nil {
		t.Fatal(err)
	}
}

// remotePathChild is a front that keeps to the remote.
func remotePathChild() int {
	ctx := context.Background()
	f, err := remote.StartFront(ctx, remote.FrontConfig{Hosts: []string{os.Getenv("LANES_HOST")}, NoDataPlane: true, Logf: func(string, ...any) {}})
	if err != nil {
		fmt.Println("StartFront:", err)
		return 1
	}
	defer f.Stop(ctx)
	c := setUp(&testing.T{}, f, "remote-path")
	if err := readsFollow(&testing.T{}, f, c, 300); err != nil {
		fmt.Println("through the remote:", err)
		return 1
	}
	h := f.Hosts()[0]
	if h.DataPlane || h.DataPlaneSent != 0 || remote.PlaneMappings() != 0 {
		fmt.Printf("DataPlane %v, %d records, %d mapped: want none\n", h.DataPlane, h.DataPlaneSent, remote.PlaneMappings())
		return 1
	}
	fmt.Println("served through the remote")
	return 0
}
