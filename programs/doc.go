// Package programs is the program half of lanes: a plan's node-indexed
// topology, registered while a lane's cache is open for preparation and
// replayed later by reference.
//
// A program is a plan's nodes, split into resident segments (each replayed
// by one cached executable), declared eager boundaries, and typed gaps: every
// node is in exactly one of these. Updates are monotonic: a segment keeps
// its identity until an explicit eviction rewrites it into gaps. Once the
// cache is sealed the catalog is readable, and a submission may invoke a
// program segment by reference ([Invocation]), validated against the
// lane's catalog (internal/catalog) before anything is enqueued.
//
// # Concurrency properties
//
// A catalog belongs to the lane that owns its cache; nothing here is safe
// for concurrent use.
package programs
