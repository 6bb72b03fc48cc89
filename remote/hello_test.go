package remote_test

import (
	"strings"
	"testing"

	"github.com/lanesched/lanes/internal/wirepb"
	"github.com/lanesched/lanes/remote"
	"github.com/lanesched/lanes/remote/internal/wire"
)

// TestHelloChecked: a host of the same protocol with a name, an epoch and
// devices is welcomed; every other registration is refused with a reason
// that says what to fix, never accepted.
func TestHelloChecked(t *testing.T) {
	good := func() *wirepb.Hello {
		return &wirepb.Hello{Protocol: wire.Protocol, Host: "gpu0", Epoch: 7, Devices: []*wirepb.Device{{Instance: 1, Name: "H200", Backend: "cuda", Lanes: 4}}}
	}
	if w := remote.CheckHello(good()); !w.Accepted || w.Refusal != "" || w.Protocol != wire.Protocol {
		t.Fatalf("a good hello: got %+v, want accepted", w)
	}
	for name, tc := range map[string]struct {
		change func(*wirepb.Hello)
		says   string
	}{
		"another protocol": {func(h *wirepb.Hello) { h.Protocol = wire.Protocol + 1 }, "same build"},
		"no name":          {func(h *wirepb.Hello) { h.Host = "" }, "host name"},
		"epoch 0":          {func(h *wirepb.Hello) { h.Epoch = 0 }, "non-zero epoch"},
		"no devices":       {func(h *wirepb.Hello) { h.Devices = nil }, "0 devices"},
		"a nil device":     {func(h *wirepb.Hello) { h.Devices[0] = nil }, "lanes"},
		"no lanes":         {func(h *wirepb.Hello) { h.Devices[0].Lanes = 0 }, "lanes"},
	} {
		h := good()
		tc.change(h)
		if w := remote.CheckHello(h); w.Accepted || !strings.Contains(w.Refusal, tc.says) {
			t.Errorf("%s: got %+v, want refused saying %q", name, w, tc.says)
		}
	}
	if w := remote.CheckHello(nil); w.Accepted {
		t.Errorf("a nil hello: got accepted, want refused")
	}
}
