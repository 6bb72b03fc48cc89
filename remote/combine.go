// A combining sender: whoever queues a message while no one is sending
// sends it, with everything others queued meanwhile, as one remote
// message. Under load many ride in one message; alone, a message goes at
// once, with no hand-off to a sender goroutine. Queuing takes no lock (a
// compare-and-swap onto a list), so many callers queuing at once do not
// wait on each other.

package remote

import "sync/atomic"

// combiner queues items and has one caller at a time send them in
// batches, in the order they were queued.
type combiner[T any] struct {
	queued  stack[T]
	sending atomic.Bool
	most    int             // items per batch
	send    func(batch []T) // called by one caller at a time
}

// add queues item; if no one is sending, the caller sends until the
// queue is empty.
func (c *combiner[T]) add(item T) {
	c.queued.push(item)
	// A caller that finds another sending leaves its item to that sender,
	// which looks again after it stops sending: nothing is left behind.
	for c.sending.CompareAndSwap(false, true) {
		for items := c.queued.take(nil); len(items) > 0; items = c.queued.take(nil) {
			for len(items) > 0 {
				n := min(len(items), c.most)
				c.send(items[:n:n])
				items = items[n:]
			}
		}
		c.sending.Store(false)
		if c.queued.empty() {
			return
		}
	}
}

// stack is a list that any goroutine pushes onto without a lock (a
// compare-and-swap) and one takes off whole.
type stack[T any] struct {
	top atomic.Pointer[queuedItem[T]] // newest first
}

type queuedItem[T any] struct {
	v    T
	next *queuedItem[T]
}

func (s *stack[T]) push(v T) {
	q := &queuedItem[T]{v: v}
	for {
		q.next = s.top.Load()
		if s.top.CompareAndSwap(q.next, q) {
			return
		}
	}
}

// take takes everything pushed so far off the stack and appends it to
// into, oldest first.
func (s *stack[T]) take(into []T) []T {
	start := len(into)
	for q := s.top.Swap(nil); q != nil; q = q.next {
		into = append(into, q.v)
	}
	for i, j := start, len(into)-1; i < j; i, j = i+1, j-1 {
		into[i], into[j] = into[j], into[i]
	}
	return into
}

func (s *stack[T]) empty() bool { return s.top.Load() == nil }
