// What a front refuses before anything reaches a host, and what a host
// refuses of a front's calls.

package remote_test

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/lanesched/lanes/actors"
	"github.com/lanesched/lanes/cuda"
	"github.com/lanesched/lanes/lanes"
	"github.com/lanesched/lanes/remote"
	"github.com/lanesched/lanes/remote/internal/wire"
)

// TestFrontRefusesWhatHasNoWireForm: bad calls come back as errors, and
// nothing reaches a host.
func TestFrontRefusesBadCalls(t *testing.T) {
	_, h := startHostProcess(t)
	f, err := remote.StartFront(context.Background(), remote.FrontConfig{Hosts: []string{h}, Logf: t.Logf})
	if err != nil {
		t.Fatalf("StartFront: got err %v, want nil", err)
	}
	defer f.Stop(context.Background())
	ctx := context.Background()
	if _, err := f.Submit(ctx, "", lanes.Batch{}); !errors.Is(err, actors.ErrInvalidTenant) || !cuda.Classify(err).NotSubmitted {
		t.Errorf("Submit with no tenant: got err %v, want actors.ErrInvalidTenant, not submitted", err)
	}
	if _, err := f.Alloc(ctx, strings.Repeat("x", wire.MaxTenantName+1), cudaSpec64()); !errors.Is(err, actors.ErrInvalidTenant) {
		t.Errorf("Alloc for a name past MaxTenantName: got err %v, want actors.ErrInvalidTenant", err)
	}
	c := setUp(t, f, "t")
	other := setUp(t, f, "u")
	// A buffer of another tenant: refused by the host as not owned.
	r, err := f.Submit(ctx, "t", other.step(t, 1))
	if err == nil || r.Outcome != lanes.OutcomeRefused {
		t.Errorf("a step on another tenant's buffer: got outcome %v err %v, want refused with an error", r.Outcome, err)
	}
	if _, err := f.Read(ctx, "t", other.buf.Whole()); err == nil {
		t.Errorf("Read of another tenant's buffer: got nil err, want a refusal")
	}
	if _, err := f.Alloc(ctx, "t", cuda.BufferSpec{Size: 3, Elem: cuda.I32}); err == nil {
		t.Errorf("Alloc of 3 bytes of int32: got nil err, want a refusal")
	}
	if err := f.Free(ctx, "t", c.buf); err != nil {
		t.Errorf("Free: got err %v, want nil", err)
	}
	if err := f.Free(ctx, "t", c.buf); err == nil {
		t.Errorf("second Free: got nil err, want a refusal")
	}
	// A name no tenant may have is refused by the front, named as given.
	if _, err := f.Alloc(ctx, "a\nb", cudaSpec64()); !errors.Is(err, actors.ErrInvalidTenant) || !cuda.Classify(err).NotSubmitted ||
		strings.Contains(err.Error(), "@") {
		t.Errorf(`Alloc for "a\nb": got %v, want actors.ErrInvalidTenant, not submitted, naming it as given`, err)
	}
	// A call whose context ended before it was made: nothing was sent.
	done, cancel := context.WithCancel(ctx)
	cancel()
	if _, err := f.Read(done, "u", other.buf.Whole()); !errors.Is(err, context.Canceled) || !cuda.Classify(err).NotSubmitted {
		t.Errorf("Read with a context ended: got %v (not submitted %v), want context.Canceled, not submitted", err, cuda.Classify(err).NotSubmitted)
	}
}
