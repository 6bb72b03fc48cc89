package main

import (
	"bytes"
	"io"
	"strings"
	"testing"
)

func TestBadFlagsExit2WithOneLine(t *testing.T) {
	for _, args := range [][]string{{"--lanes", "x"}, {"--nope"}, {"--mode", "spiral"}, {"--fault-sticky", "3"}, {"extra"}, {"--device", "cuda"}, {"--spin", "-1s"}, {"--transfers", "bogus"}} {
		var out, errb bytes.Buffer
		if code := run(args, &out, &errb); code != 2 {
			t.Errorf("%v: got exit %d, want 2 (%s)", args, code, errb.String())
		}
		if lines := strings.Count(strings.TrimSpace(errb.String()), "\n"); lines != 0 || errb.Len() == 0 {
			t.Errorf("%v: got stderr %q, want one error line", args, errb.String())
		}
	}
}

func TestHelp(t *testing.T) {
	var out, errb bytes.Buffer
	if code := run([]string{"--help"}, &out, &errb); code != 0 || !strings.Contains(out.String(), "--eager-tenants") && !strings.Contains(out.String(), "-eager-tenants") {
		t.Fatalf("--help: got exit %d and this output, want exit 0 and the -eager-tenants flag listed:\n%s", code, out.String())
	}
}

func TestShortRunJSON(t *testing.T) {
	var out, errb bytes.Buffer
	code := run([]string{"--clock", "zero", "--duration", "300ms", "--tenants", "2", "--eager-tenants", "1", "--lanes", "2", "--quiet", "--json", "-"}, &out, &errb)
	if code != 0 || !strings.Contains(out.String(), `"ExactlyOnce": true`) {
		t.Fatalf("a short run with --json -: got exit %d and this output, want exit 0 and \"ExactlyOnce\": true:\n%s\n%s", code, out.String(), errb.String())
	}
}

// FuzzFlags parses arbitrary command lines: never a panic; either a valid
// configuration or an error.
func FuzzFlags(f *testing.F) {
	f.Add("--lanes 4 --tenants 8")
	f.Add("--mode open --rate 100 --fault-sticky 0.5")
	f.Add("--json - --otlp-endpoint 127.0.0.1:4317 --resource a=b")
	f.Fuzz(func(t *testing.T, line string) {
		fl, err := parseFlags(strings.Fields(line), io.Discard)
		if err == nil && !fl.help {
			if verr := fl.cfg.Validate(); verr != nil {
				t.Fatalf("parseFlags(%q): got accepted with an invalid configuration (%v), want a valid configuration or an error", line, verr)
			}
		}
	})
}
