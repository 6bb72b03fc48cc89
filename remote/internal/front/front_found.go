// What a front found at a host's address while it waited for the host to
// register: a peer that refuses its credential, something that is no lane
// host, or nothing at all, so that StartFront says why it gave up.

package front

import (
	"errors"
	"fmt"
	"net"

	wire "github.com/lanesched/lanes/remote/internal/wire"
)

// checkCredential asks, off the caller's goroutine, whether what listens
// at the host's address and this front admit each other (a TLS handshake
// of their credentials); the verdict lands in credErr for
// credentialRefused, and what was found in found (whyNoHost). One check
// at a time.
func (l *Link) checkCredential() {
	at := l.at.Load()
	if at == nil || *at == "" || !l.checking.CompareAndSwap(false, true) {
		return
	}
	go func() {
		defer l.checking.Store(false)
		refused, found := l.F.Sys.Guard.AdmittedBy(*at, func() {
			l.setFound(fmt.Errorf("what listens at %s took a connection but has not completed a TLS handshake with this front", *at))
		})
		l.setFound(found)
		if refused != nil {
			l.credErr.Store(&refused)
			return
		}
		l.credErr.Store(nil)
	}()
}

// setFound records what the last check found at the host's address (nil:
// a peer that admits the front).
func (l *Link) setFound(err error) {
	if err == nil {
		l.found.Store(nil)
		return
	}
	l.found.Store(&err)
}

// credentialRefused is why the host's address refused this front's
// credential (or showed none of its own) at the last check; nil if it did
// not, or was not checked.
func (l *Link) credentialRefused() error {
	if p := l.credErr.Load(); p != nil {
		return *p
	}
	return nil
}

// whyNoHost says what the front knows of a host that did not register in
// time: a launched one that has not said where it listens, what the last
// check found at its address (nothing, or something that is no lane
// host), or that a lane host answers there but not to this front.
func (l *Link) whyNoHost() string {
	l.mu.Lock()
	launched, proc, addr := l.launch != nil, l.proc, l.addr
	l.mu.Unlock()
	if launched && proc == nil {
		return fmt.Sprintf("%s was started, but has not said where it listens (its first line: %q and an address)", l.launch.Path, wire.ListeningLine)
	}
	where := ""
	if launched {
		where = fmt.Sprintf("the process (%d) said it listens at %s; ", proc.Pid, addr)
	}
	if p := l.found.Load(); p != nil {
		if oe := (*net.OpError)(nil); errors.As(*p, &oe) && oe.Op == "dial" {
			return where + "nothing accepts connections there: " + (*p).Error()
		}
		return where + (*p).Error()
	}
	return where + "a peer that admits this front answers there, but it did not register with it"
}
