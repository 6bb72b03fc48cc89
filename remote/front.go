// The front's face: its configuration, StartFront, and the calls a
// running front takes. The front itself is remote/internal/front; what
// its calls answer with (a host's status, a staged program) is defined
// there and named here.

package remote

import (
	"context"
	"crypto/tls"
	"time"

	"github.com/lanesched/lanes/cache"
	"github.com/lanesched/lanes/cuda"
	"github.com/lanesched/lanes/cuda/kernels"
	"github.com/lanesched/lanes/lanes"
	"github.com/lanesched/lanes/programs"
	"github.com/lanesched/lanes/remote/internal/front"
	"github.com/lanesched/lanes/remote/internal/system"
)

// TokenFileEnv names the environment variable that overrides the default
// token file (DefaultTokenFile).
const TokenFileEnv = system.TokenFileEnv

// DefaultTokenFile is where fronts and hosts look for the token when their
// configuration names none: $LANES_TOKEN_FILE if set, else lanes/token
// under $XDG_RUNTIME_DIR (a directory of the user's own, cleared at
// logout; ignored unless absolute, as the XDG spec says), else under the
// user's configuration directory ($XDG_CONFIG_HOME/lanes/token, by default
// ~/.config/lanes/token).
func DefaultTokenFile() (string, error) { return system.DefaultTokenFile() }

// LoadTLS builds the mutual TLS configuration fronts and hosts use off
// loopback: this process's certificate and key, and the CA that signed its
// peers' (every connection checks the other side's certificate, both
// ways; TLS 1.3 only). The certificate must name the addresses peers dial
// (its SANs).
func LoadTLS(certFile, keyFile, caFile string) (*tls.Config, error) {
	return system.LoadTLS(certFile, keyFile, caFile)
}

// What a front reports and takes, defined with the front.
type (
	// Encoded is a batch encoded once for the wire (Front.Encode), to
	// submit many times (Front.SubmitEncoded): a serving loop's step.
	Encoded = front.Encoded
	// Input is one submission's bytes for an upload of an Encoded batch
	// (SubmitEncoded): a serving step's new input. Entry is the index, in
	// the batch given to Encode, of an upload entry; Bytes are exactly as
	// many bytes as that upload, read until the call ends.
	Input = front.Input
)

// FrontConfig configures a front.
type FrontConfig struct {
	// Hosts are addresses (host:port) of lane hosts already running; the
	// front joins each and keeps joining it after a loss.
	Hosts []string
	// Processes are lane host processes the front starts itself, one per
	// entry, and restarts when they die or hang.
	Processes []HostProcess
	// Cluster names a cluster whose hosts the front finds itself: it joins
	// each host that becomes a member (which takes new tenants at once),
	// places no new tenants on a host that left the membership, and
	// rejoins a lost host only while it is a member. The cluster's word
	// is checked by the front's own: a member is routed to only while its
	// heartbeats say it serves. May be given alone or with Hosts and
	// Processes.
	Cluster *ClusterConfig
	// PruneAfter is how long a host found in the cluster stays in Hosts
	// after it left the membership, while it serves no one and holds no
	// tenant of the front's (Forget frees a tenant's place): then the
	// front forgets it, so a fleet whose hosts come and go at new
	// addresses does not grow the front. 0: 30 s.
	PruneAfter time.Duration
	// Address is where the front listens for its hosts' answers; empty:
	// 127.0.0.1:0 (loopback, a port the system picks). Any address that is not loopback requires TLS.
	Address string
	// Advertise is the address hosts reach the front at when it is not
	// Address (a NAT, a port mapping, a proxy); empty: Address. Not
	// loopback requires TLS.
	Advertise string
	// TLS secures and authenticates every connection both ways with the
	// certificates of your CA (LoadTLS); nil: with certificates rooted in
	// the token (TokenFile), and every host address must be loopback.
	TLS *tls.Config
	// TokenFile is the token this front and its hosts derive their
	// credentials from when TLS is nil: a file only this user can read
	// (DefaultTokenFile when empty; created when missing). It is never
	// sent. A launched host is given the same file.
	TokenFile string
	// LostAfter is how long a registered host may stay silent (no
	// heartbeat, no answer) before the front treats it as lost; 0:
	// 1 s, ten of a host's default heartbeats. Detection takes at most LostAfter plus a fifth of it.
	LostAfter time.Duration
	// JoinTimeout bounds how long a host may take to register (a launched
	// one: to start and register) before the front gives up on that try;
	// 0: 30 s. StartFront waits at most this long for every host.
	JoinTimeout time.Duration
	// RestartBackoff is the first wait before a launched host is started
	// again; it doubles to 5 s while restarts keep failing. 0: 100 ms.
	RestartBackoff time.Duration
	// NoDataPlane keeps the front's traffic on the remote even with a
	// host on this machine that offers a same-host data plane (to compare
	// the two, or where shared memory misbehaves).
	NoDataPlane bool
	// Modules are modules of one's own kernels the front's batches launch
	// (kernels.Module: a kernel's spec is what cuda.Launch builds a launch
	// from). The front sends each host their images and kernel
	// declarations when it registers, and the host loads them on its
	// devices before it serves the front, or refuses the front saying why
	// (HostStatus.Refusal; the front does not join it again): a module the
	// device cannot load (on the simulated device, a kernel without a Go
	// reference, which does not cross: serve such modules from a lane
	// host of your own, HostConfig.Modules, hostcmd.Options.Modules), or
	// one that differs from the module of that name the host has loaded.
	// A kernel's extent check (KernelSpec.Check) is the front's own: the
	// front runs it as it builds a launch, and the host's devices check
	// the kernels' parameters against the image (the real device) and
	// their launch limits. At most 64 modules of 256 MiB each.
	Modules []kernels.Module
	// Logf hears what no call answers (a host lost, restarted, refused);
	// nil: standard error.
	Logf func(format string, args ...any)
}

// room is the configuration as front takes it.
func (c FrontConfig) room() front.Config {
	return front.Config{
		Hosts:          c.Hosts,
		Processes:      processes(c.Processes),
		Cluster:        c.Cluster.room(),
		PruneAfter:     c.PruneAfter,
		Address:        c.Address,
		Advertise:      c.Advertise,
		TLS:            c.TLS,
		TokenFile:      c.TokenFile,
		LostAfter:      c.LostAfter,
		JoinTimeout:    c.JoinTimeout,
		RestartBackoff: c.RestartBackoff,
		NoDataPlane:    c.NoDataPlane,
		Modules:        c.Modules,
		Logf:           c.Logf,
	}
}

// HostProcess is a lane host process a front starts: Path with Args, to which
// the front adds --name Name and --exit-with-stdin. The process must print
// "lanehost: listening on " and its address as its first line on standard output
// (cmd/lanehost does).
//
// On a machine of 4 CPUs or fewer, a launched host runs with GOMAXPROCS at
// half the CPUs (rounded down, at least 1) unless the front's environment
// or Env sets GOMAXPROCS (to any value: it is passed on as it is): the
// front's process and the host share the cores, and a process each with a
// P per CPU made a lane host serve 0.65-0.73 of one process's steps at 2
// in flight on 2 cores (docs/lane-hosts.md, "Same-host data plane",
// "Measured"). Give the front's process the other half.
type HostProcess struct {
	Name string
	Path string
	Args []string
	Env  []string // added to the front's environment
}

// processes are the host processes as the front takes them.
func processes(ps []HostProcess) []front.Process {
	if ps == nil {
		return nil
	}
	out := make([]front.Process, len(ps))
	for i, p := range ps {
		out[i] = front.Process(p)
	}
	return out
}

// Front routes tenants' work to lane hosts. It is safe for concurrent use.
// A nil or zero Front serves nothing: its calls to hosts answer ErrStopped,
// its reports are empty (Encode, which asks no host, still encodes).
type Front struct {
	f *front.Front
}

// room is the front that serves, nil for a nil Front.
func (f *Front) room() *front.Front {
	if f == nil {
		return nil
	}
	return f.f
}

// StartFront starts a front, joins (or launches) its hosts and returns
// once every host registered, within JoinTimeout. Every error it returns
// classifies (cuda.Classify) and says what it found: a host that refuses
// or is refused (another protocol version; a host full of fronts, or
// leaving) fails the start with ErrRefused, even when the others serve:
// start it again, or leave a host out while it drains; one that does not
// register within JoinTimeout (nothing at its address, something there
// that is no lane host, a launched process that does not say where it
// listens) fails it with ErrNoHost; a configuration refused (a launch
// that cannot start, say) with ErrConfig. Hosts it launched are stopped
// by then.
func StartFront(ctx context.Context, cfg FrontConfig) (*Front, error) {
	f, err := front.Start(ctx, cfg.room())
	if err != nil {
		return nil, err
	}
	return &Front{f: f}, nil
}

// Address is where hosts reach the front: FrontConfig.Advertise if given,
// else where it listens ("" for a Front StartFront did not return).
func (f *Front) Address() string {
	return f.room().Address()
}

// Alloc allocates device memory for the tenant on its host (placing a new
// tenant), owned by the tenant there.
func (f *Front) Alloc(ctx context.Context, tenant string, spec cuda.BufferSpec) (cuda.Buffer, error) {
	return f.room().Alloc(ctx, tenant, spec)
}

// Catalog returns the sealed catalog of the lane the tenant's batches run
// on, as actors.Scheduler.Catalog does, but holding only the programs of
// this front's tenants (a host keeps each front's program names apart, as
// it keeps its tenants), named as they were declared: an invocation
// (programs.Invocation) names a program and one of its segments from here.
func (f *Front) Catalog(ctx context.Context, tenant string) ([]programs.Descriptor, error) {
	return f.room().Catalog(ctx, tenant)
}

// Encode encodes a batch for SubmitEncoded. The batch's Tenant is ignored
// (each submission names its tenant); a batch with no wire form is
// refused (ErrWire).
func (f *Front) Encode(b lanes.Batch) (*Encoded, error) {
	return f.room().Encode(b)
}

// Forget drops a tenant: on its host (its buffers freed) if the host still
// holds its state, and its placement here, so its next call places it
// afresh. After a lost host this is how a tenant starts over. While the
// tenant has submissions in flight (through this front, or through
// another front on its host) it is refused, actors.ErrTenantBusy
// (retryable), and frees nothing.
func (f *Front) Forget(ctx context.Context, tenant string) error {
	return f.room().Forget(ctx, tenant)
}

// Free frees a buffer the tenant allocated through Alloc.
func (f *Front) Free(ctx context.Context, tenant string, b cuda.Buffer) error {
	return f.room().Free(ctx, tenant, b)
}

// Hosts reports every host of the front.
func (f *Front) Hosts() []HostStatus {
	hs := f.room().Hosts()
	if hs == nil {
		return nil
	}
	out := make([]HostStatus, len(hs))
	for i, h := range hs {
		out[i] = hostStatus(h)
	}
	return out
}

// InFlight is the number of calls in flight on every host: each ends once,
// by its host's answer or by the host's loss.
func (f *Front) InFlight() int {
	return f.room().InFlight()
}

// ListenAddress is where the front listens: Address, unless it advertises
// another ("" for a Front StartFront did not return).
func (f *Front) ListenAddress() string {
	return f.room().ListenAddress()
}

// Placement names the host a tenant was placed on, if it was.
func (f *Front) Placement(tenant string) (host string, ok bool) {
	return f.room().Placement(tenant)
}

// Preparation reports the preparation of the lane the tenant's batches run
// on, as actors.Scheduler.Preparation does.
func (f *Front) Preparation(ctx context.Context, tenant string) (cache.Preparation, error) {
	return f.room().Preparation(ctx, tenant)
}

// PrepareStaged prepares a staged program for the tenant on its host, as
// actors.Scheduler.PrepareStaged does in one process, on the lane the
// tenant's batches run on (for a tenant that ran nothing yet, the lane of
// its buffers' device that holds the fewest staged programs; a lane whose
// preparation is open before one sealed): the host makes pinned staging
// for each slot,
// owned by the tenant, and captures the program's two variants there (the
// lane's preparation must be open). Slots are 1 byte to 64 MiB
// each, at most 1,024 in all; a host keeps 64 programs of a tenant (actors.ErrProgramLimit past it). The spec's
// mistakes are refused as actors.Scheduler.PrepareStaged refuses them.
func (f *Front) PrepareStaged(ctx context.Context, tenant string, spec StagedSpec) (*StagedProgram, error) {
	p, err := f.room().PrepareStaged(ctx, tenant, front.StagedSpec(spec))
	if err != nil {
		return nil, err
	}
	return &StagedProgram{p: p}, nil
}

// Read copies a region of the tenant's buffer back, after the tenant's
// submissions the host received before it.
func (f *Front) Read(ctx context.Context, tenant string, r cuda.Region) ([]byte, error) {
	return f.room().Read(ctx, tenant, r)
}

// ReleaseStaged frees a staged program the tenant prepared, and its
// staging on the host; one with replays in flight is refused
// (actors.ErrTenantBusy, retryable). A program whose host was lost is
// gone already: releasing it is nil.
func (f *Front) ReleaseStaged(ctx context.Context, tenant string, p *StagedProgram) error {
	return f.room().ReleaseStaged(ctx, tenant, p.room())
}

// Repeat runs a staged program again on the inputs of its last replay, as
// actors.Scheduler.Repeat: the inputs are not sent again (the host's lane
// kept its own copy of them, and replays them exactly without comparing;
// while their outputs are cached, it copies them into outputs and launches
// nothing). With nil outputs it collects nothing and always runs; other
// outputs are as ReplayInto's. A program never replayed yet is refused as
// one process refuses it (lanes.ErrStagedInput: nothing to repeat).
func (f *Front) Repeat(ctx context.Context, tenant string, p *StagedProgram, outputs [][]byte) (lanes.StagedResult, error) {
	return f.room().Repeat(ctx, tenant, p.room(), outputs)
}

// Replay runs a staged program the tenant prepared, with inputs in logical
// order, and returns its outputs (when collect), as
// actors.Scheduler.Replay does: the same StagedResult (OutputCache,
// Resident, DeviceTime, the receipt) and the same errors, through a
// *PeerError. Its inputs of 4 KiB or more go into the upload area of the
// host's data plane where it has room (as uploads do), the rest in the
// message, and the host copies them into the program's staging: once,
// from the area where the GPU host pins it. A program of another tenant,
// released, or prepared under a host registration that is gone is refused
// (a *DeviceStateLostError for a host lost or restarted since: prepare it
// again).
func (f *Front) Replay(ctx context.Context, tenant string, p *StagedProgram, inputs [][]byte, collect bool) (lanes.StagedResult, error) {
	return f.room().Replay(ctx, tenant, p.room(), inputs, collect)
}

// ReplayInto is Replay with the outputs copied into the caller's buffers,
// as actors.Scheduler.ReplayInto: one per output, in logical order, each
// exactly its length (StagedProgram.MakeOutputs allocates them), the
// result's Outputs being those buffers. Buffers of another number or
// length are refused before anything is sent, with the error one process
// gives (lanes.ErrStagedInput). They are written only while ReplayInto
// waits; a replay that fails leaves their contents unspecified.
func (f *Front) ReplayInto(ctx context.Context, tenant string, p *StagedProgram, inputs, outputs [][]byte) (lanes.StagedResult, error) {
	return f.room().ReplayInto(ctx, tenant, p.room(), inputs, outputs)
}

// Seal closes the preparation of the lane the tenant's batches run on, on
// its host, as actors.Scheduler.Seal does in one process: from then on
// its resident segments replay, its misses run eagerly, and its catalog
// is readable (Catalog), so that batches may invoke the programs
// registered there (lanes.Entry.Invoke). It acts on the lane for every
// tenant it serves, of every front. It runs after the tenant's
// submissions that reached the host before it, and needs the lane
// quiescent (lanes.ErrNotQuiescent, retryable, while any tenant's work is
// in flight there); a tenant that has submitted nothing yet has no lane
// (actors.ErrUnknownLane); a lane sealed already answers
// cache.ErrNotOpen. Errors are as Alloc's.
func (f *Front) Seal(ctx context.Context, tenant string) (cache.Preparation, error) {
	return f.room().Seal(ctx, tenant)
}

// Stop stops the front: new calls are refused with ErrStopped; calls in
// flight get until ctx ends to finish, then end indeterminate
// (actors.ErrIndeterminate: the front stopped with them in flight, not a
// host lost); launched hosts are stopped. Unlike a scheduler's drain, a
// front's does not go on after ctx ends: its hosts' answers need it.
func (f *Front) Stop(ctx context.Context) error {
	return f.room().Stop(ctx)
}

// Submit is SubmitAsync, then waiting for its end (or ctx). It returns the
// receipt and its error: a host's error as a *PeerError with its code, a
// host lost with the batch in flight as a *HostLostError (errors.Is
// actors.ErrIndeterminate).
func (f *Front) Submit(ctx context.Context, tenant string, b lanes.Batch) (lanes.Receipt, error) {
	return f.room().Submit(ctx, tenant, b)
}

// SubmitAsync sends a tenant's batch to the tenant's host (placing a new
// tenant on the serving host with the most headroom) and returns its
// Pending. A refusal here is definitely not submitted: a batch with no
// wire form (ErrWire), beyond its host's bounds
// (*actors.BatchTooLargeError), no host serving (ErrNoHost), or a tenant
// whose host was lost (*DeviceStateLostError until it calls Forget). A
// front keeps no table of which tenant allocated which buffer: a batch
// naming a buffer of another tenant on the same host is refused there
// (actors.ErrNotYours), one of a tenant on another host as a handle that
// host never handed out (lanes.ErrInvalidBatch); the root package's
// *lanes.Server, which keeps that table, refuses both as not yours.
func (f *Front) SubmitAsync(ctx context.Context, tenant string, b lanes.Batch) (lanes.Pending, error) {
	return f.room().SubmitAsync(ctx, tenant, b)
}

// SubmitEncoded is SubmitAsync of an encoded batch.
//
// Inputs, if given, are this submission's own bytes for some of the
// batch's uploads (a serving step's new input): they cross with the
// submission while the rest of the batch crosses once per host, each the
// length of the upload it replaces; the front reads them until the call
// ends. A bad input (an entry that is no upload, another length, the same
// entry twice) is refused before anything is sent (lanes.ErrInvalidBatch).
func (f *Front) SubmitEncoded(ctx context.Context, tenant string, e *Encoded, inputs ...Input) (lanes.Pending, error) {
	return f.room().SubmitEncoded(ctx, tenant, e, inputs...)
}

// Wire is what the process's endpoint refused (see WireStats); zero for
// a Front StartFront did not return.
func (f *Front) Wire() WireStats {
	return WireStats(f.room().Wire())
}
