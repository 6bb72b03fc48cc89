package remote

import "crypto/tls"

// LocalTLSOf is the TLS configuration a process holding the token of that
// file speaks with (a fresh key each call), for tests that talk to
// endpoints by hand.
func LocalTLSOf(tokenFile string) (*tls.Config, error) {
	t, err := loadToken(tokenFile)
	if err != nil {
		return nil, err
	}
	return localTLS(t)
}
