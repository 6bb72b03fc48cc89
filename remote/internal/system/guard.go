// The guard in front of protoactor-go's remote: nothing a connection sends
// is read before it authenticated, and nothing it sends reaches an actor
// unchecked: malformed batches end the connection, system messages naming
// someone else's actor are dropped, a panic in the remote's handler ends
// only that connection.

package system

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/asynkron/protoactor-go/actor"
	lanescodes "github.com/lanesched/lanes/internal/codes"

	wire "github.com/lanesched/lanes/remote/internal/wire"

	premote "github.com/asynkron/protoactor-go/remote"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/peer"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/reflect/protoregistry"
)

// receiveMethod is protoactor-go's one streaming call: every message of the
// remote goes through it. Its unary calls are unimplemented there (they
// panic), and refused here.
const receiveMethod = "/remote.Remoting/Receive"

// Batch bounds a peer may not pass: more is malformed.
const (
	maxBatchTypes     = 1024
	maxBatchPIDs      = 1 << 16
	maxBatchEnvelopes = 1 << 20
)

// WireStats is remote.WireStats as this package makes it: see there for
// what each field means.
type WireStats struct {
	Unauthenticated uint64
	Malformed       uint64
	Dropped         uint64
	Panics          uint64
	Handshakes      uint64
}

// Guard is one endpoint's interceptors and counts.
type Guard struct {
	tls      *tls.Config // the endpoint's: the token's (local) or the user's mutual TLS
	local    bool        // rooted in the token, not in a CA the user gave
	Sys      atomic.Pointer[actor.ActorSystem]
	logf     func(format string, args ...any)
	PeerGone atomic.Pointer[func(address string)] // the host's: a front's connection ended

	unauthenticated, malformed, Dropped, panics, handshakes atomic.Uint64
	lastSaid                                                atomic.Int64 // unix nanos of the last line logged
	summing                                                 atomic.Bool  // a summary line is due

	mu       sync.Mutex
	peers    map[string]int    // live connections by the address each said it is
	verified map[string]string // an address a peer said it is, and the key its listener there showed
}

// NewGuard is an endpoint's guard: TLS from cfg (local: rooted in the
// token), refusals logged through logf.
func NewGuard(cfg *tls.Config, local bool, logf func(string, ...any)) *Guard {
	return &Guard{tls: cfg, local: local, logf: logf, peers: map[string]int{}, verified: map[string]string{}}
}

// Stats reads the counts.
func (g *Guard) Stats() WireStats {
	return WireStats{Unauthenticated: g.unauthenticated.Load(), Malformed: g.malformed.Load(), Dropped: g.Dropped.Load(), Panics: g.panics.Load(),
		Handshakes: g.handshakes.Load()}
}

// say logs what the guard refused, at most once a second (a stranger
// hammering the port does not fill the log).
func (g *Guard) say(format string, args ...any) {
	now := time.Now().UnixNano()
	last := g.lastSaid.Load()
	if now-last < int64(time.Second) || !g.lastSaid.CompareAndSwap(last, now) {
		// Held back: a line a second from now gives the counts then, so a
		// burst is not reported as its first refusal alone.
		if g.summing.CompareAndSwap(false, true) {
			time.AfterFunc(time.Second, func() {
				g.summing.Store(false)
				if g.logf != nil {
					g.logf("more refused in the last second (%s)", g.Stats().String())
				}
			})
		}
		return
	}
	if g.logf != nil {
		g.logf(format+" (%s)", append(args, g.Stats().String())...)
	}
}

// String sums the counts up for a log line.
func (s WireStats) String() string {
	return fmt.Sprintf("refused so far: %d handshakes, %d unauthenticated, %d malformed, %d messages dropped, %d handler panics", s.Handshakes, s.Unauthenticated, s.Malformed, s.Dropped, s.Panics)
}

// serverOptions are the gRPC server's options that put the guard in front
// of the remote's handlers.
func (g *Guard) serverOptions() []grpc.ServerOption {
	return []grpc.ServerOption{grpc.ChainStreamInterceptor(g.stream), grpc.ChainUnaryInterceptor(g.unary)}
}

// ErrUnauthenticated marks a front or host whose peer refused its
// credential, or did not prove it holds the same one: the token of
// another file, or a certificate another CA signed. Nothing was
// submitted.
var ErrUnauthenticated = lanescodes.NewSentinel(lanescodes.Unauthenticated, "remote: unauthenticated")

// handshake runs a TLS handshake with the endpoint at address, as a peer
// of this one would, and returns the key its certificate shows. err wraps
// ErrUnauthenticated when either side refused the other's credential.
func (g *Guard) handshake(address string, connected func()) (key string, err error) {
	cfg := g.tls.Clone()
	cfg.NextProtos = []string{"h2"}
	if !g.local && cfg.ServerName == "" {
		cfg.ServerName, _, _ = net.SplitHostPort(address)
	}
	raw, err := net.DialTimeout("tcp", address, 3*time.Second)
	if err != nil {
		return "", err // nothing there (yet): the caller says so
	}
	if connected != nil {
		connected()
	}
	conn := tls.Client(raw, cfg)
	defer conn.Close()
	_ = conn.SetDeadline(time.Now().Add(handshakeWithin))
	err = conn.Handshake()
	if err == nil {
		return keyOf(conn.ConnectionState().PeerCertificates), nil
	}
	var alert tls.AlertError
	var netErr net.Error
	switch {
	case errors.Is(err, errNoLocalCert), errors.As(err, new(*tls.CertificateVerificationError)):
		return "", fmt.Errorf("%w: the process at %s does not hold this process's credential: another deployment's lane host or front, or something else on its port", ErrUnauthenticated, address)
	case errors.As(err, &alert) || strings.Contains(err.Error(), "remote error: tls"):
		return "", fmt.Errorf("%w: %s refused this process's credential: give the fronts and hosts of one deployment one token file ($%s, FrontConfig.TokenFile, lanehost --token-file), or certificates one CA signed", ErrUnauthenticated, address, TokenFileEnv)
	case errors.As(err, &netErr) && netErr.Timeout():
		return "", fmt.Errorf("what listens at %s took connections but did not complete a TLS handshake within %v (a process stopped or swamped, or something else on its port)", address, handshakeWithin)
	}
	return "", &notAPeer{address: address, err: err}
}

// notAPeer is what answers at an address in place of a lane host or a
// front: it does not speak TLS as they do. It holds no credential of
// theirs (ErrUnauthenticated, its class), and no lane host is there
// (ErrNoHost).
type notAPeer struct {
	address string
	err     error // the handshake's
}

// Error says what answered.
func (e *notAPeer) Error() string {
	return fmt.Sprintf("%v: what listens at %s does not speak TLS as a lane host or front does (%v): something else on its port", ErrUnauthenticated, e.address, e.err)
}

// Unwrap makes it errors.Is ErrUnauthenticated, which classifies it, and
// ErrNoHost.
func (e *notAPeer) Unwrap() []error { return []error{ErrUnauthenticated, wire.ErrNoHost} }

// handshakeWithin bounds a TLS handshake, both ways: a connection that has
// not proved its credential by then is closed (a stranger's half-open
// connections hold no descriptor for long).
const handshakeWithin = 5 * time.Second

// AdmittedBy asks the endpoint at address whether it and this one admit
// each other: refused wraps ErrUnauthenticated when one refuses the other
// (or what answers does not speak TLS as a peer); else found says what
// was found when it is not a peer that admits this one (nothing there,
// or no handshake in time), nil when they admit each other. connected,
// if given, is called once a connection to the address is open.
func (g *Guard) AdmittedBy(address string, connected func()) (refused, found error) {
	_, err := g.handshake(address, connected)
	if errors.Is(err, ErrUnauthenticated) {
		return err, err
	}
	return nil, err
}

// verifyClaim checks that the process on the other end of a connection,
// whose certificate's key is key, is the one listening at the address it
// says it is (its listener shows the same key). So a peer can speak only
// for itself: messages from "another front's address" come from that
// front. Checked once per address and key.
func (g *Guard) verifyClaim(claim, key string) error {
	g.mu.Lock()
	known := g.verified[claim]
	g.mu.Unlock()
	if known != "" && known == key {
		return nil
	}
	got, err := g.handshake(claim, nil)
	if err != nil {
		return fmt.Errorf("it says it is %s, which does not answer as a peer: %v", claim, err)
	}
	if got != key {
		return fmt.Errorf("it says it is %s, where another process listens", claim)
	}
	g.mu.Lock()
	if len(g.verified) >= 4096 {
		clear(g.verified)
	}
	g.verified[claim] = key
	g.mu.Unlock()
	return nil
}

// unary refuses every unary call: lanes uses the remote's stream alone,
// and the remote leaves its unary calls unimplemented (a panic).
func (g *Guard) unary(context.Context, any, *grpc.UnaryServerInfo, grpc.UnaryHandler) (any, error) {
	g.unauthenticated.Add(1)
	return nil, status.Error(codes.Unimplemented, "lanes: no unary call is served here")
}

// authenticated returns the key of a connection that proved itself: its
// client certificate, which the handshake checked against the token's
// authority (or the user's CA); "" when it did not.
func (g *Guard) authenticated(ctx context.Context) string {
	p, ok := peer.FromContext(ctx)
	if !ok {
		return ""
	}
	info, ok := p.AuthInfo.(credentials.TLSInfo)
	if !ok || len(info.State.PeerCertificates) == 0 || (!g.local && len(info.State.VerifiedChains) == 0) {
		return ""
	}
	return keyOf(info.State.PeerCertificates)
}

// stream authenticates a connection, then serves it through the checks of
// guardedStream; a panic in the handler ends this connection alone.
func (g *Guard) stream(srv any, ss grpc.ServerStream, info *grpc.StreamServerInfo, handler grpc.StreamHandler) (err error) {
	key := g.authenticated(ss.Context())
	if info.FullMethod != receiveMethod || key == "" {
		g.unauthenticated.Add(1)
		from := "?"
		if p, ok := peer.FromContext(ss.Context()); ok {
			from = p.Addr.String()
		}
		g.say("refused a connection from %s: it did not authenticate (%s)", from, g.credential())
		return status.Error(codes.Unauthenticated, "lanes: this endpoint admits only fronts and hosts that hold its credential ("+g.credential()+")")
	}
	gs := &guardedStream{ServerStream: ss, g: g, key: key}
	defer func() {
		if p := recover(); p != nil {
			g.panics.Add(1)
			g.say("a connection from %s ended by a panic in the remote's handler (the process serves on): %v", gs.peer, p)
			err = status.Error(codes.Internal, "lanes: the connection ended")
		}
		gs.ended()
	}()
	return handler(srv, gs)
}

// credential names what a peer must hold, for refusals.
func (g *Guard) credential() string {
	if g.local {
		return "the token of its token file"
	}
	return "a client certificate signed by its CA"
}

// guardedStream checks each message of one authenticated connection
// before the remote's handler reads it.
type guardedStream struct {
	grpc.ServerStream
	g    *Guard
	key  string // its certificate's key
	peer string // the address it said it is, in its ConnectRequest, verified
}

// RecvMsg reads the next message the remote's handler may see: a
// connection says who it is first, every batch is checked, and a batch
// that is all dropped is skipped.
func (s *guardedStream) RecvMsg(m any) error {
	for {
		if err := s.ServerStream.RecvMsg(m); err != nil {
			return err
		}
		msg, ok := m.(*premote.RemoteMessage)
		if !ok {
			return s.malformed("a message of type %T", m)
		}
		switch t := msg.MessageType.(type) {
		case *premote.RemoteMessage_ConnectRequest:
			sc := t.ConnectRequest.GetServerConnection()
			if s.peer != "" || sc == nil || sc.Address == "" || len(sc.Address) > 512 {
				return s.malformed("a connect request that names no address, or a second one")
			}
			if err := s.g.verifyClaim(sc.Address, s.key); err != nil {
				return s.malformed("%v", err)
			}
			s.peer = sc.Address
			s.g.mu.Lock()
			s.g.peers[s.peer]++
			s.g.mu.Unlock()
			return nil
		case *premote.RemoteMessage_MessageBatch:
			if s.peer == "" {
				return s.malformed("messages before the connection said who it is")
			}
			if err := s.g.Check(t.MessageBatch, s.peer); err != nil {
				return s.malformed("%v", err)
			}
			if len(t.MessageBatch.Envelopes) == 0 {
				continue
			}
			return nil
		default:
			return nil // a disconnect request and the like: the remote handles them
		}
	}
}

// malformed ends the connection for what it sent.
func (s *guardedStream) malformed(format string, args ...any) error {
	s.g.malformed.Add(1)
	why := fmt.Sprintf(format, args...)
	from := s.peer
	if from == "" {
		from = "a peer that had not said who it is"
	}
	s.g.say("ended the connection from %s: %s", from, why)
	return status.Error(codes.InvalidArgument, "lanes: "+why)
}

// ended is the connection's end: the last one from its peer tells the
// host (a front's connection ends when its process does; the host then
// frees its place at once instead of when the remote gives up on it).
func (s *guardedStream) ended() {
	if s.peer == "" {
		return
	}
	s.g.mu.Lock()
	s.g.peers[s.peer]--
	last := s.g.peers[s.peer] <= 0
	if last {
		delete(s.g.peers, s.peer)
	}
	s.g.mu.Unlock()
	if fn := s.g.PeerGone.Load(); last && fn != nil {
		(*fn)(s.peer)
	}
}

// Check checks a batch from the peer at address from, in place: it returns
// an error for a malformed one (the connection ends) and drops, counting
// them, the envelopes no actor here may receive from that peer.
func (g *Guard) Check(b *premote.MessageBatch, from string) error {
	if len(b.TypeNames) > maxBatchTypes || len(b.Targets) > maxBatchPIDs || len(b.Senders) > maxBatchPIDs || len(b.Envelopes) > maxBatchEnvelopes {
		return fmt.Errorf("a batch of %d types, %d targets, %d senders, %d messages: past the bounds", len(b.TypeNames), len(b.Targets), len(b.Senders), len(b.Envelopes))
	}
	kinds := make([]messageKind, len(b.TypeNames))
	for i, name := range b.TypeNames {
		k, err := kindOf(name)
		if err != nil {
			return err
		}
		kinds[i] = k
	}
	sys := g.Sys.Load()
	if sys == nil {
		return fmt.Errorf("a batch before this endpoint started")
	}
	here := make([]bool, len(b.Targets)) // a target that is an actor of this endpoint
	misnamed := ""                       // a target's address that is not this endpoint's
	for i, pid := range b.Targets {
		switch {
		case pid != nil && pid.Address == sys.ProcessRegistry.Address:
			_, here[i] = sys.ProcessRegistry.GetLocal(pid.Id)
		case pid != nil:
			misnamed = pid.Address
		}
	}
	kept := b.Envelopes[:0]
	for _, e := range b.Envelopes {
		switch {
		case e == nil:
			return fmt.Errorf("a nil message")
		case e.TypeId < 0 || int(e.TypeId) >= len(b.TypeNames):
			return fmt.Errorf("a message of type %d, of %d named", e.TypeId, len(b.TypeNames))
		case e.Target < 0 || int(e.Target) >= len(b.Targets):
			return fmt.Errorf("a message for target %d, of %d named", e.Target, len(b.Targets))
		case e.Sender < 0 || int(e.Sender) > len(b.Senders):
			return fmt.Errorf("a message from sender %d, of %d named", e.Sender, len(b.Senders))
		case e.SerializerId != 0:
			return fmt.Errorf("a message of serializer %d: lanes speaks protobuf (0) alone", e.SerializerId)
		}
		if e.Sender > 0 {
			if s := b.Senders[e.Sender-1]; s == nil || s.Address != from {
				g.Dropped.Add(1) // a sender that is not the peer's: forged
				continue
			}
		}
		if !here[e.Target] || !kinds[e.TypeId].allowed(e.MessageData, from) {
			g.Dropped.Add(1)
			continue
		}
		kept = append(kept, e)
	}
	clear(b.Envelopes[len(kept):])
	switch n := len(b.Envelopes) - len(kept); {
	case n > 0 && misnamed != "":
		g.say("dropped %d messages from %s (and any since the last line) addressed to %s, which is not this endpoint's address %s: the peer names this process by another address (give it the one this process prints, character for character: localhost is not 127.0.0.1)", n, from, misnamed, sys.ProcessRegistry.Address)
	case n > 0:
		g.say("dropped %d messages from %s (and any since the last line): system messages about another's actor, or for no actor here", n, from)
	}
	b.Envelopes = kept
	return nil
}

// messageKind is what a type name may carry.
type messageKind uint8

const (
	kindUser       messageKind = iota // a lanes message, or the cluster package's own
	kindWatch                         // actor.Watch or actor.Unwatch: the watcher must be the sender
	kindTerminated                    // actor.Terminated: the actor that ended must be the sender's
	kindForbidden                     // any other system message (PoisonPill, Stop, ...): no peer sends one
)

// kindOf classifies a type name; a type this build does not know, or not
// a message of lanes or of the remote's own, is malformed (the remote's
// deserializer panics on an unknown one).
func kindOf(name string) (messageKind, error) {
	switch name {
	case "actor.Watch", "actor.Unwatch":
		return kindWatch, nil
	case "actor.Terminated":
		return kindTerminated, nil
	}
	if _, err := protoregistry.GlobalTypes.FindMessageByName(protoreflect.FullName(name)); err != nil {
		return 0, fmt.Errorf("a message of type %q, which this build does not know", truncate(name, 128))
	}
	switch {
	case strings.HasPrefix(name, "lanes."), strings.HasPrefix(name, "cluster."):
		return kindUser, nil
	}
	return kindForbidden, nil
}

// allowed reports whether a message of this kind from the peer at address
// from may be delivered: a system message only about the sender's own
// actors.
func (k messageKind) allowed(data []byte, from string) bool {
	switch k {
	case kindUser:
		return true
	case kindWatch:
		var w actor.Watch // Unwatch has the same fields
		return proto.Unmarshal(data, &w) == nil && w.Watcher != nil && w.Watcher.Address == from
	case kindTerminated:
		var t actor.Terminated
		return proto.Unmarshal(data, &t) == nil && t.Who != nil && t.Who.Address == from
	}
	return false
}

func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n] + "…"
}

// countedCreds are the endpoint's TLS credentials, counting (and saying)
// the handshakes that fail on its listener.
type countedCreds struct {
	credentials.TransportCredentials
	g *Guard
}

func (g *Guard) counted(c credentials.TransportCredentials) credentials.TransportCredentials {
	return &countedCreds{TransportCredentials: c, g: g}
}

// ServerHandshake is the TLS handshake of a connection to the endpoint.
func (c *countedCreds) ServerHandshake(conn net.Conn) (net.Conn, credentials.AuthInfo, error) {
	out, info, err := c.TransportCredentials.ServerHandshake(conn)
	if err != nil {
		c.g.handshakes.Add(1)
		c.g.say("refused a connection from %s at its TLS handshake: %v", conn.RemoteAddr(), err)
	}
	return out, info, err
}

// Clone is a copy that counts into the same guard.
func (c *countedCreds) Clone() credentials.TransportCredentials {
	return &countedCreds{TransportCredentials: c.TransportCredentials.Clone(), g: c.g}
}
