// Package host is the lane host: one process's scheduler over its devices,
// served to the fronts that join it, each under an epoch of its own;
// submissions by shard, device state, staged programs, leaving and
// withdrawing. remote.Serve starts one.
package host
