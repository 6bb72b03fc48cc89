package remote_test

import (
	"fmt"
	"os"
	"strings"
	"testing"

	lanes "github.com/lanesched/lanes"
	"github.com/lanesched/lanes/remote/internal/cluster"
	"github.com/lanesched/lanes/remote/internal/dataplane"
	"github.com/lanesched/lanes/remote/internal/front"
	"github.com/lanesched/lanes/remote/internal/host"
	"github.com/lanesched/lanes/remote/internal/system"
	"github.com/lanesched/lanes/remote/internal/wire"
)

// TestLaneHostDocsStateTheBounds: docs/lane-hosts.md's "Defaults and
// bounds" states every default and bound a front or a host applies, which
// package remote does not export: each row's value is the code's.
func TestLaneHostDocsStateTheBounds(t *testing.T) {
	b, err := os.ReadFile("../docs/lane-hosts.md")
	if err != nil {
		t.Fatal(err)
	}
	doc := string(b)
	i := strings.Index(doc, "## Defaults and bounds")
	if i < 0 {
		t.Fatal(`docs/lane-hosts.md has no "## Defaults and bounds"`)
	}
	section := doc[i:]
	section = section[:strings.Index(section[3:], "\n## ")+3]
	rows := []struct {
		what  string
		value any
	}{
		{"address fronts and hosts listen on", system.DefaultAddress},
		{"a host's heartbeat", host.DefaultHeartbeat},
		{"how long a host may stay silent", front.DefaultLostAfter},
		{"how long a lost host's address is kept", front.DefaultPruneAfter},
		{"fronts one host serves at once", host.DefaultMaxFronts},
		{"how long a front may send nothing", host.DefaultSilentFront},
		{"templated batches a host keeps per epoch", wire.MaxTemplates},
		{"a same-host data plane's ring", dataplane.DefaultRingBytes},
		{"a same-host data plane's upload area", dataplane.DefaultUploadAreaBytes},
		{"how often the automanaged provider checks its seeds", cluster.DefaultRefresh},
		{"a tenant's name through a front", wire.MaxTenantName},
		{"a program's name through a front", wire.MaxProgramName},
		{"entries of one batch on the wire", wire.MaxEntries},
		{"bytes of one upload, one read, or one staged slot", wire.MaxHostBytes},
		{"a front's modules", wire.MaxModules},
		{"one module's image", wire.MaxModuleBytes},
		{"the wire protocol version", wire.Protocol},
		{"the line a lane host prints first", wire.ListeningLine},
		{"the environment variable that sends protoactor-go's remote log", cluster.RemoteLogEnv},
		{"the cluster kind a lane host registers", cluster.HostKind},
		{"the rate a front assumes for its uploads in flight", front.ReadRate},
		{"one call in this many has its round trip sampled", front.SampleEvery},
		{"rows of one receipt on the wire", wire.MaxRows},
		{"devices one host serves", wire.MaxDevices},
		{"bytes one read moves through a front", wire.MaxReadBytes},
		{"staged programs one tenant holds on a host", wire.MaxStagedPerTenant},
		{"bytes of one library call's parameters on the wire", wire.MaxCallParams},
	}
	for _, r := range rows {
		line := ""
		for _, l := range strings.Split(section, "\n") {
			if strings.HasPrefix(l, "| "+r.what) {
				line = l
			}
		}
		if line == "" {
			t.Errorf("no row %q", r.what)
			continue
		}
		if want := fmt.Sprintf("| `%v`", r.value); !strings.Contains(line, want) {
			t.Errorf("row %q: %q, want the value %s", r.what, line, want)
		}
	}
	if lanes.MaxTenantName != wire.MaxTenantName || lanes.MaxProgramName != wire.MaxProgramName {
		t.Errorf("the front door's name bounds (%d, %d) are not a front's (%d, %d)", lanes.MaxTenantName, lanes.MaxProgramName, wire.MaxTenantName, wire.MaxProgramName)
	}
}
