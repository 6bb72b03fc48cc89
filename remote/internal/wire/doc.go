// Package wire is what crosses between a front and its lane hosts: batches,
// receipts, programs, modules and library calls to and from the protobuf
// messages of internal/wirepb, checked against the limits both sides hold
// each other to; the hello of a registration; the names both sides agree
// on; and the errors either side answers with, which remote names for its
// users.
package wire
