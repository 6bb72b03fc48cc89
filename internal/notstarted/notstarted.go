// Package notstarted is the error of a call on a value its constructor did
// not make (a nil or zero Server, Scheduler, Front or Host): one type for
// every package that answers such calls.
package notstarted

// Error says what was not started and what to use instead, and is
// errors.Is the sentinel of a stopped one (actors.ErrStopped), so it
// classifies as stopped.
type Error struct {
	Msg     string
	Stopped error
}

// Error is the message.
func (e *Error) Error() string { return e.Msg }

// Unwrap is the stopped sentinel.
func (e *Error) Unwrap() error { return e.Stopped }
