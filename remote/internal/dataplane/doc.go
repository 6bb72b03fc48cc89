// Package dataplane is the same-host data plane: a segment of shared
// memory (a memfd) a lane host makes for each front on its machine, two
// rings of records and an upload area, read and written by both sides.
package dataplane
