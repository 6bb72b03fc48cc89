// Package front is the front: a scheduler whose lanes live in lane host
// processes. It joins (or launches) its hosts, places tenants on them,
// keeps the table of calls in flight, supervises and restarts hosts, and
// samples where calls' time goes. remote.StartFront starts one.
package front
