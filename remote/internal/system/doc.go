// Package system is the actor system under a front or a lane host:
// protoactor-go's remote on one endpoint per process, the token and the
// mutual TLS rooted in it, the guard that reads nothing a connection sends
// before it proves who it is, and the combining sender both sides queue
// their messages through.
package system
