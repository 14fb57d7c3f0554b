package webhook

import (
	"errors"
	"fmt"
	"net/netip"
	"syscall"
)

// ErrBlockedAddress is returned (wrapped) when a webhook target resolves to
// an address the SSRF policy refuses: loopback, private, link-local
// (including the 169.254.169.254 cloud metadata service), unspecified,
// multicast, carrier-grade NAT, or another reserved range. The configured
// endpoint refused is a configuration error that every event would hit: it
// is classified unavailable (the relay keeps the events, counts no attempt
// and reports not ready). A host taken from the event (a placeholder in
// Config.URL's host) refused is that event's: permanent. Set
// Config.AllowPrivateNetworks to deliver to internal services.
var ErrBlockedAddress = errors.New("webhook: target address refused by the SSRF policy")

// blockedPrefixes are ranges netip's predicates do not cover.
var blockedPrefixes = []struct {
	p    netip.Prefix
	what string
}{
	{netip.MustParsePrefix("0.0.0.0/8"), "\"this network\" (0.0.0.0/8)"},
	{netip.MustParsePrefix("100.64.0.0/10"), "carrier-grade NAT (100.64.0.0/10)"},
	{netip.MustParsePrefix("192.0.0.0/24"), "IETF protocol assignments (192.0.0.0/24)"},
	{netip.MustParsePrefix("192.0.2.0/24"), "documentation (192.0.2.0/24)"},
	{netip.MustParsePrefix("198.18.0.0/15"), "benchmarking (198.18.0.0/15)"},
	{netip.MustParsePrefix("198.51.100.0/24"), "documentation (198.51.100.0/24)"},
	{netip.MustParsePrefix("203.0.113.0/24"), "documentation (203.0.113.0/24)"},
	{netip.MustParsePrefix("240.0.0.0/4"), "reserved (240.0.0.0/4, including broadcast)"},
	{netip.MustParsePrefix("64:ff9b::/96"), "NAT64 (64:ff9b::/96)"},
	{netip.MustParsePrefix("64:ff9b:1::/48"), "local NAT64 (64:ff9b:1::/48)"},
	{netip.MustParsePrefix("100::/64"), "discard-only (100::/64)"},
	{netip.MustParsePrefix("2001:db8::/32"), "documentation (2001:db8::/32)"},
	{netip.MustParsePrefix("2002::/16"), "6to4 (2002::/16)"},
	{netip.MustParsePrefix("2001::/32"), "Teredo (2001::/32)"},
}

// blockedReason says why ip is refused, or "" if it is a public unicast
// address. IPv4-mapped IPv6 addresses are judged as the IPv4 address.
func blockedReason(ip netip.Addr) string {
	ip = ip.Unmap()
	switch {
	case !ip.IsValid():
		return "not an IP address"
	case ip.IsUnspecified():
		return "unspecified"
	case ip.IsLoopback():
		return "loopback"
	case ip.IsPrivate():
		return "private"
	case ip.IsLinkLocalUnicast():
		return "link-local (cloud metadata services live here)"
	case ip.IsMulticast(), ip.IsLinkLocalMulticast(), ip.IsInterfaceLocalMulticast():
		return "multicast"
	case ip.Zone() != "":
		return "scoped to an interface"
	}
	for _, b := range blockedPrefixes {
		if b.p.Contains(ip) {
			return b.what
		}
	}
	return ""
}

// control runs on every connection the publisher's dialer makes, after name
// resolution and before connect(2): the address it sees is the one the
// socket is about to reach, so a hostname that resolves, or later
// re-resolves (DNS rebinding), to a refused address is caught with no packet
// sent.
func (p *Publisher) control(network, address string, _ syscall.RawConn) error {
	if network != "tcp4" && network != "tcp6" {
		return fmt.Errorf("%w: network %q", ErrBlockedAddress, network)
	}
	ap, err := netip.ParseAddrPort(address)
	if err != nil {
		return fmt.Errorf("%w: unparsable address %q", ErrBlockedAddress, address)
	}
	if !p.allowPrivate {
		if why := blockedReason(ap.Addr()); why != "" {
			return fmt.Errorf("%w: %s is %s (allow it with Config.AllowPrivateNetworks, or outbox_allow_private_networks=true in the relay's broker URL)", ErrBlockedAddress, ap.Addr(), why)
		}
	}
	if p.dialGuard != nil {
		return p.dialGuard(ap)
	}
	return nil
}
