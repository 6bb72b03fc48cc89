// Per tenant: the names metrics carry, and what each tenant's telemetry
// lost.

package telemetry

import (
	"sync"
	"unicode"
	"unicode/utf8"
)

// otherTenants is the lanes.tenant value of every tenant past
// Config.MaxTenants.
const otherTenants = "other"

// invalidTenant is the lanes.tenant value of a name no tenant may have
// (refused as such by the scheduler): telemetry never carries bytes a
// caller chose that are not a valid name (a label Prometheus refuses, a
// megabyte attribute), and they take no place among MaxTenants.
const invalidTenant = "invalid"

// maxTenantName is the longest tenant name (actors.MaxTenantName: this
// package sits below actors, which feeds it).
const maxTenantName = 256

// label is the value a tenant's name takes in telemetry: itself when it is
// a name a tenant may have (as actors checks it: 1 to 256 bytes of
// printable UTF-8, no space at either end), else invalidTenant.
func label(name string) string {
	if name == "" || len(name) > maxTenantName || !utf8.ValidString(name) || name[0] == ' ' || name[len(name)-1] == ' ' {
		return invalidTenant
	}
	for _, r := range name {
		if !unicode.IsPrint(r) {
			return invalidTenant
		}
	}
	return name
}

// tenantNames gives each tenant the lanes.tenant value metrics carry: its
// own name for the first max tenants seen, "other" after them. Safe for
// concurrent use (lanes hand work over from their own threads).
type tenantNames struct {
	mu   sync.Mutex
	max  int
	seen map[string]bool
}

func (n *tenantNames) of(name string) string {
	if name = label(name); name == invalidTenant {
		return name
	}
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.seen[name] {
		return name
	}
	if len(n.seen) < n.max {
		if n.seen == nil {
			n.seen = map[string]bool{}
		}
		n.seen[name] = true
		return name
	}
	return otherTenants
}

// TenantDrops is what one tenant's telemetry lost, and why.
type TenantDrops struct {
	// Behind is its work (submissions, refusals) dropped unrecorded: the
	// recorder was behind and this tenant had the most waiting.
	Behind uint64
	// SpansQueueFull are its spans dropped because the export queue was
	// full and this tenant held the most of it; SpansExport its spans in
	// exports that failed.
	SpansQueueFull, SpansExport uint64
	// Summarised are its refusals folded into an earlier refusal's span
	// (lanes.refusals counts them there): not lost, but not a span each.
	Summarised uint64
}

// dropCounts is every tenant's TenantDrops, by the tenant's lanes.tenant
// value ("" for lane quarantines, which belong to no tenant). Safe for
// concurrent use.
type dropCounts struct {
	names *tenantNames
	mu    sync.Mutex
	by    map[string]*TenantDrops
}

// add counts n of a tenant's items or spans with fn.
func (d *dropCounts) add(tenant string, fn func(*TenantDrops)) {
	if tenant != "" {
		tenant = d.names.of(tenant)
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	td := d.by[tenant]
	if td == nil {
		if d.by == nil {
			d.by = map[string]*TenantDrops{}
		}
		td = &TenantDrops{}
		d.by[tenant] = td
	}
	fn(td)
}

// snapshot copies the counts.
func (d *dropCounts) snapshot() map[string]TenantDrops {
	d.mu.Lock()
	defer d.mu.Unlock()
	out := make(map[string]TenantDrops, len(d.by))
	for k, v := range d.by {
		out[k] = *v
	}
	return out
}
