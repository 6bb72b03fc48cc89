package hostcmd

import (
	"io"
	"strings"
	"testing"
	"time"

	"github.com/lanesched/lanes/actors"
)

// A GPU host's lanes spin by default where the machine has the cores (as
// lanedemo's do on a GPU); the sim's do not; a --spin given is kept, 0
// included (the default: spin only while a fence is due), and a
// negative one (never); one out of range is refused naming the flag.
func TestSpinDefaultsByDevice(t *testing.T) {
	for _, c := range []struct {
		args []string
		want time.Duration
	}{
		{[]string{"--device", "cuda"}, actors.DefaultGPUSpin()},
		{[]string{"--device", "sim"}, 0},
		{nil, 0},
		{[]string{"--device", "cuda", "--spin", "0s"}, 0},
		{[]string{"--device", "cuda", "--spin", "20us"}, 20 * time.Microsecond},
		{[]string{"--device", "cuda", "--spin", "-1ns"}, -time.Nanosecond}, // never spin
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

func TestSpinOutOfRangeIsRefused(t *testing.T) {
	for _, v := range []string{"1001ms", "2s", "1h"} {
		_, err := parse([]string{"--spin", v}, io.Discard)
		if err == nil || !strings.Contains(err.Error(), "--spin") || !strings.Contains(err.Error(), "give 0") {
			t.Errorf("parse(--spin %s): got %v, want a refusal naming --spin and what to give", v, err)
		}
	}
}

// An upload area that is not whole pages, or past 1 GiB, is refused naming
// the flag (found from outside: the refusal named HostConfig's field).
func TestUploadAreaOutOfRangeIsRefused(t *testing.T) {
	for _, v := range []string{"4097", "-5", "99999999999"} {
		_, err := parse([]string{"--upload-area", v}, io.Discard)
		if err == nil || !strings.Contains(err.Error(), "--upload-area") {
			t.Errorf("parse(--upload-area %s): got %v, want a refusal naming --upload-area", v, err)
		}
	}
	for _, v := range []string{"0", "-1", "4096", "1073741824"} {
		if _, err := parse([]string{"--upload-area", v}, io.Discard); err != nil {
			t.Errorf("parse(--upload-area %s): got %v, want it taken", v, err)
		}
	}
}
