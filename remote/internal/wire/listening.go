// A lane host process's first line: how whoever starts the process learns
// where it serves.

package wire

import (
	"fmt"
	"net"
	"strconv"
	"strings"
)

// ListeningLine begins a lane host process's first line on standard
// output, followed by the address fronts dial ("lanehost: listening on
// 127.0.0.1:7001"); [Listening] is the whole line, [ParseListening] reads
// it.
const ListeningLine = "lanehost: listening on "

// Listening is what a lane host process's first line says: where fronts
// reach it, where it is bound when that differs, and its cluster
// membership endpoint. It lets whoever starts a host on port 0 (the
// default) learn its ports from the host itself, so that no one picks a
// free port first and hopes it stays free.
type Listening struct {
	// Address is where fronts reach the host: its advertised address,
	// else where it listens.
	Address string
	// Bound is where it listens, when it advertises another address (a
	// proxy's, a port mapping's); else "".
	Bound string
	// Membership is its cluster membership endpoint; "" outside a cluster.
	Membership string
}

// String is the line, without its newline:
//
//	lanehost: listening on ADDRESS [bound ADDRESS] [membership ADDRESS]
func (l Listening) String() string {
	s := ListeningLine + l.Address
	if l.Bound != "" && l.Bound != l.Address {
		s += " bound " + l.Bound
	}
	if l.Membership != "" {
		s += " membership " + l.Membership
	}
	return s
}

// ParseListening reads a lane host process's first line (surrounding
// space ignored); its error says what the line should have been.
func ParseListening(line string) (Listening, error) {
	rest, ok := strings.CutPrefix(strings.TrimSpace(line), ListeningLine)
	words := strings.Fields(rest)
	if !ok || len(words) == 0 || len(words)%2 == 0 {
		return Listening{}, fmt.Errorf("remote: a lane host's first line %q: want %q", strings.TrimSpace(line), ListeningLine+"ADDRESS [bound ADDRESS] [membership ADDRESS]")
	}
	bad := func(format string, args ...any) (Listening, error) {
		return Listening{}, fmt.Errorf("remote: a lane host's first line %q: %s", strings.TrimSpace(line), fmt.Sprintf(format, args...))
	}
	l := Listening{Address: words[0]}
	for i := 1; i < len(words); i += 2 {
		field := map[string]*string{"bound": &l.Bound, "membership": &l.Membership}[words[i]]
		switch {
		case field == nil:
			return bad("unknown field %q: a host says bound and membership, no other", words[i])
		case *field != "":
			return bad("%s given twice", words[i])
		}
		*field = words[i+1]
	}
	for _, a := range []struct{ name, addr string }{{"address", l.Address}, {"bound", l.Bound}, {"membership", l.Membership}} {
		if a.addr == "" {
			continue
		}
		host, port, err := net.SplitHostPort(a.addr)
		if n, perr := strconv.Atoi(port); err != nil || host == "" || perr != nil || n < 1 || n > 65535 {
			return bad("its %s %q is not host:port (a port 1 to 65535)", a.name, a.addr)
		}
	}
	if l.Bound == l.Address {
		l.Bound = "" // bound where it is reached: nothing to say
	}
	return l, nil
}
