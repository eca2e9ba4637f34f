package mm

import (
	"context"
	"fmt"
	"net"
	"net/netip"
	"net/url"
	"strings"
	"syscall"
	"time"
)

// blockedPrefixes are the destinations the size probe refuses unless allowed (Dynamo's
// MediaFetcher list, plus the NAT64 prefix whose low 32 bits embed an IPv4 address).
var blockedPrefixes = mustPrefixes(
	"0.0.0.0/8", "10.0.0.0/8", "100.64.0.0/10", "127.0.0.0/8", "169.254.0.0/16", "172.16.0.0/12",
	"192.0.0.0/24", "192.0.2.0/24", "192.168.0.0/16", "198.18.0.0/15", "198.51.100.0/24",
	"203.0.113.0/24", "224.0.0.0/4", "240.0.0.0/4", "255.255.255.255/32",
	"::/128", "::1/128", "::ffff:0:0/96", "64:ff9b::/96", "fc00::/7", "fe80::/10", "ff00::/8",
)

// blockedHosts are host names refused before resolution (cloud metadata endpoints, localhost).
var blockedHosts = []string{"localhost", "metadata.google.internal", "metadata"}

func mustPrefixes(cidrs ...string) []netip.Prefix {
	out := make([]netip.Prefix, len(cidrs))
	for i, c := range cidrs {
		out[i] = netip.MustParsePrefix(c)
	}
	return out
}

// Guard is the SSRF policy of the size probe. The check runs on the resolved address at connect time
// (Dialer.Control), so a DNS answer that changes between check and use, or a redirect to an internal
// address, is still refused. Immutable after NewGuard; safe for concurrent use.
type Guard struct {
	allowHosts    map[string]bool
	allowPrefixes []netip.Prefix
	// lookup resolves a host name for CheckURL; nil is net.DefaultResolver (tests replace it).
	lookup func(ctx context.Context, host string) ([]netip.Addr, error)
}

// NewGuard builds a guard from --media-allow-hosts values: host names (exact, case-insensitive; all of
// their addresses are then allowed), IP addresses, or CIDRs.
func NewGuard(allow []string) (*Guard, error) {
	g := &Guard{allowHosts: map[string]bool{}}
	for _, a := range allow {
		a = strings.TrimSpace(a)
		if a == "" {
			continue
		}
		if p, err := netip.ParsePrefix(a); err == nil {
			g.allowPrefixes = append(g.allowPrefixes, p.Masked())
			continue
		}
		if ip, err := netip.ParseAddr(a); err == nil {
			g.allowPrefixes = append(g.allowPrefixes, netip.PrefixFrom(ip.Unmap(), ip.Unmap().BitLen()))
			continue
		}
		if strings.ContainsAny(a, "/ :") {
			return nil, fmt.Errorf("mm: --media-allow-hosts entry %q is neither a host name, an IP nor a CIDR", a)
		}
		g.allowHosts[strings.ToLower(strings.TrimSuffix(a, "."))] = true
	}
	return g, nil
}

// ParseAllowHosts splits a --media-allow-hosts value ("127.0.0.1,images.internal,10.0.0.0/8") into
// NewGuard entries.
func ParseAllowHosts(flag string) []string {
	var out []string
	for _, f := range strings.Split(flag, ",") {
		if f = strings.TrimSpace(f); f != "" {
			out = append(out, f)
		}
	}
	return out
}

// hostAllowed reports whether host is named in the allow-list.
func (g *Guard) hostAllowed(host string) bool {
	return g != nil && g.allowHosts[strings.ToLower(strings.TrimSuffix(host, "."))]
}

// CheckHost refuses a URL host by name before any resolution (localhost, metadata names), unless the
// name is allowed.
func (g *Guard) CheckHost(host string) error {
	h := strings.ToLower(strings.TrimSuffix(host, "."))
	if g.hostAllowed(h) {
		return nil
	}
	for _, b := range blockedHosts {
		if h == b || strings.HasSuffix(h, ".localhost") {
			return fmt.Errorf("%w: host %s", ErrBlockedAddress, host)
		}
	}
	if ip, err := netip.ParseAddr(strings.Trim(h, "[]")); err == nil {
		return g.CheckAddr(ip)
	}
	return nil
}

// CheckAddr refuses an address in a blocked range unless an allowed IP or CIDR covers it.
func (g *Guard) CheckAddr(ip netip.Addr) error {
	ip = ip.Unmap().WithZone("") // a zoned address never matches a prefix
	if g != nil {
		for _, p := range g.allowPrefixes {
			if p.Contains(ip) {
				return nil
			}
		}
	}
	for _, p := range blockedPrefixes {
		if p.Contains(ip) {
			return fmt.Errorf("%w: %s is in %s", ErrBlockedAddress, ip, p)
		}
	}
	return nil
}

// dialContext resolves the host, then dials with a Control hook that checks every address actually
// connected to. A host name in the allow-list admits all of its addresses.
func (g *Guard) dialContext(d *net.Dialer) func(ctx context.Context, network, addr string) (net.Conn, error) {
	return func(ctx context.Context, network, addr string) (net.Conn, error) {
		host, _, err := net.SplitHostPort(addr)
		if err != nil {
			return nil, fmt.Errorf("%w: %v", ErrFetch, err)
		}
		if err := g.CheckHost(host); err != nil {
			return nil, err
		}
		dd := *d
		dd.Control = g.control(g.hostAllowed(host))
		return dd.DialContext(ctx, network, addr)
	}
}

// control is the connect-time check: it sees the resolved address of every connection attempt
// (each address of a multi-address host, each redirect hop). byName skips it for a host name the
// allow-list names.
func (g *Guard) control(byName bool) func(network, address string, c syscall.RawConn) error {
	return func(_, address string, _ syscall.RawConn) error {
		if byName {
			return nil
		}
		ap, err := netip.ParseAddrPort(address)
		if err != nil {
			return fmt.Errorf("%w: unparsable address %q", ErrBlockedAddress, address)
		}
		return g.CheckAddr(ap.Addr())
	}
}

// lookupTimeout bounds one host name resolution of CheckURL.
const lookupTimeout = 2 * time.Second

// CheckURL screens a media URL that kvroute forwards to a worker, which fetches it: refused unless it
// is a data: URI, or an http(s) URL whose host is not internal. The host is taken as the WHATWG URL
// parser takes it (numeric IPv4 forms such as 2130706433, 127.1, 0x7f.1 and 017700000001 are IPv4
// addresses, as they are to glibc and to vLLM), a host name is resolved and every address checked, and
// a URL that parsers read differently (a backslash or userinfo trick in the authority, a host that does
// not resolve) is refused rather than guessed at. Nothing is fetched.
func (g *Guard) CheckURL(ctx context.Context, raw string) error {
	norm, err := NormalizeURL(raw)
	if err != nil {
		return err
	}
	scheme, rest, _ := strings.Cut(norm, ":")
	switch scheme {
	case "data":
		return nil
	case "http", "https":
	default:
		return fmt.Errorf("%w: %q (media URLs are http, https or data)", ErrUnsupportedScheme, scheme)
	}
	// The authority as sent: a parser that does not treat '\' as a separator (Python's urllib) would
	// read another host from it than the WHATWG parser.
	auth := raw[strings.IndexByte(raw, ':')+1:] // NormalizeURL found the scheme's colon
	auth = strings.TrimLeft(auth, "/\\\t\n\r")
	if end := strings.IndexAny(auth, "/?#"); end >= 0 {
		auth = auth[:end]
	}
	if strings.ContainsAny(auth, "\\@") {
		return fmt.Errorf("%w: userinfo or a backslash in the URL authority", ErrBlockedAddress)
	}
	u, err := url.Parse(scheme + ":" + rest)
	if err != nil {
		return fmt.Errorf("%w: %v", ErrBadURL, err)
	}
	host := u.Hostname()
	if err := g.CheckHost(host); err != nil {
		return err
	}
	if _, err := netip.ParseAddr(host); err == nil || g.hostAllowed(host) {
		return nil // an address CheckHost checked, or a name the allow-list admits
	}
	ctx, cancel := context.WithTimeout(ctx, lookupTimeout)
	defer cancel()
	var lookup func(ctx context.Context, host string) ([]netip.Addr, error)
	if g != nil {
		lookup = g.lookup
	}
	if lookup == nil {
		lookup = func(ctx context.Context, host string) ([]netip.Addr, error) {
			return net.DefaultResolver.LookupNetIP(ctx, "ip", host)
		}
	}
	addrs, err := lookup(ctx, host)
	if err != nil {
		return fmt.Errorf("%w: host %s does not resolve here: %v", ErrBlockedAddress, host, err)
	}
	for _, a := range addrs {
		if err := g.CheckAddr(a); err != nil {
			return fmt.Errorf("%w (host %s)", err, host)
		}
	}
	return nil
}

// DialContext dials addr after checking its host by name and, at connect time, every resolved address
// (the guard of the size probe, for other fetchers such as the simulated worker).
func (g *Guard) DialContext(d *net.Dialer) func(ctx context.Context, network, addr string) (net.Conn, error) {
	return g.dialContext(d)
}
