// Addresses of fronts and hosts: split, and loopback or not.

package wire

import (
	"fmt"
	"net"
	"strconv"
	"strings"
)

// IsLoopback reports whether host is a loopback name or address.
func IsLoopback(host string) bool {
	if strings.EqualFold(host, "localhost") {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}

// SplitAddress is an address's host and port, or ErrConfig saying what
// is wrong with it.
func SplitAddress(address string) (string, int, error) {
	host, p, err := net.SplitHostPort(address)
	if err != nil {
		why := err.Error()
		if ae, ok := err.(*net.AddrError); ok {
			why = ae.Err // without the address again
		}
		return "", 0, fmt.Errorf("%w: address %q: %s; give host:port", ErrConfig, address, why)
	}
	port, err := strconv.Atoi(p)
	if err != nil || port < 0 || port > 65535 {
		return "", 0, fmt.Errorf("%w: address %q: port %q is not 0 to 65535", ErrConfig, address, p)
	}
	if host == "" {
		return "", 0, fmt.Errorf("%w: address %q names no host: give 127.0.0.1 (or a host with TLS)", ErrConfig, address)
	}
	return host, port, nil
}
