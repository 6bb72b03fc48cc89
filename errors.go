package lanes

import "strings"

// serverError is an error a Server or Start returns: its text reads
// "lanes: ..." whichever package below made it, and errors.Is, errors.As
// and Classify see its cause as before.
type serverError struct{ cause error }

// Error is the cause's text under this package's prefix.
func (e *serverError) Error() string {
	msg := e.cause.Error()
	for _, prefix := range [...]string{"lanes: ", "actors: ", "remote: ", "cuda: "} {
		if rest, ok := strings.CutPrefix(msg, prefix); ok {
			msg = rest
			break
		}
	}
	return "lanes: " + msg
}

// Unwrap is the cause.
func (e *serverError) Unwrap() error { return e.cause }

// named gives *err this package's prefix (nil stays nil).
func named(err *error) {
	if *err != nil {
		if _, done := (*err).(*serverError); !done {
			*err = &serverError{cause: *err}
		}
	}
}

// pending is a submission the server admitted: its Result's error reads
// "lanes: ..." as the server's own errors do.
type pending struct{ Pending }

// Result waits for the end and returns the receipt and error.
func (p pending) Result() (Receipt, error) {
	r, err := p.Pending.Result()
	named(&err)
	return r, err
}
