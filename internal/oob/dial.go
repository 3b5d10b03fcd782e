package oob

import (
	"context"
	"fmt"
	"net"
	"strconv"
)

// Dial connects over TCP to server (host, or host:port; the port defaults
// to defaultPort) for an out-of-band exchange; what names the server in
// the error ("connecting to the WHAT server: ...").
func Dial(ctx context.Context, server string, defaultPort int, what string) (net.Conn, error) {
	if _, _, err := net.SplitHostPort(server); err != nil {
		server = net.JoinHostPort(server, strconv.Itoa(defaultPort))
	}
	var dialer net.Dialer
	nc, err := dialer.DialContext(ctx, "tcp", server)
	if err != nil {
		return nil, fmt.Errorf("connecting to the %s server: %w", what, err)
	}
	return nc, nil
}
