package main

import (
	"bytes"
	"encoding/json"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/santhosh-tekuri/jsonschema/v6"
)

// TestMain lets a test run this package's binary as lanedemo itself: with
// LANEDEMO_CHILD_ARGS set, the test binary is lanedemo with those
// arguments (the signal tests send it signals).
func TestMain(m *testing.M) {
	if args, ok := os.LookupEnv("LANEDEMO_CHILD_ARGS"); ok {
		os.Exit(run(strings.Fields(args), os.Stdout, os.Stderr))
	}
	os.Exit(m.Run())
}

func TestBadFlagsExit2WithOneLine(t *testing.T) {
	dir := t.TempDir()
	for _, args := range [][]string{{"--lanes", "x"}, {"--nope"}, {"--mode", "spiral"}, {"--fault-sticky", "3"}, {"extra"}, {"--device", "cuda"},
		{"--spin", "1001ms"}, {"--spin", "1h"}, {"--transfers", "bogus"}, {"--fault-hang", "NaN"}, {"--fault-sticky", "NaN"}, {"--warmup", "1000000000"},
		{"--concurrency", "1024", "--tenants", "10000"}, {"--json", "/nonexistent/dir/x.json"}, {"--trace-file", "/nonexistent/dir/t.json"},
		{"--cpuprofile", dir}, {"--duration", "-1s"}, {"--hang-timeout", "-1s"}, {"--rebuild-window", "-1s"}, {"--rebuild-max-failures", "-2"},
		{"--mode", "open", "--rate", "NaN"}, {"--rate", "Inf"}, {"--rate", "-5"}, {"--trace-successes", "NaN"}, {"--stream-depth", "-2"},
		{"--rebuild-backoff", "2s", "--rebuild-max-backoff", "1s"}, {"--warmup-timeout", "-1s"}, {"--trace-file", "-"},
		{"--json", filepath.Join(dir, "a.json"), "--cpuprofile", filepath.Join(dir, "a.json")},
		{"--join-at", "1s"}, {"--cluster", "--in-process"}, {"--cluster", "--duration", "2s", "--leave-at", "3s"}, {"--cluster", "--kill-at", "-1s"},
		{"--cluster", "--devices", "1", "--leave-at", "1s", "--kill-at", "2s"}, {"--cluster", "--mode", "open"}} {
		var out, errb bytes.Buffer
		if code := run(args, &out, &errb); code != 2 {
			t.Errorf("%v: got exit %d, want 2 (%s)", args, code, errb.String())
		}
		msg := strings.TrimSpace(errb.String())
		if lines := strings.Count(msg, "\n"); lines != 0 || !strings.HasPrefix(msg, "lanedemo") {
			t.Errorf("%v: got stderr %q, want one error line starting lanedemo", args, msg)
		}
		named := !strings.HasPrefix(args[0], "-") // a stray argument names itself
		for _, a := range args {
			named = named || strings.HasPrefix(a, "--") && strings.Contains(msg, a)
		}
		if !named {
			t.Errorf("%v: got %q, want the message to name the flag", args, msg)
		}
	}
	if entries, _ := os.ReadDir(dir); len(entries) != 0 {
		t.Errorf("checking output paths: got %d files created, want none before a run", len(entries))
	}
}

func TestHelpListsExitCodesTimingsAndClocks(t *testing.T) {
	var out, errb bytes.Buffer
	if code := run([]string{"--help"}, &out, &errb); code != 0 {
		t.Fatalf("--help: got exit %d, want 0", code)
	}
	for _, want := range []string{"-eager-tenants", "exit status", "130, 143", "  4  the run ended early", "completion (the step's device time)",
		"verification (", "zero costs nothing", "none computes no byte", "SIGTERM"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("--help: got no %q in:\n%s", want, out.String())
		}
	}
}

// reportSchema compiles docs/lanedemo-report.schema.json.
func reportSchema(t *testing.T) *jsonschema.Schema {
	t.Helper()
	c := jsonschema.NewCompiler()
	sch, err := c.Compile(filepath.Join("..", "..", "docs", "lanedemo-report.schema.json"))
	if err != nil {
		t.Fatalf("compiling the report's JSON Schema: got err %v, want nil", err)
	}
	return sch
}

// checkReport parses a JSON report and validates it against the schema.
func checkReport(t *testing.T, sch *jsonschema.Schema, raw []byte) map[string]any {
	t.Helper()
	v, err := jsonschema.UnmarshalJSON(bytes.NewReader(raw))
	if err != nil {
		t.Fatalf("the JSON report: got err %v parsing it, want JSON alone:\n%s", err, raw)
	}
	if err := sch.Validate(v); err != nil {
		t.Fatalf("the JSON report against docs/lanedemo-report.schema.json: got %v, want it valid", err)
	}
	var m map[string]any
	_ = json.Unmarshal(raw, &m)
	return m
}

// TestHostsReportFollowsItsSchema: a --host-per-gpu run (here in process,
// which needs no lanehost binary) writes the same lanedemo-report/1, with
// its hosts section.
func TestHostsReportFollowsItsSchema(t *testing.T) {
	sch := reportSchema(t)
	var out, errb bytes.Buffer
	code := run([]string{"--host-per-gpu", "--in-process", "--devices", "2", "--tenants", "2", "--duration", "300ms", "--quiet", "--json", "-"}, &out, &errb)
	if code != 0 {
		t.Fatalf("--host-per-gpu --in-process --json -: got exit %d, want 0:\n%s", code, errb.String())
	}
	m := checkReport(t, sch, out.Bytes())
	hosts, _ := m["hosts"].(map[string]any)
	if m["schema"] != "lanedemo-report/1" || m["exactly_once"] != true || hosts == nil || len(hosts["hosts"].([]any)) != 2 || m["replayed_commands"].(float64) == 0 {
		t.Fatalf("got schema %v, exactly_once %v, hosts %v, replayed %v; want lanedemo-report/1, true, 2 rows, replays", m["schema"], m["exactly_once"], hosts, m["replayed_commands"])
	}
}

// TestJSONReportFollowsItsSchema: --json - writes the JSON alone to stdout
// (the table to stderr), and it, a hostile run's and a run that ended
// early all follow the schema in docs/, with the run's settings in them.
func TestJSONReportFollowsItsSchema(t *testing.T) {
	sch := reportSchema(t)
	var out, errb bytes.Buffer
	code := run([]string{"--clock", "zero", "--duration", "300ms", "--tenants", "2", "--eager-tenants", "1", "--lanes", "2", "--quiet", "--json", "-", "--seed", "7"}, &out, &errb)
	if code != 0 {
		t.Fatalf("a short run with --json -: got exit %d, want 0:\n%s", code, errb.String())
	}
	m := checkReport(t, sch, out.Bytes())
	if m["exactly_once"] != true || m["settings"].(map[string]any)["seed"] != 7.0 || !strings.Contains(errb.String(), "exactly once:") {
		t.Fatalf("got exactly_once %v, settings.seed %v, the table on stderr %v; want true, 7, true", m["exactly_once"], m["settings"].(map[string]any)["seed"], strings.Contains(errb.String(), "exactly once:"))
	}
	path := filepath.Join(t.TempDir(), "r.json")
	code = run([]string{"--clock", "zero", "--duration", "300ms", "--tenants", "2", "--lanes", "2", "--hostile", "flood", "--quiet", "--json", path}, io.Discard, io.Discard)
	raw, _ := os.ReadFile(path)
	if code != 0 {
		t.Fatalf("a hostile run: got exit %d, want 0", code)
	}
	checkReport(t, sch, raw)
	out.Reset()
	code = run([]string{"--clock", "zero", "--duration", "2s", "--fault-launch", "0.05", "--no-rebuild", "--quiet", "--json", "-"}, &out, io.Discard)
	m = checkReport(t, sch, out.Bytes())
	if code != 4 || !strings.Contains(m["ended_early"].(string), "every lane was out") {
		t.Fatalf("every lane out: got exit %d, ended_early %q; want 4 and why", code, m["ended_early"])
	}
}

// syncBuffer is a buffer the child's output goroutine writes while the
// test reads it.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// child starts this test binary as lanedemo with args.
func child(t *testing.T, args string) (*exec.Cmd, *syncBuffer, *syncBuffer) {
	t.Helper()
	cmd := exec.Command(os.Args[0])
	cmd.Env = append(os.Environ(), "LANEDEMO_CHILD_ARGS="+args)
	out, errb := &syncBuffer{}, &syncBuffer{}
	cmd.Stdout, cmd.Stderr = out, errb
	if err := cmd.Start(); err != nil {
		t.Fatalf("starting lanedemo: got err %v, want nil", err)
	}
	return cmd, out, errb
}

// waitFor waits until the child's stderr shows s.
func waitFor(t *testing.T, errb *syncBuffer, s string) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for !strings.Contains(errb.String(), s) {
		if time.Now().After(deadline) {
			t.Fatalf("lanedemo: got no %q on stderr, want it printed; stderr:\n%s", s, errb.String())
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// TestSignalsStopTheRunAndReport: SIGTERM in the measured phase and SIGINT
// in the warm-up both end the run with its report (saying so, exactly once
// held) and exit 128+signal; a second signal exits at once.
func TestSignalsStopTheRunAndReport(t *testing.T) {
	sch := reportSchema(t)
	dir := t.TempDir()
	for _, tc := range []struct {
		sig    syscall.Signal
		args   string
		when   string // the progress line's words before the signal
		during string
	}{
		{syscall.SIGTERM, "--clock zero --duration 60s --tenants 4 --lanes 2", "steps/s", "the measured phase"},
		{syscall.SIGINT, "--clock zero --duration 60s --tenants 3000 --lanes 2 --warmup 50", "warm-up:", "the warm-up"},
	} {
		path := filepath.Join(dir, tc.sig.String()+".json")
		cmd, out, errb := child(t, tc.args+" --json "+path)
		waitFor(t, errb, tc.when)
		_ = cmd.Process.Signal(tc.sig)
		err := cmd.Wait()
		code := cmd.ProcessState.ExitCode()
		if code != 128+int(tc.sig) {
			t.Fatalf("%v: got exit %d (%v), want %d; stderr:\n%s", tc.sig, code, err, 128+int(tc.sig), errb.String())
		}
		want := "ENDED EARLY: interrupted by " + map[syscall.Signal]string{syscall.SIGTERM: "SIGTERM", syscall.SIGINT: "SIGINT"}[tc.sig] + " during " + tc.during
		if !strings.Contains(out.String(), want) || !strings.Contains(out.String(), "exactly once:") || strings.Contains(out.String(), "(FAILED)") {
			t.Fatalf("%v: got this report, want %q and exactly once held:\n%s", tc.sig, want, out.String())
		}
		raw, _ := os.ReadFile(path)
		m := checkReport(t, sch, raw)
		if !strings.Contains(m["ended_early"].(string), tc.during) || m["exactly_once"] != true {
			t.Fatalf("%v: the JSON report says ended_early %q, exactly_once %v; want %q, true", tc.sig, m["ended_early"], m["exactly_once"], tc.during)
		}
	}
	cmd, _, errb := child(t, "--clock zero --duration 60s --tenants 3000 --lanes 2 --warmup 50")
	waitFor(t, errb, "warm-up:")
	_ = cmd.Process.Signal(syscall.SIGTERM)
	waitFor(t, errb, "stopping")
	start := time.Now()
	_ = cmd.Process.Signal(syscall.SIGTERM)
	_ = cmd.Wait()
	if code := cmd.ProcessState.ExitCode(); code != 143 || time.Since(start) > 5*time.Second {
		t.Fatalf("a second SIGTERM: got exit %d after %v, want 143 at once", code, time.Since(start))
	}
}

// TestReadmeCommandsParse: every lanedemo command line the README and the
// guides under docs/ show parses (its flags exist and their values have the
// flags' types).
func TestReadmeCommandsParse(t *testing.T) {
	root := filepath.Join("..", "..")
	guides, err := filepath.Glob(filepath.Join(root, "docs", "*.md"))
	if err != nil || len(guides) == 0 {
		t.Fatalf("listing docs/*.md: got %d guides, err %v; want some and nil", len(guides), err)
	}
	checked, perFile := 0, map[string]int{}
	for _, path := range append([]string{filepath.Join(root, "README.md")}, guides...) {
		raw, err := os.ReadFile(path)
		if err != nil {
			t.Fatalf("reading %s: got err %v, want nil", path, err)
		}
		name, _ := filepath.Rel(root, path)
		n := checkLanedemoLines(t, name, string(raw))
		perFile[name] = n
		checked += n
	}
	// The guides show the demo's modes (lane hosts, a cluster, hostile
	// tenants, faults, soaks, profiles, telemetry, a module of your own):
	// fewer lines than this means the extraction broke or the lines went.
	if checked < 25 {
		t.Fatalf("got %d lanedemo command lines in README.md and docs/*.md (%v), want at least 25 (is the extraction broken?)", checked, perFile)
	}
	if perFile["README.md"] < 1 {
		t.Fatalf("got no lanedemo command line in README.md, want at least 1 (is the extraction broken?)")
	}
}

// checkLanedemoLines parses every lanedemo command line of one Markdown
// file (in code blocks and in inline code) and says how many it checked.
func checkLanedemoLines(t *testing.T, name, text string) int {
	t.Helper()
	var texts, prose []string
	fenced := false
	for _, line := range strings.Split(text, "\n") {
		switch {
		case strings.HasPrefix(line, "```"):
			fenced = !fenced
		case fenced || strings.HasPrefix(line, "    "): // a code block's line
			texts = append(texts, line)
		default:
			prose = append(prose, line)
		}
	}
	for _, m := range regexp.MustCompile("`([^`]+)`").FindAllStringSubmatch(strings.Join(prose, " "), -1) {
		texts = append(texts, m[1])
	}
	checked := 0
	for _, text := range texts {
		i := strings.LastIndex(text, "lanedemo ")
		if i < 0 {
			continue
		}
		rest := text[i+len("lanedemo "):]
		if j := strings.Index(rest, "#"); j >= 0 {
			rest = rest[:j]
		}
		args := strings.Fields(rest)
		if len(args) == 0 || !strings.HasPrefix(args[0], "-") {
			continue
		}
		if _, _, err := parseArgs(args, io.Discard); err != nil {
			t.Errorf("%s's %q: got %v, want it to parse", name, "lanedemo "+rest, err)
		}
		checked++
	}
	return checked
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
