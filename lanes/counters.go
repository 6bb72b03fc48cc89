// A lane's counters: what it submitted, replayed, captured and moved.

package lanes

// Counters are a lane's replay observations since it was made. Evictions
// are executables removed to make room (the "evicted" cache events); an
// in-place update, which re-keys an executable, is counted in Updated
// alone.
type Counters struct {
	Submissions, Refused, Failures                           uint64
	Candidates, Captured, Uploaded, Hits                     uint64
	CaptureRejections, CachedRejections                      uint64
	QuiescenceDeferred, CapacityDeferred, OutsidePreparation uint64
	Evictions, ReplayedSegments, EagerCommands               uint64
	Invocations, Updated, UpdateRefusals                     uint64
	// RememberedPlans are submissions equal to a batch the lane planned
	// before: they skipped validating their commands and discovering their
	// segments again (their handles are checked again after any free).
	RememberedPlans uint64
	// SyncPoints are blocking waits made; SpeculativeHits the waits a
	// non-blocking query made unnecessary.
	SyncPoints, SpeculativeHits uint64
	// CacheBytes is the host memory the lane's executables retain now
	// (the uploads they captured), resident and retired.
	CacheBytes int64
	// ExecutableDeviceBytes is the device memory the lane's executables
	// hold now, resident and retired, as their device measures it;
	// Executables is how many are resident.
	ExecutableDeviceBytes int64
	Executables           int
	// Rebound counts the in-place updates made by parameters alone, with
	// no capture (also counted in Updated): a cache full of executables of
	// a miss's shape, or one whose preparation has closed, serves misses
	// that way (docs/replays.md). RebindRefusals counts the refusals of
	// such updates: the candidate was captured instead while it could be,
	// else ran eagerly.
	Rebound, RebindRefusals uint64
	// Warmed counts the executables a rebuilt lane captured again before
	// it took traffic (Warm); WarmSkipped those it did not.
	Warmed, WarmSkipped uint64
	// LibrarySetups counts libraries' Setup runs on the lane (one per
	// library, and one more after each rebuild); LibraryWorkspaceBytes is
	// the device memory their workspaces hold now (cuda.Library).
	LibrarySetups         uint64
	LibraryWorkspaceBytes int64
}
