// Package brokerurl holds what the broker packages' URL parsers (ParseURL in
// nats, rabbitmq, redis, kafka, sqs) have in common: walking the query
// options with errors in one shape, refusing unknown options, checking files
// at start and loading TLS files. Errors never contain the URL's password:
// they show u.Redacted().
package brokerurl

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"net/url"
	"os"
)

// Each calls fn with each query option of u and its value, in no particular
// order, after refusing an option given more than once. fn returns why the
// option or its value is refused, or "" to accept it; the first refusal
// stops the walk and becomes the error "<pkg>: URL <u>: option
// <name>="<value>": <why>".
func Each(pkg string, u *url.URL, fn func(name, value string) (why string)) error {
	for name, vals := range u.Query() {
		v := vals[len(vals)-1]
		why := "given more than once"
		if len(vals) == 1 {
			why = fn(name, v)
		}
		if why != "" {
			return fmt.Errorf("%s: URL %s: option %s=%q: %s", pkg, u.Redacted(), name, v, why)
		}
	}
	return nil
}

// Known refuses a query option of u that is not among names, with the error
// "<pkg>: URL <u>: unknown option "<name>"".
func Known(pkg string, u *url.URL, names ...string) error {
	for key := range u.Query() {
		known := false
		for _, n := range names {
			known = known || n == key
		}
		if !known {
			return fmt.Errorf("%s: URL %s: unknown option %q", pkg, u.Redacted(), key)
		}
	}
	return nil
}

// Readable reports a file that cannot be opened: a typo in a certificate
// path fails at start, not as an endless outage.
func Readable(path string) error {
	f, err := os.Open(path)
	if err != nil {
		return err
	}
	return f.Close()
}

// AddTLSFiles completes tc with the private CAs in the PEM file caFile and a
// client certificate (certFile and keyFile, PEM), read now so that a wrong
// path fails at start. The options are named tls_ca, tls_cert and tls_key in
// the errors.
func AddTLSFiles(tc *tls.Config, caFile, certFile, keyFile string) error {
	if caFile != "" {
		pem, err := os.ReadFile(caFile)
		if err != nil {
			return fmt.Errorf("tls_ca: %w", err)
		}
		tc.RootCAs = x509.NewCertPool()
		if !tc.RootCAs.AppendCertsFromPEM(pem) {
			return fmt.Errorf("tls_ca: %s holds no PEM certificate", caFile)
		}
	}
	if (certFile == "") != (keyFile == "") {
		return errors.New("tls_cert and tls_key go together")
	}
	if certFile != "" {
		cert, err := tls.LoadX509KeyPair(certFile, keyFile)
		if err != nil {
			return fmt.Errorf("tls_cert, tls_key: %w", err)
		}
		tc.Certificates = []tls.Certificate{cert}
	}
	return nil
}
