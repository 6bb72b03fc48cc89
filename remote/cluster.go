// A cluster of lane hosts and fronts: its configuration, as a host and a
// front take it.

package remote

import (
	"net"
	"time"

	actorcluster "github.com/asynkron/protoactor-go/cluster"

	"github.com/lanesched/lanes/remote/internal/cluster"
)

// ClusterConfig makes a host a member of a named cluster, and a front a
// client that learns the cluster's hosts from it: hosts that join are
// joined (and take new tenants at once), hosts that leave the membership
// take none. Give every host and front of a cluster the same Name and
// Seeds (or provider).
type ClusterConfig struct {
	// Name is the cluster's; members of other clusters are ignored.
	Name string
	// Discovery finds the members: any protoactor-go cluster provider
	// (etcd, Consul, Kubernetes; see docs/cluster.md). nil: the automanaged
	// provider over Seeds, which needs no service of its own.
	Discovery actorcluster.ClusterProvider
	// Seeds are the automanaged membership endpoints (host:port) of every
	// host that may join, its own included: a provider checks each every
	// Refresh, and a host is a member while its endpoint answers.
	Seeds []string
	// Membership is a host's own automanaged endpoint (host:port, one of
	// Seeds): plain HTTP that says who the host is (not the work's
	// connection, which stays mutual TLS off loopback). Loopback unless
	// the host has TLS. Fronts leave it empty.
	Membership string
	// MembershipListener, if set, is the listener a host's membership
	// endpoint serves on, opened by the caller and held since before the
	// Seeds were handed out (inherited from whoever started the process,
	// systemd's socket activation, a test), so that no one else can take
	// its port meanwhile; Serve takes it over (it closes it when the
	// process's endpoint goes, or when Serve fails). Membership
	// then defaults to its address. nil: the host listens on Membership.
	MembershipListener net.Listener
	// Refresh is how often the automanaged provider checks the Seeds; 0:
	// 500 ms. A killed host leaves the membership within about
	// Refresh (a hung one within Refresh and 2 s).
	Refresh time.Duration
}

// room is the configuration as cluster takes it.
func (c *ClusterConfig) room() *cluster.Config {
	if c == nil {
		return nil
	}
	return &cluster.Config{
		Name:               c.Name,
		Discovery:          c.Discovery,
		Seeds:              c.Seeds,
		Membership:         c.Membership,
		MembershipListener: c.MembershipListener,
		Refresh:            c.Refresh,
	}
}
