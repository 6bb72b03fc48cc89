// Registration: a lane host's Hello, checked by the front before it
// routes anything to the host.

package wire

import (
	"fmt"

	"github.com/lanesched/lanes/internal/wirepb"
)

// Protocol is the wire protocol this build speaks. A host and a front that
// differ refuse each other at registration, with a Welcome that says why,
// instead of exchanging messages one of them cannot read.
const Protocol = 8

// MaxDevices bounds the devices one Hello may announce.
const MaxDevices = 64

// CheckHello checks a lane host's registration: the protocol version, a
// host name, a non-zero epoch (a restarted host announces a new one) and
// its devices. It returns the Welcome to answer with: accepted, or refused
// with the reason.
func CheckHello(h *wirepb.Hello) *wirepb.Welcome {
	refuse := func(format string, args ...any) *wirepb.Welcome {
		return &wirepb.Welcome{Protocol: Protocol, Refusal: fmt.Sprintf(format, args...)}
	}
	switch {
	case h == nil:
		return refuse("no hello")
	case h.Refusal != "":
		return refuse("the host refused: %s", h.Refusal)
	case h.Protocol != Protocol:
		return refuse("protocol %d: this front speaks protocol %d; run a lane host of the same build", h.Protocol, Protocol)
	case h.Host == "" || len(h.Host) > 256:
		return refuse("a host name of %d bytes: give 1 to 256", len(h.Host))
	case h.Epoch == 0:
		return refuse("epoch 0: a host registers with a non-zero epoch, new at each start")
	case len(h.Devices) == 0 || len(h.Devices) > MaxDevices:
		return refuse("%d devices: a host serves 1 to %d", len(h.Devices), MaxDevices)
	}
	for i, d := range h.Devices {
		if d == nil || d.Lanes == 0 || d.Lanes > 256 {
			return refuse("device %d: give it 1 to 256 lanes", i)
		}
	}
	return &wirepb.Welcome{Accepted: true, Protocol: Protocol}
}
