package system

import (
	"context"
	"net"
	"testing"

	"google.golang.org/grpc"
	"google.golang.org/grpc/connectivity"
	"google.golang.org/grpc/credentials/insecure"
)

// TestAConnectionThatNeverGotThroughIsClosed: a stream to an address where
// nothing listens fails, and its connection is closed with it (it would
// redial in the background for good).
func TestAConnectionThatNeverGotThroughIsClosed(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	_ = ln.Close() // nothing listens there now
	cc, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()), grpc.WithChainStreamInterceptor(closeUnanswered))
	if err != nil {
		t.Fatal(err)
	}
	defer cc.Close()
	_, err = cc.NewStream(context.Background(), &grpc.StreamDesc{ClientStreams: true, ServerStreams: true}, "/x/y")
	if err == nil {
		t.Fatal("a stream to an address where nothing listens: got nil err, want the dial's failure")
	}
	if got := cc.GetState(); got != connectivity.Shutdown {
		t.Errorf("its connection: got %v, want %v (closed)", got, connectivity.Shutdown)
	}
}
