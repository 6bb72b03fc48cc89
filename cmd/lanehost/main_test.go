package main

import (
	"io"
	"testing"
	"time"

	"github.com/lanesched/lanes/actors"
)

// A GPU host's lanes spin by default (as lanedemo's do on a GPU); the
// sim's do not; a --spin given is kept, 0 included.
func TestSpinDefaultsByDevice(t *testing.T) {
	for _, c := range []struct {
		args []string
		want time.Duration
	}{
		{[]string{"--device", "cuda"}, actors.GPUSpin},
		{[]string{"--device", "sim"}, 0},
		{nil, 0},
		{[]string{"--device", "cuda", "--spin", "0s"}, 0},
		{[]string{"--device", "cuda", "--spin", "20us"}, 20 * time.Microsecond},
	} {
		o, err := parse(c.args, io.Discard)
		if err != nil {
			t.Fatalf("parse(%q): %v", c.args, err)
		}
		if o.spin != c.want {
			t.Errorf("parse(%q): spin %v, want %v", c.args, o.spin, c.want)
		}
	}
}
