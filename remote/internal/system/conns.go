// Client connections that never got through are closed.

package system

import (
	"context"
	"sync/atomic"

	"google.golang.org/grpc"
)

// closeUnanswered closes a client connection whose stream never heard
// from its peer. protoactor-go's endpoint writer dials afresh for each of
// its connect attempts and leaves the connection of a failed one open;
// gRPC then redials it in the background for the life of the process
// (goroutines that pile up while a host is down, and after its front
// stopped). The writer never uses such a connection again, so it is
// closed here, where the attempt fails.
func closeUnanswered(ctx context.Context, desc *grpc.StreamDesc, cc *grpc.ClientConn, method string, streamer grpc.Streamer, opts ...grpc.CallOption) (grpc.ClientStream, error) {
	s, err := streamer(ctx, desc, cc, method, opts...)
	if err != nil {
		_ = cc.Close()
		return nil, err
	}
	return &answerWatch{ClientStream: s, cc: cc}, nil
}

// answerWatch closes its connection when the stream fails before its
// first answer (the writer's connect request, or its response).
type answerWatch struct {
	grpc.ClientStream
	cc       *grpc.ClientConn
	answered atomic.Bool
}

// SendMsg sends, closing the connection on a failure before any answer.
func (s *answerWatch) SendMsg(m any) error {
	err := s.ClientStream.SendMsg(m)
	if err != nil && !s.answered.Load() {
		_ = s.cc.Close()
	}
	return err
}

// RecvMsg receives, closing the connection on a failure before any answer.
func (s *answerWatch) RecvMsg(m any) error {
	err := s.ClientStream.RecvMsg(m)
	switch {
	case err == nil:
		s.answered.Store(true)
	case !s.answered.Load():
		_ = s.cc.Close()
	}
	return err
}
