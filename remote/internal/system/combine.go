// A combining sender: whoever queues a message while no one is sending
// sends it, with everything others queued meanwhile, as one remote
// message. Under load many ride in one message; alone, a message goes at
// once, with no hand-off to a sender goroutine. Queuing takes no lock (a
// compare-and-swap onto a list), so many callers queuing at once do not
// wait on each other.

package system

import "sync/atomic"

// Combiner queues items and has one caller at a time send them in
// batches, in the order they were queued.
type Combiner[T any] struct {
	queued  Stack[T]
	sending atomic.Bool
	Most    int             // items per batch
	Send    func(batch []T) // called by one caller at a time
}

// Add queues item; if no one is sending, the caller sends until the
// queue is empty.
func (c *Combiner[T]) Add(item T) {
	c.queued.Push(item)
	// A caller that finds another sending leaves its item to that sender,
	// which looks again after it stops sending: nothing is left behind.
	for c.sending.CompareAndSwap(false, true) {
		for items := c.queued.Take(nil); len(items) > 0; items = c.queued.Take(nil) {
			for len(items) > 0 {
				n := min(len(items), c.Most)
				c.Send(items[:n:n])
				items = items[n:]
			}
		}
		c.sending.Store(false)
		if c.queued.empty() {
			return
		}
	}
}

// Stack is a list that any goroutine pushes onto without a lock (a
// compare-and-swap) and one takes off whole.
type Stack[T any] struct {
	top atomic.Pointer[queuedItem[T]] // newest first
}

type queuedItem[T any] struct {
	v    T
	next *queuedItem[T]
}

// Push puts v on the stack.
func (s *Stack[T]) Push(v T) {
	q := &queuedItem[T]{v: v}
	for {
		q.next = s.top.Load()
		if s.top.CompareAndSwap(q.next, q) {
			return
		}
	}
}

// Take takes everything pushed so far off the stack and appends it to
// into, oldest first.
func (s *Stack[T]) Take(into []T) []T {
	start := len(into)
	for q := s.top.Swap(nil); q != nil; q = q.next {
		into = append(into, q.v)
	}
	for i, j := start, len(into)-1; i < j; i, j = i+1, j-1 {
		into[i], into[j] = into[j], into[i]
	}
	return into
}

func (s *Stack[T]) empty() bool { return s.top.Load() == nil }
