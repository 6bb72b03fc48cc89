// The actor system under a front or a lane host: protoactor-go's remote on
// an address, loopback unless mutual TLS is configured.

package system

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"net"
	"os"
	"strconv"
	"strings"
	"sync"

	"github.com/asynkron/protoactor-go/actor"
	cluster "github.com/lanesched/lanes/remote/internal/cluster"

	wire "github.com/lanesched/lanes/remote/internal/wire"

	premote "github.com/asynkron/protoactor-go/remote"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
)

// DefaultAddress is where fronts and hosts listen unless told otherwise:
// loopback, a port the system picks.
const DefaultAddress = "127.0.0.1:0"

// maxMessage is the largest gRPC message fronts and hosts accept; the
// remote packs many messages into one, and a front keeps at most
// maxBytesInFlight of uploads and reads in flight to a host.
const maxMessage = 768 << 20

// MaxBytesInFlight bounds the upload bytes (of batches sent whole) and
// read bytes a front has in flight to one host; a call that would pass it
// waits for room. Heartbeats share the connection with them, so it also
// bounds how long a heartbeat can queue behind bulk bytes.
const MaxBytesInFlight = 64 << 20

// The process's endpoint. protoactor-go's remote sets gRPC's process-wide
// logger each time one starts, and its graceful shutdown races with its
// own endpoint writers, so a process runs one endpoint, started by its
// first front or host and kept for the life of the process: a front or a
// host that stops only stops its actor, and the next one in the process
// serves on the same endpoint (at the same address and TLS).
var endpoint struct {
	mu        sync.Mutex
	sys       *System
	address   string      // as first asked
	advertise string      // as first asked
	tls       *tls.Config // as first given
	token     Token       // as first loaded (nil with TLS)
	cluster   *cluster.Config
	abandoned bool // a cluster host's start given up while its provider waited
	names     map[string]bool
}

// System is the process's actor system and its remote endpoint.
type System struct {
	Actors *actor.ActorSystem
	remote *premote.Remote
	Addr   string              // the address peers reach it at
	Bound  string              // the address it listens on (addr, unless advertised)
	Member *cluster.Membership // the cluster it joined; nil: none
	Guard  *Guard              // what it admits, and what it refused
}

// EndpointConfig is what a front or a host asks of the process's endpoint.
type EndpointConfig struct {
	Address, Advertise string
	Tls                *tls.Config
	TokenFile          string // without TLS: the token's file ("" the default)
	Cluster            *cluster.Config
	Logf               func(format string, args ...any)
}

// AcquireSystem returns the process's endpoint for an actor named name,
// starting it on address (DefaultAddress when empty) the first time. A
// non-loopback address needs tlsCfg, whose certificates then secure every
// connection both ways; without TLS the token authenticates every
// connection, loopback included. With a cluster (a host's), the endpoint
// joins it as a member. Release it with releaseSystem(name).
func AcquireSystem(ctx context.Context, ec EndpointConfig, name string) (*System, error) {
	address, advertise, tlsCfg, clusterCfg := ec.Address, ec.Advertise, ec.Tls, ec.Cluster
	if address == "" {
		address = DefaultAddress
	}
	host, port, err := wire.SplitAddress(address)
	if err != nil {
		return nil, err
	}
	if tlsCfg == nil && !wire.IsLoopback(host) {
		return nil, fmt.Errorf("%w: address %s is not loopback: give a mutual TLS configuration (LoadTLS) to listen on it, or listen on 127.0.0.1", wire.ErrConfig, address)
	}
	if advertise != "" {
		ahost, aport, err := wire.SplitAddress(advertise)
		if err != nil {
			return nil, fmt.Errorf("advertised address: %w", err)
		}
		if aport == 0 {
			return nil, fmt.Errorf("%w: advertised address %s: give the port peers dial", wire.ErrConfig, advertise)
		}
		if tlsCfg == nil && !wire.IsLoopback(ahost) {
			return nil, fmt.Errorf("%w: advertised address %s is not loopback: give a mutual TLS configuration (LoadTLS)", wire.ErrConfig, advertise)
		}
	}
	var tok Token
	if tlsCfg == nil {
		if tok, err = LoadToken(ec.TokenFile); err != nil {
			return nil, err
		}
	}
	endpoint.mu.Lock()
	defer endpoint.mu.Unlock()
	if endpoint.abandoned {
		return nil, fmt.Errorf("%w: a cluster host's start was given up in this process while its provider waited (its remote may still start): start the host in a new process", wire.ErrConfig)
	}
	if s := endpoint.sys; s != nil {
		switch {
		case endpoint.names[name]:
			return nil, fmt.Errorf("%w: a %s already serves in this process: run one front and one lane host per process at most", wire.ErrConfig, name)
		case address != DefaultAddress && address != endpoint.address && address != s.Addr:
			return nil, fmt.Errorf("%w: this process serves on %s already; its fronts and hosts share that one address (asked %s)", wire.ErrConfig, s.Addr, address)
		case advertise != endpoint.advertise:
			return nil, fmt.Errorf("%w: this process's endpoint advertises %q already; its fronts and hosts share it (asked %q)", wire.ErrConfig, endpoint.advertise, advertise)
		case tlsCfg != endpoint.tls:
			return nil, fmt.Errorf("%w: this process's endpoint was started with another TLS configuration; give every front and host of a process the same one", wire.ErrConfig)
		case !tok.equal(endpoint.token):
			return nil, fmt.Errorf("%w: this process's endpoint was started with another token; give every front and host of a process the same token file", wire.ErrConfig)
		case clusterCfg != nil && s.Member != nil && s.Member.HasLeft():
			return nil, fmt.Errorf("%w: %v", wire.ErrConfig, cluster.ErrLeftCluster)
		case clusterCfg != nil && !clusterCfg.Same(endpoint.cluster):
			return nil, fmt.Errorf("%w: this process's endpoint is %s already; a host started in it joins that one, with the same seeds and refresh (asked cluster %q)", wire.ErrConfig, clusterName(endpoint.cluster), clusterCfg.Name)
		}
		endpoint.names[name] = true
		return s, nil
	}
	wireTLS, local := tlsCfg, tlsCfg == nil
	if local {
		if wireTLS, err = LocalTLS(tok); err != nil {
			return nil, err
		}
	}
	g := NewGuard(wireTLS, local, ec.Logf)
	s, err := startSystem(ctx, host, port, advertise, wireTLS, clusterCfg, g)
	if err != nil {
		endpoint.abandoned = errors.Is(err, cluster.ErrProviderLate)
		return nil, err
	}
	endpoint.sys, endpoint.address, endpoint.advertise, endpoint.tls, endpoint.token, endpoint.cluster, endpoint.names = s, address, advertise, tlsCfg, tok, clusterCfg, map[string]bool{name: true}
	return s, nil
}

// ReleaseSystem stops the actor of that name; the endpoint stays for the
// next front or host of the process.
func ReleaseSystem(s *System, name string, pid *actor.PID) {
	if pid != nil {
		_ = s.Actors.Root.StopFuture(pid).Wait()
	}
	endpoint.mu.Lock()
	delete(endpoint.names, name)
	endpoint.mu.Unlock()
}

// clusterName names a cluster configuration in errors.
func clusterName(c *cluster.Config) string {
	if c == nil {
		return "in no cluster"
	}
	return "a member of cluster " + strconv.Quote(c.Name)
}

// portAttempts bounds the tries of an endpoint on port 0: the port the
// system picked is free when probed, and taken back only if another
// process binds it before the remote does (it then picks another).
const portAttempts = 4

func startSystem(ctx context.Context, host string, port int, advertise string, tlsCfg *tls.Config, clusterCfg *cluster.Config, g *Guard) (*System, error) {
	for attempt := 1; ; attempt++ {
		sys, err := startSystemOn(ctx, host, port, advertise, tlsCfg, clusterCfg, g)
		if port != 0 || attempt == portAttempts || !errors.Is(err, errPortTaken) {
			return sys, err
		}
	}
}

// errPortTaken marks a remote that could not listen on the port it was
// given because another process took it meanwhile.
var errPortTaken = errors.New("remote: port taken")

// startSystemOn starts the endpoint once: a probe finds the port (one the
// system picks for port 0) and says at once when it is in use, since
// protoactor-go's remote panics on a port it cannot listen on and says
// nothing of the port it picked when an address is advertised.
func startSystemOn(ctx context.Context, host string, port int, advertise string, tlsCfg *tls.Config, clusterCfg *cluster.Config, g *Guard) (sys *System, err error) {
	address := net.JoinHostPort(host, strconv.Itoa(port))
	probe, err := net.Listen("tcp", address)
	if err != nil {
		return nil, fmt.Errorf("%w: listen on %s: %v", wire.ErrConfig, address, err)
	}
	if port == 0 {
		port = probe.Addr().(*net.TCPAddr).Port
	}
	bound := net.JoinHostPort(host, strconv.Itoa(port))
	_ = probe.Close()
	// gRPC refuses messages over 4 MiB by default, and a refused message
	// breaks the connection; a front bounds the bytes it has in flight to a
	// host (maxBytesInFlight), so no message comes near this.
	sizes := grpc.WithDefaultCallOptions(grpc.MaxCallRecvMsgSize(maxMessage), grpc.MaxCallSendMsgSize(maxMessage))
	server := append([]grpc.ServerOption{grpc.MaxRecvMsgSize(maxMessage), grpc.MaxSendMsgSize(maxMessage)}, g.serverOptions()...)
	// Always TLS: the user's mutual TLS, or the token's (localTLS).
	creds := credentials.NewTLS(tlsCfg)
	server = append(server, grpc.Creds(g.counted(creds)), grpc.ConnectionTimeout(handshakeWithin))
	opts := []premote.ConfigOption{premote.WithServerOptions(server...), premote.WithDialOptions(grpc.WithTransportCredentials(creds), sizes, grpc.WithChainStreamInterceptor(closeUnanswered)),
		premote.WithCallOptions(grpc.MaxCallRecvMsgSize(maxMessage), grpc.MaxCallSendMsgSize(maxMessage))}
	if advertise != "" {
		opts = append(opts, premote.WithAdvertisedHost(advertise))
	}
	// The remote logs a lost connection at error level each time a peer
	// goes; fronts and hosts say what a loss means themselves (Logf).
	as := cluster.QuietActorSystem()
	g.Sys.Store(as)
	remoteCfg := premote.Configure(host, port, opts...)
	if clusterCfg != nil {
		// The cluster starts the remote itself, on the same configuration.
		m, r, err := cluster.StartCluster(ctx, as, remoteCfg, clusterCfg, true)
		if err != nil {
			if !errors.Is(err, cluster.ErrProviderLate) {
				as.Shutdown() // a late one goes on starting: the process's endpoint is given up
			}
			return nil, portTaken(err)
		}
		return &System{Actors: as, remote: r, Addr: as.ProcessRegistry.Address, Bound: bound, Member: m, Guard: g}, nil
	}
	r := premote.NewRemote(as, remoteCfg)
	defer func() {
		if p := recover(); p != nil {
			as.Shutdown()
			sys, err = nil, portTaken(fmt.Errorf("%w: start remote on %s: %v", wire.ErrConfig, address, p))
		}
	}()
	r.Start()
	return &System{Actors: as, remote: r, Addr: as.ProcessRegistry.Address, Bound: bound, Guard: g}, nil
}

// portTaken marks err with errPortTaken when it is the remote's failure
// to listen on a port in use (its panic carries the listener's error as
// text only; a membership endpoint's own failure is not retried).
func portTaken(err error) error {
	if err != nil && strings.Contains(err.Error(), "failed to listen") && strings.Contains(err.Error(), "address already in use") {
		return fmt.Errorf("%w (%w)", err, errPortTaken)
	}
	return err
}

// LoadTLS builds the mutual TLS configuration fronts and hosts use off
// loopback: this process's certificate and key, and the CA that signed its
// peers' (every connection checks the other side's certificate, both
// ways; TLS 1.3 only). The certificate must name the addresses peers dial
// (its SANs).
func LoadTLS(certFile, keyFile, caFile string) (*tls.Config, error) {
	cert, err := tls.LoadX509KeyPair(certFile, keyFile)
	if err != nil {
		return nil, fmt.Errorf("%w: TLS certificate %s and key %s: %v", wire.ErrConfig, certFile, keyFile, err)
	}
	pem, err := os.ReadFile(caFile)
	if err != nil {
		return nil, fmt.Errorf("%w: TLS CA %s: %v", wire.ErrConfig, caFile, err)
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(pem) {
		return nil, fmt.Errorf("%w: TLS CA %s holds no PEM certificate", wire.ErrConfig, caFile)
	}
	return &tls.Config{Certificates: []tls.Certificate{cert}, RootCAs: pool, ClientCAs: pool,
		ClientAuth: tls.RequireAndVerifyClientCert, MinVersion: tls.VersionTLS13}, nil
}
