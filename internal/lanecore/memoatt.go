// A remembered step's attribution: what a lane reuses instead of building
// a steady step's rows again.

package lanecore

import (
	"slices"

	discovery "github.com/lanesched/lanes/internal/discovery"

	lanes "github.com/lanesched/lanes/lanes"

	execcache "github.com/lanesched/lanes/internal/execcache"
)

// A tenant's steady step replays the same executables over the same
// entries every time, so its attribution (a row per entry, a record per
// segment) comes out the same every time: building it again is most of
// what a lane does per step besides the launch. A remembered step
// (stepmemo.go) keeps the attribution of its last submission that
// replayed every entry, with the executables that submission launched.
// The next submission planned from it with every entry resident launches
// without building rows; if it launched the same executables, each under
// the same key (an update in place changes an executable's key, and with
// it its graph's node counts), it shares the remembered attribution, and
// otherwise (or when it fails midway) its rows are built from what it
// launched, as they would have been.

// memoAttribution is a remembered step's shared attribution and the
// executables it describes, in launch order.
type memoAttribution struct {
	exes     []memoExecutable
	rows     []lanes.Row
	segments []lanes.SegmentRecord
}

// memoExecutable is an executable as a submission launched it: the key is
// part of its identity (an update in place changes it), and cand is the
// plan's candidate it replayed.
type memoExecutable struct {
	exe  *execcache.Executable
	key  discovery.SegmentKey
	cand int
}

// startReuse begins reusing a remembered attribution when the submission
// was planned from a remembered step that has one, with no prelude and
// every entry resident.
func (q *enqueuing) startReuse() {
	m := q.p.memo
	if m == nil || len(q.p.prelude) > 0 || m.att.rows == nil {
		return
	}
	for _, ci := range q.p.resident {
		if ci < 0 {
			return
		}
	}
	q.reuse = &m.att
}

// stopReuse builds the rows and records of the segments launched so far
// while reusing, as replay would have: the submission's own attribution
// from here on.
func (q *enqueuing) stopReuse() {
	if q.reuse == nil {
		return
	}
	q.reuse = nil
	for _, x := range q.exes {
		q.attributeSegment(q.p.disc.Candidates[x.cand], x.exe)
	}
}

// attribute sets the submission's rows: the remembered ones when it
// launched exactly the executables they describe, else its own, interned;
// a remembered step whose entries were all replayed keeps them for its
// next submission.
func (q *enqueuing) attribute() {
	l := q.l
	defer func() { l.exeScratch = q.exes[:0] }()
	if r := q.reuse; r != nil && slices.Equal(q.exes, r.exes) {
		q.att.Rows, q.att.Segments = r.rows, r.segments
		return
	}
	q.stopReuse()
	l.rowScratch = q.rows
	q.att.Rows = l.rowsSeen.intern(l.attrHash.rows(q.rows), q.rows)
	if m := q.p.memo; m != nil && q.replayedAll && len(q.p.prelude) == 0 && len(q.exes) > 0 {
		// Clipped: a receipt's holder that appends gets its own array.
		m.att = memoAttribution{exes: slices.Clone(q.exes), rows: slices.Clip(q.att.Rows), segments: slices.Clip(q.att.Segments)}
	}
}
