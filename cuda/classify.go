// Error classification: every error's stable Code, its Blame, whether it
// is retryable and whether anything was submitted.

package cuda

import "github.com/lanesched/lanes/internal/codes"

// Code is the stable code of every error lanes reports, of every package.
// Codes from zero up are CUDA's CUresult numbers, so the simulated and
// real devices report the same code for the same failure; negative codes
// are lanes' own conditions. A code's [Code.String] is its stable
// snake_case name ("cuda_out_of_memory", "tenant_busy"), the one spans, metrics,
// reports and the wire carry: compare codes by that name, or match the
// sentinel that carries the code with errors.Is (docs/errors.md lists
// every code, its name, blame and sentinel). Its methods: String (the
// name), Sticky (the code poisons the device), Retryable (the same request
// may succeed later, nothing changed but time) and Class (its class when
// nothing more is known).
type Code = codes.Code

// Blame is whose failure an error is. It alone decides the consequence (the
// table is in package actors' documentation): a caller's error changes no
// lane's health; a stream's recovers the lane; a device's takes every lane
// of the device out. Its String is "none", "caller", "stream" or
// "device".
type Blame = codes.Blame

// Blames.
const (
	BlameNone   = codes.BlameNone   // not a failure: success, capacity, shutdown, the caller's cancellation
	BlameCaller = codes.BlameCaller // the request is wrong, caught before its work reached the device: fix it
	BlameStream = codes.BlameStream // a non-sticky device error after work began: the stream is suspect
	BlameDevice = codes.BlameDevice // a sticky error poisoned the device: every stream of it fails
)

// Class is an error classified: what every caller, log line and span
// needs. Its fields:
//
//	Code         Code  // the stable code
//	Blame        Blame // whose failure it is
//	Retryable    bool  // the same request may succeed later with nothing changed but time
//	Sticky       bool  // the device is poisoned
//	NotSubmitted bool  // nothing of the request reached a device: fix it and resubmit, or send it elsewhere
type Class = codes.Class

// Classify classifies any error, in one place for every package: the
// outermost error in the chain that knows its class decides (a lane's
// *lanes.Error, which says whether the batch was submitted, before the
// device's *Error it wraps). Context errors are the caller's
// cancellation; an error lanes does not know is "unclassified". nil is
// success.
func Classify(err error) Class { return codes.Classify(err) }
