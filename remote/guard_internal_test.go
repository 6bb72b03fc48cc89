package remote

import (
	"testing"

	"github.com/asynkron/protoactor-go/actor"
	system "github.com/lanesched/lanes/remote/internal/system"

	cluster "github.com/lanesched/lanes/remote/internal/cluster"

	wire "github.com/lanesched/lanes/remote/internal/wire"

	premote "github.com/asynkron/protoactor-go/remote"
	"github.com/lanesched/lanes/internal/wirepb"
	"google.golang.org/protobuf/proto"
)

// guardHere is a guard in front of an actor system with one actor,
// HostActor, at address here.
func guardHere(tb testing.TB) (*system.Guard, *actor.PID) {
	tb.Helper()
	as := cluster.QuietActorSystem()
	as.ProcessRegistry.Address = "127.0.0.1:7001"
	pid, err := as.Root.SpawnNamed(actor.PropsFromFunc(func(actor.Context) {}), HostActor)
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(as.Shutdown)
	cfg, err := system.LocalTLS(system.Token("0123456789abcdef0123456789abcdef"))
	if err != nil {
		tb.Fatal(err)
	}
	g := system.NewGuard(cfg, true, nil)
	g.Sys.Store(as)
	return g, pid
}

func mustMarshal(tb testing.TB, m proto.Message) []byte {
	tb.Helper()
	b, err := proto.Marshal(m)
	if err != nil {
		tb.Fatal(err)
	}
	return b
}

// TestGuardChecksBatches: what a peer may deliver, what is dropped, and
// what ends its connection.
func TestGuardChecksBatches(t *testing.T) {
	g, host := guardHere(t)
	const from = "127.0.0.1:9001"
	peer := actor.NewPID(from, FrontActor)
	other := actor.NewPID("127.0.0.1:9999", FrontActor)
	batch := func(types []string, env ...*premote.MessageEnvelope) *premote.MessageBatch {
		return &premote.MessageBatch{TypeNames: types, Targets: []*actor.PID{host, actor.NewPID("127.0.0.1:7001", "nobody"), actor.NewPID("10.0.0.1:7001", HostActor)},
			Senders: []*actor.PID{peer, other}, Envelopes: env}
	}
	probe := mustMarshal(t, &wirepb.Probe{Epoch: 1, Seq: 1})
	for _, c := range []struct {
		name      string
		types     []string
		env       *premote.MessageEnvelope
		kept, bad bool
	}{
		{"a lanes message to the host, from the peer", []string{"lanes.remote.v1.Probe"}, &premote.MessageEnvelope{MessageData: probe, Sender: 1}, true, false},
		{"a lanes message with no sender", []string{"lanes.remote.v1.Probe"}, &premote.MessageEnvelope{MessageData: probe}, true, false},
		{"a sender not the peer's", []string{"lanes.remote.v1.Probe"}, &premote.MessageEnvelope{MessageData: probe, Sender: 2}, false, false},
		{"to an actor this endpoint lacks", []string{"lanes.remote.v1.Probe"}, &premote.MessageEnvelope{MessageData: probe, Target: 1}, false, false},
		{"to another endpoint's actor", []string{"lanes.remote.v1.Probe"}, &premote.MessageEnvelope{MessageData: probe, Target: 2}, false, false},
		{"the peer's own Terminated", []string{"actor.Terminated"}, &premote.MessageEnvelope{MessageData: mustMarshal(t, &actor.Terminated{Who: peer})}, true, false},
		{"another's Terminated", []string{"actor.Terminated"}, &premote.MessageEnvelope{MessageData: mustMarshal(t, &actor.Terminated{Who: other})}, false, false},
		{"the peer's own Watch", []string{"actor.Watch"}, &premote.MessageEnvelope{MessageData: mustMarshal(t, &actor.Watch{Watcher: peer})}, true, false},
		{"a Watch for another", []string{"actor.Watch"}, &premote.MessageEnvelope{MessageData: mustMarshal(t, &actor.Watch{Watcher: other})}, false, false},
		{"an Unwatch for another", []string{"actor.Unwatch"}, &premote.MessageEnvelope{MessageData: mustMarshal(t, &actor.Unwatch{Watcher: other})}, false, false},
		{"a PoisonPill", []string{"actor.PoisonPill"}, &premote.MessageEnvelope{MessageData: mustMarshal(t, &actor.PoisonPill{})}, false, false},
		{"a Stop", []string{"actor.Stop"}, &premote.MessageEnvelope{MessageData: mustMarshal(t, &actor.Stop{})}, false, false},
		{"the remote's own spawn request", []string{"remote.ActorPidRequest"}, &premote.MessageEnvelope{MessageData: mustMarshal(t, &premote.ActorPidRequest{Kind: "x"})}, false, false},
		{"a type this build does not know", []string{"no.Such"}, &premote.MessageEnvelope{}, false, true},
		{"a type index out of range", []string{"lanes.remote.v1.Probe"}, &premote.MessageEnvelope{TypeId: 1}, false, true},
		{"a negative type index", []string{"lanes.remote.v1.Probe"}, &premote.MessageEnvelope{TypeId: -1}, false, true},
		{"a target out of range", []string{"lanes.remote.v1.Probe"}, &premote.MessageEnvelope{Target: 3}, false, true},
		{"a sender out of range", []string{"lanes.remote.v1.Probe"}, &premote.MessageEnvelope{Sender: 3}, false, true},
		{"the JSON serializer", []string{"lanes.remote.v1.Probe"}, &premote.MessageEnvelope{SerializerId: 1}, false, true},
	} {
		b := batch(c.types, c.env)
		err := g.Check(b, from)
		if (err != nil) != c.bad || (err == nil && (len(b.Envelopes) == 1) != c.kept) {
			t.Errorf("%s: got err %v, %d kept; want malformed %v, kept %v", c.name, err, len(b.Envelopes), c.bad, c.kept)
		}
	}
	if err := g.Check(batch([]string{"lanes.remote.v1.Probe"}), from); err != nil {
		t.Errorf("an empty batch: got err %v, want nil", err)
	}
	if err := g.Check(batch([]string{"lanes.remote.v1.Probe"}, (*premote.MessageEnvelope)(nil)), from); err == nil {
		t.Errorf("a nil message: got nil, want malformed")
	}
}

// FuzzGuard: whatever bytes arrive as a batch, checking them never panics,
// and every message the guard lets through is one the remote's own reader
// decodes without panicking (it panics on an unknown type, or an index out
// of range).
func FuzzGuard(f *testing.F) {
	g, host := guardHere(f)
	peer := actor.NewPID("127.0.0.1:9001", FrontActor)
	for _, b := range []*premote.MessageBatch{
		{TypeNames: []string{"lanes.remote.v1.Probe"}, Targets: []*actor.PID{host}, Envelopes: []*premote.MessageEnvelope{{MessageData: []byte{8, 1}}}},
		{TypeNames: []string{"actor.Terminated"}, Targets: []*actor.PID{host}, Senders: []*actor.PID{peer},
			Envelopes: []*premote.MessageEnvelope{{Sender: 1, MessageData: mustMarshal(f, &actor.Terminated{Who: peer})}}},
		{TypeNames: []string{"actor.Watch", "no.Such"}, Targets: []*actor.PID{host, nil}, Envelopes: []*premote.MessageEnvelope{{TypeId: 1, Target: 1}}},
	} {
		f.Add(mustMarshal(f, b))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		var b premote.MessageBatch
		if proto.Unmarshal(data, &b) != nil {
			return
		}
		if g.Check(&b, peer.Address) != nil {
			return
		}
		for _, e := range b.Envelopes {
			if _, err := premote.Deserialize(e.MessageData, b.TypeNames[e.TypeId], e.SerializerId); err != nil {
				continue // the reader ends the connection on it, without harm
			}
			_ = b.Targets[e.Target].Id
			if e.Sender > 0 {
				_ = b.Senders[e.Sender-1].Address
			}
		}
	})
}

// FuzzHello: whatever a host's Hello holds, checking it never panics and
// answers a Welcome with the protocol.
func FuzzHello(f *testing.F) {
	f.Add(mustMarshal(f, &wirepb.Hello{Protocol: wire.Protocol, Host: "h", Epoch: 1, Devices: []*wirepb.Device{{Lanes: 4}}}))
	f.Add(mustMarshal(f, &wirepb.Hello{Protocol: wire.Protocol + 1, Refusal: "full"}))
	f.Fuzz(func(t *testing.T, data []byte) {
		var h wirepb.Hello
		if proto.Unmarshal(data, &h) != nil {
			return
		}
		w := CheckHello(&h)
		if w == nil || w.Protocol != wire.Protocol || (w.Accepted && w.Refusal != "") {
			t.Fatalf("CheckHello(%v): got %v, want a Welcome of this protocol, accepted or refused with a reason", &h, w)
		}
	})
}
