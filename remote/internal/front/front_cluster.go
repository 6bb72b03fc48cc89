// A front's hosts from its cluster: a member joined as it appears, left
// out of placement when it leaves the membership, rejoined only while it
// is a member.

package front

import (
	"context"
	"fmt"
	"slices"
	"time"

	wire "github.com/lanesched/lanes/remote/internal/wire"
)

// AllLinks is every host the front knows now.
func (f *Front) AllLinks() []*Link {
	if p := f.links.Load(); p != nil {
		return *p
	}
	return nil
}

// clusterHosts takes the cluster's hosts now: a new member gets a link
// (and is joined at once), a known one is marked listed or not.
func (f *Front) clusterHosts(hosts []string) {
	f.linksMu.Lock()
	defer f.linksMu.Unlock()
	if f.stopped.Load() {
		return
	}
	now := f.AllLinks()
	listed := make(map[string]bool, len(hosts))
	for _, a := range hosts {
		listed[a] = true
	}
	known := map[string]bool{}
	for _, l := range now {
		at := l.at.Load()
		if at == nil || *at == "" {
			continue
		}
		known[*at] = true
		if l.fromCluster {
			if was := l.listed.Swap(listed[*at]); was != listed[*at] {
				if !listed[*at] {
					l.unlistedAt.Store(time.Now().UnixNano())
				}
				l.event("membership")
				if listed[*at] {
					f.cfg.Logf("host %s is a member of cluster %s again", l.Name, f.cfg.Cluster.Name)
				} else {
					f.cfg.Logf("host %s left cluster %s: no new tenants go to it", l.Name, f.cfg.Cluster.Name)
				}
			}
		}
	}
	var added []*Link
	for _, a := range hosts {
		if known[a] {
			continue // a fixed or launched host that is a member too
		}
		if host, _, err := wire.SplitAddress(a); err != nil || f.cfg.TLS == nil && !wire.IsLoopback(host) {
			if !f.refusedMembers[a] {
				f.refusedMembers[a] = true
				f.cfg.Logf("cluster %s lists a host at %s: not joined (%s)", f.cfg.Cluster.Name, a,
					map[bool]string{true: "not a host:port address", false: "not loopback, and this front has no TLS: give FrontConfig.TLS (LoadTLS) to reach hosts off this machine"}[err != nil])
			}
			continue
		}
		known[a] = true // one link an address, however many members name it
		l := newLink(f, a, nil)
		l.fromCluster = true
		l.listed.Store(true)
		added = append(added, l)
	}
	if len(added) == 0 {
		return
	}
	next := append(append(make([]*Link, 0, len(now)+len(added)), now...), added...)
	f.links.Store(&next)
	for _, l := range added {
		f.wg.Add(1)
		go l.supervise()
	}
}

// awaitCluster waits until a host of the cluster serves and every member
// known then answered (registered or refused), or until deadline fires.
func (f *Front) awaitCluster(ctx context.Context, until time.Time) error {
	tick := time.NewTicker(5 * time.Millisecond)
	defer tick.Stop()
	deadline := time.After(time.Until(until))
	for {
		serving, waiting := 0, 0
		for _, l := range f.AllLinks() {
			if !l.fromCluster || !l.listed.Load() {
				continue
			}
			select {
			case <-l.firstAnswer:
				if l.Status().Health == HostServing {
					serving++
				}
			default:
				if l.credentialRefused() == nil {
					waiting++ // one whose address refuses this front's credential will not answer
				}
			}
		}
		if serving > 0 && waiting == 0 {
			return nil
		}
		select {
		case <-tick.C:
		case <-ctx.Done():
			return ctx.Err()
		case <-deadline:
			if serving > 0 {
				return nil // the slow ones join when they can
			}
			where := fmt.Sprintf("seeds %v", f.cfg.Cluster.Seeds)
			if f.cfg.Cluster.Discovery != nil {
				where = "its provider"
			}
			return fmt.Errorf("%w: no host of cluster %s registered within %v (are hosts up and members, with this cluster's name and %s? can they reach this front at %s? see Advertise on both sides)",
				wire.ErrNoHost, f.cfg.Cluster.Name, f.cfg.JoinTimeout, where, f.Sys.Addr)
		}
	}
}

// awaitListed waits while a cluster's host is not a member; false when
// the front stops.
func (l *Link) awaitListed() bool {
	tick := time.NewTicker(100 * time.Millisecond)
	defer tick.Stop()
	for !l.listed.Load() {
		if l.pruned.Load() {
			return false
		}
		select {
		case <-l.events:
		case <-tick.C:
		case <-l.F.quit:
			return false
		}
	}
	return true
}

// unlisted reports whether the link is the cluster's and its host is not
// a member now.
func (l *Link) unlisted() bool { return l.fromCluster && !l.listed.Load() }

// DefaultPruneAfter is FrontConfig.PruneAfter's default.
const DefaultPruneAfter = 30 * time.Second

// pruneGone forgets the cluster's hosts gone for PruneAfter: not members,
// not serving, no tenant placed there (Forget frees a tenant's place).
func (f *Front) pruneGone() {
	now := time.Now().UnixNano()
	var gone []*Link
	for _, l := range f.AllLinks() {
		if l.unlisted() && l.Serving.Load() == 0 && now-l.unlistedAt.Load() > int64(f.cfg.PruneAfter) {
			gone = append(gone, l)
		}
	}
	if len(gone) == 0 {
		return
	}
	f.linksMu.Lock()
	defer f.linksMu.Unlock()
	f.mu.Lock()
	defer f.mu.Unlock()
	held := map[*Link]bool{}
	for _, pl := range f.tenants {
		held[pl.link] = true
	}
	keep := make([]*Link, 0, len(f.AllLinks()))
	for _, l := range f.AllLinks() {
		if slices.Contains(gone, l) && !held[l] && l.unlisted() {
			l.pruned.Store(true)
			l.event("pruned") // its supervisor, waiting for it to be a member again, ends
			for t, was := range f.last {
				if was == l {
					delete(f.last, t)
				}
			}
			continue
		}
		keep = append(keep, l)
	}
	f.links.Store(&keep)
}
