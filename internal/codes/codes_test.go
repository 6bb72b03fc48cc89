package codes_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/lanesched/lanes/internal/codes"
)

// TestEveryCodeHasOneNameAndAClass: every code has a snake_case name of
// its own, and its class carries the code and agrees with Sticky and
// Retryable.
func TestEveryCodeHasOneNameAndAClass(t *testing.T) {
	seen := map[string]codes.Code{}
	for _, c := range codes.All() {
		name := c.String()
		if name == "" || strings.ToLower(name) != name || strings.Contains(name, " ") {
			t.Errorf("code %d: name %q, want snake_case", int32(c), name)
		}
		if other, dup := seen[name]; dup {
			t.Errorf("codes %d and %d share the name %q", int32(other), int32(c), name)
		}
		seen[name] = c
		cl := c.Class()
		if cl.Code != c || cl.Sticky != c.Sticky() || cl.Retryable != c.Retryable() || cl.Sticky != (cl.Blame == codes.BlameDevice) {
			t.Errorf("%s: class %+v disagrees with Sticky %v, Retryable %v", c, cl, c.Sticky(), c.Retryable())
		}
	}
	if got := codes.Code(12345).String(); got != "cuda_driver_error_12345" {
		t.Errorf("an unknown driver code: got %q, want cuda_driver_error_12345", got)
	}
	if got := codes.Code(12345).Class().Blame; got != codes.BlameStream {
		t.Errorf("an unknown driver code's blame: got %v, want stream", got)
	}
	for b, want := range map[codes.Blame]string{codes.BlameNone: "none", codes.BlameCaller: "caller", codes.BlameStream: "stream", codes.BlameDevice: "device", codes.Blame(9): "unknown"} {
		if b.String() != want {
			t.Errorf("Blame(%d).String(): got %q, want %q", b, b.String(), want)
		}
	}
}

// TestClassifyTakesTheOutermostClass: a sentinel classifies as its code
// through any wrapping, context errors as the caller's cancellation, nil
// as success, and an error lanes does not know as unclassified.
func TestClassifyTakesTheOutermostClass(t *testing.T) {
	s := codes.NewSentinel(codes.TenantBusy, "test: busy")
	if s.Error() != "test: busy" || s.Code() != codes.TenantBusy {
		t.Fatalf("sentinel: %q, code %v", s.Error(), s.Code())
	}
	for err, want := range map[error]codes.Code{
		nil:                                   codes.OK,
		s:                                     codes.TenantBusy,
		fmt.Errorf("wrapped: %w", s):          codes.TenantBusy,
		context.Canceled:                      codes.Canceled,
		context.DeadlineExceeded:              codes.DeadlineExceeded,
		errors.New("something else"):          codes.Unclassified,
		fmt.Errorf("x: %w", context.Canceled): codes.Canceled,
	} {
		if got := codes.Classify(err).Code; got != want {
			t.Errorf("Classify(%v): got %v, want %v", err, got, want)
		}
	}
}
