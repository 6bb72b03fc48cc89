package remote_test

import (
	"context"
	"errors"
	"net"
	"strings"
	"testing"

	"github.com/lanesched/lanes/actors"
	"github.com/lanesched/lanes/cuda"
	"github.com/lanesched/lanes/cuda/sim"
	"github.com/lanesched/lanes/remote"
)

// TestParseListening: a host's first line reads back as what it says, and
// a line that is not one is refused with what it should be.
func TestParseListening(t *testing.T) {
	for _, l := range []remote.Listening{
		{Address: "127.0.0.1:7001"},
		{Address: "10.0.0.5:7001", Bound: "127.0.0.1:41007"},
		{Address: "127.0.0.1:7001", Membership: "127.0.0.1:7101"},
		{Address: "[::1]:7001", Bound: "[::1]:7002", Membership: "[::1]:7003"},
	} {
		got, err := remote.ParseListening("  " + l.String() + "\n")
		if err != nil || got != l {
			t.Errorf("ParseListening(%q): got %+v, %v; want %+v", l.String(), got, err, l)
		}
	}
	if got, err := remote.ParseListening("lanehost: listening on 127.0.0.1:7001 bound 127.0.0.1:7001"); err != nil || got.Bound != "" {
		t.Errorf("bound where it is reached: got %+v, %v; want no Bound", got, err)
	}
	for _, line := range []string{"", "listening on 127.0.0.1:7001", "lanehost: listening on ", "lanehost: listening on not-an-address",
		"lanehost: listening on 127.0.0.1", "lanehost: listening on :7001", "lanehost: listening on 127.0.0.1:99999", "lanehost: listening on 127.0.0.1:0",
		"lanehost: listening on bound", "lanehost: listening on 127.0.0.1:7001 bound", "lanehost: listening on 127.0.0.1:7001 colour blue",
		"lanehost: listening on 127.0.0.1:7001 membership 127.0.0.1:7101 membership 127.0.0.1:7102", "lanehost: listening on 127.0.0.1:7001\x00"} {
		if got, err := remote.ParseListening(line); err == nil {
			t.Errorf("ParseListening(%q): got %+v, want an error", line, got)
		}
	}
}

// TestAMembershipListenerThatServesNoOneIsRefused: Serve refuses a
// membership listener that is closed, or on another address than the
// Membership named, with ErrConfig, before anything starts.
func TestAMembershipListenerThatServesNoOneIsRefused(t *testing.T) {
	closed, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	_ = closed.Close()
	open, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer open.Close()
	for _, c := range []struct {
		name string
		cfg  remote.ClusterConfig
		want string
	}{
		{"closed", remote.ClusterConfig{Name: "c", Seeds: []string{closed.Addr().String()}, MembershipListener: closed}, "takes no connection"},
		{"elsewhere", remote.ClusterConfig{Name: "c", Seeds: []string{"127.0.0.1:1", open.Addr().String()}, Membership: "127.0.0.1:1", MembershipListener: open}, "listener is on"},
	} {
		dev, err := sim.New(sim.Config{})
		if err != nil {
			t.Fatal(err)
		}
		_, err = remote.Serve(context.Background(), remote.HostConfig{Scheduler: actors.Config{Devices: []cuda.Device{dev}}, Cluster: &c.cfg})
		if !errors.Is(err, remote.ErrConfig) || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: Serve got err %v, want remote.ErrConfig saying %q", c.name, err, c.want)
		}
		_ = dev.Close()
	}
}
