package main

import (
	"bytes"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/lanesched/lanes/remote"
	"github.com/lanesched/lanes/remote/hostcmd"
)

// TestMain runs this test binary as a lane host when the front launches it
// (what main does), and keeps the test's token off the user's.
func TestMain(m *testing.M) {
	if os.Getenv(hostEnv) == "1" {
		os.Exit(hostcmd.Main(hostcmd.Options{}))
	}
	dir, err := os.MkdirTemp("", "serving")
	if err != nil {
		os.Exit(1)
	}
	_ = os.Setenv(remote.TokenFileEnv, filepath.Join(dir, "token"))
	code := m.Run()
	_ = os.RemoveAll(dir)
	os.Exit(code)
}

// TestOneFlagMovesTheLanes: the same serving code, in this process and on
// two lane hosts, serves both tenants every step, correctly.
func TestOneFlagMovesTheLanes(t *testing.T) {
	tenantLine := regexp.MustCompile(`(?m)^(tenant-[ab]): (\d+) steps, \d+ of (\d+) entries replayed, every element (\d+) \(want (\d+)\)$`)
	var seen []string
	for _, args := range [][]string{{"--steps", "50"}, {"--steps", "50", "--hosts", "2"}} {
		var out, errOut bytes.Buffer
		if code := run(args, &out, &errOut); code != 0 {
			t.Fatalf("serving %v: exit %d\n%s%s", args, code, out.String(), errOut.String())
		}
		lines := tenantLine.FindAllStringSubmatch(out.String(), -1)
		if len(lines) != 2 {
			t.Fatalf("serving %v printed\n%s\nwant a line per tenant", args, out.String())
		}
		var got []string
		for _, l := range lines {
			if l[2] != "50" || l[3] != "200" || l[4] != "200" || l[5] != "200" {
				t.Errorf("serving %v: %q: want 50 steps, 200 entries, every element 200", args, l[0])
			}
			got = append(got, l[1]+" "+l[2]+" "+l[4])
		}
		if seen != nil && strings.Join(seen, ",") != strings.Join(got, ",") {
			t.Errorf("serving %v: got %v, in process %v: the two sides differ", args, got, seen)
		}
		seen = got
		want := "in this process"
		if len(args) > 2 {
			want = "on lane hosts (hosts: 2)"
		}
		if !strings.Contains(out.String(), want) {
			t.Errorf("serving %v printed %q, want it to say %q", args, out.String(), want)
		}
	}
}

// TestBadFlags: bad flags exit 2 and run nothing.
func TestBadFlags(t *testing.T) {
	for _, args := range [][]string{{"--hosts", "-1"}, {"--steps", "0"}, {"--nope"}} {
		var out, errOut bytes.Buffer
		if code := run(args, &out, &errOut); code != 2 || out.Len() != 0 {
			t.Errorf("serving %v: exit %d, printed %q; want 2 and nothing", args, code, out.String())
		}
	}
}
