// Package cluster is membership: the lane hosts and fronts of one named
// cluster, found through a protoactor-go cluster provider (the automanaged
// one over seeds by default), and followed as members join and leave.
package cluster
