// Package dberr turns the errors of connecting to PostgreSQL that waiting
// cannot cure into one line naming the cause and the fix: a server
// certificate the client refuses (wrong CA, wrong host name, expired), a
// server that refuses TLS. The relay, the outbox command and the console
// use it, so each says the same.
package dberr

import (
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"net"
	"net/url"
	"os"
	"regexp"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
)

// ErrTLS is matched by the errors TLS returns: the TLS connection to
// PostgreSQL could not be set up, and retrying will not change that.
var ErrTLS = errors.New("TLS to PostgreSQL")

// tlsError is a TLS failure described for an operator; it matches ErrTLS
// and unwraps to pgx's error.
type tlsError struct {
	msg string
	err error
}

func (e *tlsError) Error() string   { return e.msg }
func (e *tlsError) Unwrap() []error { return []error{ErrTLS, e.err} }

// TLS returns err described in one line when it is a TLS failure of a
// connection made with cfg (a certificate that does not verify, a server
// that refuses TLS), and nil otherwise. The line names the server, what
// is wrong (the CA file, the host name and the names the certificate is
// valid for, the validity period) and the fix.
func TLS(cfg *pgx.ConnConfig, err error) error {
	if err == nil || errors.Is(err, ErrTLS) {
		return nil
	}
	server := "the server"
	if cfg != nil {
		server = net.JoinHostPort(cfg.Host, strconv.Itoa(int(cfg.Port)))
	}
	rootCert := ""
	if cfg != nil {
		rootCert = SSLRootCert(cfg.ConnString())
	}
	ca := "any of the system's CAs (no sslrootcert is set)"
	if rootCert != "" {
		ca = "the CA in sslrootcert=" + rootCert
	}
	var (
		unknown  x509.UnknownAuthorityError
		hostname x509.HostnameError
		invalid  x509.CertificateInvalidError
	)
	var msg string
	switch {
	case errors.As(err, &unknown):
		issuer := ""
		if unknown.Cert != nil {
			issuer = fmt.Sprintf(" (issued by %q)", unknown.Cert.Issuer.String())
		}
		msg = fmt.Sprintf("TLS to PostgreSQL at %s: the server's certificate%s is not signed by %s: set sslrootcert in the connection string to the file of the CA that signed it (x509: certificate signed by unknown authority)",
			server, issuer, ca)
	case errors.As(err, &hostname):
		msg = fmt.Sprintf("TLS to PostgreSQL at %s: the server's certificate is valid for %s, not %s: connect with a host name the certificate names, or have the certificate issued for %s (sslmode=verify-full checks the host name)",
			server, certNames(hostname.Certificate), hostname.Host, hostname.Host)
	case errors.As(err, &invalid) && invalid.Reason == x509.Expired && invalid.Cert != nil:
		msg = fmt.Sprintf("TLS to PostgreSQL at %s: the server's certificate is valid from %s to %s, not now (%s): renew the server's certificate, or fix this host's clock",
			server, invalid.Cert.NotBefore.UTC().Format(time.RFC3339), invalid.Cert.NotAfter.UTC().Format(time.RFC3339), time.Now().UTC().Format(time.RFC3339))
	case errors.As(err, &invalid):
		msg = fmt.Sprintf("TLS to PostgreSQL at %s: the server's certificate is refused: %v: fix the server's certificate, or the connection string's sslrootcert", server, invalid)
	case strings.Contains(err.Error(), "server refused TLS connection"):
		msg = fmt.Sprintf("TLS to PostgreSQL at %s: the server does not offer TLS (ssl=off): turn ssl on on the server, or connect with a lower sslmode than the connection string's", server)
	case strings.Contains(err.Error(), "tls: ") && !transient(err):
		msg = fmt.Sprintf("TLS to PostgreSQL at %s: the handshake failed: %s: check the server's ssl settings and the connection string's sslmode, sslrootcert, sslcert and sslkey", server, tlsTail(err.Error()))
	default:
		return nil
	}
	return &tlsError{msg: msg, err: err}
}

// transient reports a network failure during the handshake (a reset, a
// timeout, a server that hung up): an outage to wait out, not TLS's
// configuration.
func transient(err error) bool {
	var op *net.OpError
	return errors.As(err, &op) || errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) || errors.Is(err, os.ErrDeadlineExceeded)
}

// certNames lists the names a certificate is valid for: its DNS names and
// IP addresses, or its common name when it has neither.
func certNames(c *x509.Certificate) string {
	if c == nil {
		return "other names"
	}
	var names []string
	for _, ip := range c.IPAddresses {
		names = append(names, ip.String())
	}
	names = append(names, c.DNSNames...)
	if len(names) == 0 && c.Subject.CommonName != "" {
		names = append(names, c.Subject.CommonName+" (common name only, which Go ignores)")
	}
	if len(names) == 0 {
		return "no name"
	}
	return strings.Join(names, ", ")
}

// tlsTail is the part of pgx's message from "tls: " on.
func tlsTail(s string) string {
	if i := strings.Index(s, "tls: "); i >= 0 {
		return s[i:]
	}
	return s
}

var keywordRootCert = regexp.MustCompile(`(?:^|\s)sslrootcert\s*=\s*('(?:[^'\\]|\\.)*'|\S+)`)

// SSLRootCert returns the sslrootcert a connection string sets (URL or
// keyword form), else PGSSLROOTCERT, else "".
func SSLRootCert(connString string) string {
	if strings.HasPrefix(connString, "postgres://") || strings.HasPrefix(connString, "postgresql://") {
		if u, err := url.Parse(connString); err == nil {
			if v := u.Query().Get("sslrootcert"); v != "" {
				return v
			}
		}
	} else if m := keywordRootCert.FindStringSubmatch(connString); m != nil {
		v := m[1]
		if strings.HasPrefix(v, "'") {
			v = strings.NewReplacer(`\'`, `'`, `\\`, `\`).Replace(strings.Trim(v, "'"))
		}
		return v
	}
	return os.Getenv("PGSSLROOTCERT")
}
